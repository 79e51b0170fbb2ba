"""Converting to and from Anthropic's messages format, and placing its prompt-cache breakpoints."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from loomctx.errors import ConfigError, MessageFormatError
from loomctx.messages._model import Message, ToolCall
from loomctx.messages._wire import joined_text, located, mapping, not_text, text_part
from loomctx.parts import Part, TextPart, part_from_anthropic, part_to_anthropic

__all__ = [
    "CACHE_CONTROL",
    "CacheMarks",
    "from_anthropic",
    "mark_anthropic_cache",
    "to_anthropic",
]


def _anthropic_blocks(m: Message) -> list[dict[str, Any]]:
    if m.role == "tool":
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": m.tool_call_id,
            "content": m.content,
        }
        if m.parts:  # text, images and documents, in order
            block["content"] = [
                part_to_anthropic(p) for p in m.parts if not isinstance(p, TextPart) or p.text
            ]
        if m.is_error:
            block["is_error"] = True
        return [block]
    if m.parts:
        return [part_to_anthropic(p) for p in m.parts if not isinstance(p, TextPart) or p.text]
    blocks: list[dict[str, Any]] = [{"type": "text", "text": m.content}] if m.content else []
    blocks.extend(
        {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)}
        for c in m.tool_calls
    )
    return blocks


def to_anthropic(messages: Iterable[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """Convert to Anthropic messages; return `(system, messages)`.

    Anthropic takes the system prompt as a separate parameter, so every non-empty system
    message, wherever it sits, is hoisted into `system` (joined with a blank line, in order;
    None when there is none). Tool results become `tool_result` blocks of a user message.
    Consecutive messages with the same Anthropic role are merged (blocks kept in order), so the
    output alternates user/assistant and the results of an assistant message's tool calls all
    sit in the user message right after it, as Anthropic requires. Empty text makes no block,
    and a message left with no block is skipped. Anthropic has no `name` field: it is dropped.
    """
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            if m.content:
                system.append(m.content)
            continue
        blocks = _anthropic_blocks(m)
        if not blocks:
            continue
        role = "assistant" if m.role == "assistant" else "user"
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return "\n\n".join(system) or None, out


CACHE_CONTROL: Final = {"type": "ephemeral"}
_LONG_TTL: Final = "1h"


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheMarks:
    """Prompt-cache breakpoints a client placed itself, each with its ``cache_control``
    value (``{"type": "ephemeral"}``, with a ``ttl`` of ``"5m"`` or ``"1h"`` if it gave one):
    on the system prompt (`system`), on tools by name (`tools`), and after message counts
    (`ends`, as `mark_anthropic_cache` reads them). `mark_anthropic_cache` places them before
    its own breakpoints, which fill what is left of Anthropic's four."""

    system: Mapping[str, Any] | None = None
    tools: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    ends: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)

    def __len__(self) -> int:
        return (self.system is not None) + len(self.tools) + len(self.ends)


def mark_anthropic_cache(
    messages: Sequence[Message],
    ends: Iterable[int],
    *,
    tools: Sequence[Any] = (),
    marks: CacheMarks | None = None,
    ttl: str | None = None,
) -> tuple[Any, list[dict[str, Any]], list[Any]]:
    """`to_anthropic(messages)` with prompt-cache breakpoints: `(system, messages, tools)`.

    At most four breakpoints in all (Anthropic's limit), in this order of precedence: the
    client's `marks` (on the tools they name, the system prompt, and the last block of each
    prefix ``messages[:end]``), then the system prompt (or, without one, the last tool), then
    the last block of each prefix ``messages[:end]`` for `end` in `ends`, the longest prefixes
    kept. Anthropic wants a breakpoint with a one-hour ``ttl`` before any with the default
    five minutes: Loom's own breakpoints placed before a client's one-hour mark take its
    ``ttl``. `ttl` is the ``ttl`` Loom's own breakpoints ask for (``"1h"``: the one-hour
    cache, ``"5m"`` or None: the default), except after a client's mark with the default
    ``ttl``, where they keep the default too (the order Anthropic wants). `tools` are
    Anthropic tools. A system prompt with a breakpoint becomes a list of one text block.
    """
    if ttl not in (None, "5m", _LONG_TTL):
        raise ConfigError(f'`ttl` must be "5m", "1h" or None, got {ttl!r}')
    own_control: Mapping[str, Any] = (
        {**CACHE_CONTROL, "ttl": _LONG_TTL} if ttl == _LONG_TTL else CACHE_CONTROL
    )
    text, converted = to_anthropic(messages)
    marked_tools = list(tools)
    placed = _client_breakpoints(
        marks or CacheMarks(), marked_tools, system=text is not None, count=len(messages)
    )
    if text is not None:
        own_head: tuple[int, int] | None = (1, 0)
    else:
        own_head = (0, len(marked_tools) - 1) if marked_tools else None
    if own_head is not None and own_head not in placed and len(placed) < 4:
        placed[own_head] = (own_control, True)
    wanted = sorted({e for e in ends if 0 < e <= len(messages) and (2, e) not in placed})
    for end in wanted[max(0, len(wanted) - (4 - len(placed))) :]:
        placed[(2, end)] = (own_control, True)
    short_before = False
    for key in sorted(placed):
        control, own = placed[key]
        if own and short_before and control.get("ttl") == _LONG_TTL:
            placed[key] = (CACHE_CONTROL, True)
        short_before = short_before or (not own and control.get("ttl") != _LONG_TTL)
    long_after = False
    for key in sorted(placed, reverse=True):
        control, own = placed[key]
        if own and long_after:
            placed[key] = ({**control, "ttl": _LONG_TTL}, True)
        long_after = long_after or control.get("ttl") == _LONG_TTL
    system: Any = text
    for (kind, at), (control, _) in sorted(placed.items()):
        if kind == 0:
            marked_tools[at] = {**marked_tools[at], "cache_control": dict(control)}
        elif kind == 1:
            system = [{"type": "text", "text": text, "cache_control": dict(control)}]
        else:
            _, head = to_anthropic(messages[:at])
            if not head:
                continue
            # Converting a prefix gives a prefix of the conversion: its last block is in place.
            message = converted[len(head) - 1]
            blocks = message["content"] = list(message["content"])
            index = len(head[-1]["content"]) - 1
            blocks[index] = {**blocks[index], "cache_control": dict(control)}
    return system, converted, marked_tools


def _client_breakpoints(
    marks: CacheMarks, tools: Sequence[Any], *, system: bool, count: int
) -> dict[tuple[int, int], tuple[Mapping[str, Any], bool]]:
    """Where the client's `marks` go, for `mark_anthropic_cache`: (where in the prompt's
    order: 0 for tools, 1 for the system prompt, 2 for messages; and which) -> (its
    ``cache_control``, False: not Loom's own). A mark on a tool not sent, on a system prompt
    there is none of, or after a message count outside 1..`count` is dropped; of more than
    four, the four latest in the prompt are kept (the client's longest prefixes)."""
    placed: dict[tuple[int, int], tuple[Mapping[str, Any], bool]] = {}
    for i, tool in enumerate(tools):
        control = marks.tools.get(str(tool.get("name"))) if isinstance(tool, Mapping) else None
        if control is not None:
            placed[(0, i)] = (control, False)
    if marks.system is not None and system:
        placed[(1, 0)] = (marks.system, False)
    for end, control in marks.ends.items():
        if 0 < end <= count:
            placed[(2, end)] = (control, False)
    for key in sorted(placed)[: max(0, len(placed) - 4)]:
        del placed[key]
    return placed


# Extended-thinking blocks hold the model's private reasoning, signed so that only Anthropic can
# check it: the neutral model has no place for them, and they are routine in transcripts, so they
# are dropped rather than rejected. (The one cost: with thinking on, Anthropic wants the latest
# assistant turn's thinking sent back during a tool-use loop, which a converted history lacks.)
_DROPPED_BLOCKS = ("thinking", "redacted_thinking")
_KEPT_BLOCKS = {
    "user": ("text", "tool_result", "image", "document"),
    "assistant": ("text", "tool_use"),
}


def _iter_blocks(role: str, content: Any) -> Iterator[tuple[int, str, Mapping[str, Any]]]:
    """(index, type, block) for each block of `content` the model keeps; raises on the rest."""
    if isinstance(content, str):
        yield 0, "text", {"type": "text", "text": content}
        return
    if not isinstance(content, Sequence):
        raise MessageFormatError(
            f"`content` must be a string or a list of blocks, got {type(content).__name__}"
        )
    for j, raw in enumerate(content):
        block = mapping(raw, f"content part {j}")
        kind = block.get("type")
        if kind in _DROPPED_BLOCKS:
            continue
        if kind not in _KEPT_BLOCKS[role]:
            raise not_text(j, kind, " and ".join(f"`{k}`" for k in _KEPT_BLOCKS[role]))
        yield j, kind, block


def _tool_result_content(content: Any) -> dict[str, Any]:
    """A `tool_result` block's content as a tool message's: text, or parts when it holds an
    image or a document."""
    media = ("image", "document")
    if isinstance(content, Sequence) and not isinstance(content, str):
        blocks = [mapping(b, f"content part {j}") for j, b in enumerate(content)]
        if any(b.get("type") in media for b in blocks):
            for j, b in enumerate(blocks):
                if b.get("type") not in ("text", *media):
                    raise not_text(j, b.get("type"), "`text`, `image` and `document`")
            return {"parts": tuple(part_from_anthropic(j, b) for j, b in enumerate(blocks))}
    return {"content": joined_text(content, "`content` of a tool_result")}


def _from_anthropic_message(raw: Any) -> list[Message]:
    wire = mapping(raw, "a message")
    role = wire.get("role")
    if role not in ("user", "assistant"):
        hint = "; pass the system prompt as `system=`" if role == "system" else ""
        raise MessageFormatError(f"`role` must be `user` or `assistant`, got {role!r}{hint}")
    blocks = _iter_blocks(role, wire.get("content"))
    if role == "assistant":
        texts: list[str] = []
        calls: list[ToolCall] = []
        for j, kind, block in blocks:
            if kind == "text":
                texts.append(text_part(j, block))
            else:
                call_id: Any = block.get("id")
                name: Any = block.get("name")
                arguments: Any = block.get("input", {})
                if isinstance(arguments, Mapping):
                    arguments = dict(arguments)  # so later edits to the payload cannot reach it
                calls.append(ToolCall(id=call_id, name=name, arguments=arguments))
        return [Message(role="assistant", content="".join(texts), tool_calls=tuple(calls))]
    out: list[Message] = []
    run: list[Part] = []  # text, images and documents since the last tool result

    def close_run() -> None:
        if any(not isinstance(p, TextPart) for p in run):
            out.append(Message(role="user", parts=tuple(run)))
        else:  # text only: one user message per block, as before images
            out.extend(Message(role="user", content=p.text) for p in run if isinstance(p, TextPart))
        run.clear()

    for j, kind, block in blocks:
        if kind == "text":
            run.append(TextPart(text=text_part(j, block)))
        elif kind in ("image", "document"):
            run.append(part_from_anthropic(j, block))
        else:
            close_run()
            out.append(
                Message(
                    role="tool",
                    **_tool_result_content(block.get("content")),
                    tool_call_id=block.get("tool_use_id"),
                    is_error=bool(block.get("is_error", False)),
                )
            )
    close_run()
    return out


def from_anthropic(
    messages: Iterable[Mapping[str, Any]],
    *,
    system: str | Sequence[Mapping[str, Any]] | None = None,
) -> list[Message]:
    """Convert Anthropic messages (and the `system` parameter) to Loom messages.

    `system` (a string, or `text` blocks joined with a blank line to mirror `to_anthropic`)
    becomes one leading system message when non-empty. In a user message each `tool_result`
    block becomes a tool message (its content a string or `text` blocks joined with "") and
    each text block a user message, in block order; an assistant message becomes one assistant
    message, its text blocks joined with "" and each `tool_use` block a `ToolCall`; a
    `tool_result` that holds images or documents keeps them as its `parts`. Text,
    `image` and `document` blocks of a user message that hold an image or a document become
    one user message with `parts`. `thinking` and `redacted_thinking` blocks are dropped, as
    the model has no place for them; any other block raises.
    """
    with located("Anthropic `system`"):
        text = joined_text(system, "`system`", sep="\n\n")
    out = [Message.system(text)] if text else []
    for i, raw in enumerate(messages):
        with located(f"Anthropic message {i}"):
            out.extend(_from_anthropic_message(raw))
    return out

"""The one provider-neutral message model, its wire-format converters, and tool units.

Loom reasons about a conversation as a sequence of `Message` values that carry text (and, in
a user message, images and files: `loomctx.parts`):

- `system`, `user` and `assistant` messages hold `content` text; a `user` or `assistant`
  message may name its participant. A `user` message may also hold `parts`, its whole content
  in order (`TextPart`, `ImagePart`, `FilePart`, `AudioPart`); its `content` is then the text
  of its text parts. A `tool` result may hold parts too: text, images and files.
- An `assistant` message may also request tools: `tool_calls` holds one `ToolCall` (id, tool
  name, parsed JSON arguments) per requested call.
- A `tool` message is the result of one call: `tool_call_id` says which, `is_error` says the
  tool failed, and `name` may repeat the tool's name.

`to_openai` / `from_openai` convert to and from the OpenAI chat-completions format, and
`to_anthropic` / `from_anthropic` to and from the Anthropic messages format. Each function's
docstring says what the target format cannot carry; anything else survives the round trip.

A tool call and its results only make sense together: a provider rejects a history with a call
that has no result, or a result for an unknown call. `split_units` therefore cuts a history into
`MessageUnit` values, the smallest pieces Loom may keep or drop, and checks that every call is
answered exactly once, directly after the message that made it.

**What a message may hold is checked where it is built**, so that a bad value fails at the
boundary where it entered, naming the field, instead of later in a provider, a store or a
tokenizer:

- text (`content`, `name`, ids, and every string and key of tool-call arguments) must be
  valid Unicode: a surrogate code point (U+D800..U+DFFF, what ``errors="surrogateescape"`` or
  a JSON escape like ``"\\ud800"`` leaves in a `str`) cannot be encoded as UTF-8, so it is
  refused with its field and position. `valid_text` repairs such text (pairs joined, lone
  surrogates replaced by U+FFFD) for data that must be kept, such as a tool's output;
- tool-call arguments must be JSON a provider accepts: no NaN or Infinity (Python's `json`
  reads and writes them, JSON does not), and no nesting deeper than `MAX_ARGUMENT_DEPTH`
  levels (deeper data makes recursive code, ours or a provider's, fail). `parse_arguments`
  reads arguments from their JSON text under the same rules.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NoReturn, get_args

from loomctx.errors import ConfigError, MessageFormatError
from loomctx.parts import (
    AudioPart,
    FilePart,
    ImagePart,
    Part,
    TextPart,
    part_from_anthropic,
    part_from_openai,
    part_to_anthropic,
    part_to_openai,
    settle_parts,
)

__all__ = [
    "CACHE_CONTROL",
    "MAX_ARGUMENT_DEPTH",
    "AudioPart",
    "CacheMarks",
    "FilePart",
    "ImagePart",
    "Message",
    "MessageUnit",
    "Part",
    "Role",
    "TextPart",
    "ToolCall",
    "flatten_units",
    "from_anthropic",
    "from_openai",
    "mark_anthropic_cache",
    "parse_arguments",
    "responses_input_to_openai",
    "split_units",
    "to_anthropic",
    "to_anthropic_tools",
    "to_openai",
    "to_openai_tools",
    "tool_parts_note",
    "tool_spec",
    "valid_text",
]

Role = Literal["system", "user", "assistant", "tool"]
"""Who a message is from: `tool` marks the result of one tool call."""

_ROLES: tuple[str, ...] = get_args(Role)

MAX_ARGUMENT_DEPTH: Final = 64
"""How deeply tool-call arguments may nest: the arguments object is level 1, each list or
object inside it one level more. Real tool calls stay within a handful of levels; deeper data
is refused where it enters, because recursive code (JSON encoders, renderers, providers) fails
on data nested thousands of levels deep."""

_SURROGATE = re.compile("[\ud800-\udfff]")


def surrogate_at(text: str) -> int | None:
    """The index of the first surrogate code point in `text` (never valid Unicode text, and
    not encodable as UTF-8), or None when there is none."""
    if text.isascii():  # O(1) in CPython: most text takes this path
        return None
    found = _SURROGATE.search(text)
    return None if found is None else found.start()


def valid_text(text: str) -> str:
    """`text` as valid Unicode: a surrogate pair is joined into the character it encodes and a
    lone surrogate becomes U+FFFD (the replacement character). For text that must be kept
    although it is malformed, such as a tool's output or a model's reply."""
    if surrogate_at(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def check_text(text: str, what: str) -> None:
    """Raise `MessageFormatError` naming `what` and the position when `text` holds a
    surrogate code point."""
    at = surrogate_at(text)
    if at is not None:
        raise MessageFormatError(
            f"{what} holds the surrogate code point {text[at]!r} at position {at}, which is "
            "not valid Unicode (it cannot be encoded as UTF-8); decode the source with "
            "`errors='replace'`, or repair the text with `loomctx.messages.valid_text`"
        )


def _shown(path: str) -> str:
    return path if len(path) <= 60 else f"{path[:57]}..."


def _where(path: str, call: str) -> str:
    return f"argument `{_shown(path)}` of {call}" if path else f"the arguments of {call}"


def _check_argument(value: Any, path: str, depth: int, call: str) -> None:
    """Refuse what JSON cannot carry, surrogates and deep nesting anywhere in `value`, the
    arguments of `call` (a phrase such as "tool call `c1`") at `path`, `depth` levels down."""
    if isinstance(value, str):
        check_text(value, _where(path, call))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise MessageFormatError(
                f"{_where(path, call)} is {value!r}, which is not JSON (providers reject NaN "
                "and Infinity); use a finite number, a string or None"
            )
    elif isinstance(value, Mapping | list | tuple):
        if depth > MAX_ARGUMENT_DEPTH:
            # Checked before going further down, so that no depth can exhaust the stack.
            raise MessageFormatError(
                f"the arguments of {call} nest deeper than {MAX_ARGUMENT_DEPTH} levels "
                f"(at `{_shown(path)}`); flatten them"
            )
        if isinstance(value, Mapping):
            for key, item in value.items():
                if isinstance(key, str):
                    check_text(key, f"a key of {_where(path, call)}")
                _check_argument(item, f"{path}.{key}" if path else str(key), depth + 1, call)
        else:
            for i, item in enumerate(value):
                _check_argument(item, f"{path}[{i}]", depth + 1, call)


def _not_a_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON (write a number, a string or null)")


def parse_arguments(raw: str, *, call_id: str | None = None) -> dict[str, Any]:
    """Tool-call arguments parsed from their JSON text (blank text means ``{}``).

    Raises `MessageFormatError` (naming the call `call_id`, if given) when the text is not
    JSON, not a JSON object, holds NaN or Infinity (which Python's `json` would accept), or
    nests deeper than `MAX_ARGUMENT_DEPTH` levels.
    """
    call = "the tool call" if call_id is None else f"tool call `{call_id}`"
    who = f"{call} has"
    if not raw.strip():
        return {}
    try:
        parsed = json.loads(raw, parse_constant=_not_a_constant)
    except RecursionError:
        raise MessageFormatError(
            f"{who} `arguments` that nest deeper than {MAX_ARGUMENT_DEPTH} levels "
            f"({raw[:40]!r}...); flatten them"
        ) from None
    except ValueError as exc:  # json.JSONDecodeError, or NaN / Infinity
        raise MessageFormatError(
            f"{who} `arguments` that are not a valid JSON string ({exc}): {raw[:200]!r}; "
            "send a JSON object"
        ) from exc
    if not isinstance(parsed, dict):
        raise MessageFormatError(
            f"{who} arguments that are a JSON {type(parsed).__name__}, not an object: "
            f"{raw[:200]!r}; tool arguments must be a JSON object"
        )
    _check_argument(parsed, "", 1, call)
    return parsed


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """One tool call requested by an assistant message: its id, the tool's name, its arguments."""

    id: str
    name: str
    # Left out of the hash (a dict is unhashable) so that messages stay usable as cache keys;
    # equality still compares the arguments.
    arguments: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise MessageFormatError(
                f"a tool call's `id` must be a non-empty string, got {self.id!r}; "
                "use the id the provider gave the call"
            )
        if not isinstance(self.name, str) or not self.name:
            raise MessageFormatError(
                f"tool call `{self.id}` needs a non-empty string `name`, got {self.name!r}"
            )
        if not isinstance(self.arguments, Mapping):
            raise MessageFormatError(
                f"tool call `{self.id}` has `arguments` of type {type(self.arguments).__name__}; "
                "pass the parsed JSON object as a dict (use `{}` for no arguments)"
            )
        check_text(self.id, "a tool call's `id`")
        check_text(self.name, f"the `name` of tool call `{self.id}`")
        _check_argument(self.arguments, "", 1, f"tool call `{self.id}`")

    def arguments_json(self) -> str:
        """The arguments as compact JSON, keys in insertion order, non-ASCII text kept as is."""
        try:
            # allow_nan=False: NaN and Infinity are not JSON, and providers reject them.
            return json.dumps(
                dict(self.arguments),
                ensure_ascii=False,
                separators=(",", ":"),
                sort_keys=False,
                allow_nan=False,
            )
        except (TypeError, ValueError) as exc:
            raise MessageFormatError(
                f"the arguments of tool call `{self.id}` are not JSON-serializable ({exc}); "
                "use only dicts with string keys, lists, strings, finite numbers, bools and None"
            ) from exc


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """One message of a conversation, in Loom's provider-neutral model.

    `tool_calls` is allowed on `assistant` messages only; `tool_call_id` is required on `tool`
    messages and forbidden elsewhere; `is_error` is only meaningful on `tool` messages. A list
    passed as `tool_calls` is stored as a tuple. `parts` (user messages, and tool results:
    images and files, no audio) holds the whole content in order when it has an image, a file
    or audio: `content` is then the text of its text parts (given alone beside other parts,
    it becomes the first part); parts that are all text are folded into `content`.
    Violations raise `MessageFormatError`.
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False
    parts: tuple[Part, ...] = ()

    def __post_init__(self) -> None:
        if self.role not in _ROLES:
            allowed = ", ".join(f"`{r}`" for r in _ROLES)
            raise MessageFormatError(f"unknown role {self.role!r}; use one of {allowed}")
        if self.parts:
            content, parts = settle_parts(self.role, self.content, self.parts)
            object.__setattr__(self, "content", content)
            object.__setattr__(self, "parts", parts)
        if not isinstance(self.content, str):
            raise MessageFormatError(
                f"`content` of a `{self.role}` message must be a string, got "
                f'{type(self.content).__name__}; use "" for a message without text'
            )
        check_text(self.content, f"the `content` of a `{self.role}` message")
        for what, value in (("name", self.name), ("tool_call_id", self.tool_call_id)):
            if isinstance(value, str):
                check_text(value, f"the `{what}` of a `{self.role}` message")
        if not isinstance(self.tool_calls, tuple):  # a list, say: store it immutably
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        for call in self.tool_calls:
            if not isinstance(call, ToolCall):
                raise MessageFormatError(
                    f"`tool_calls` must hold `ToolCall` values, got {type(call).__name__}; "
                    "build each with `ToolCall(id=..., name=..., arguments=...)`"
                )
        if self.tool_calls and self.role != "assistant":
            raise MessageFormatError(
                f"a `{self.role}` message cannot carry `tool_calls`; only `assistant` messages "
                "request tools"
            )
        if self.role == "tool" and not self.tool_call_id:
            raise MessageFormatError(
                "a `tool` message needs `tool_call_id`: the id of the tool call it answers"
            )
        if self.role != "tool" and self.tool_call_id is not None:
            raise MessageFormatError(
                f"a `{self.role}` message cannot carry `tool_call_id` "
                f"({self.tool_call_id!r}); only `tool` messages answer tool calls"
            )
        if self.is_error and self.role != "tool":
            raise MessageFormatError(
                f"a `{self.role}` message cannot set `is_error`; only a `tool` result can "
                "report that its tool failed"
            )

    @classmethod
    def system(cls, text: str) -> Message:
        """A system message (instructions for the model)."""
        return cls(role="system", content=text)

    @classmethod
    def user(
        cls, text: str = "", *, name: str | None = None, parts: Iterable[Part] = ()
    ) -> Message:
        """A user message, optionally naming the participant; `parts` (images, files) follow
        `text`."""
        return cls(role="user", content=text, name=name, parts=tuple(parts))

    @classmethod
    def assistant(
        cls, text: str = "", *, tool_calls: Iterable[ToolCall] = (), name: str | None = None
    ) -> Message:
        """An assistant message: text, tool calls, or both."""
        return cls(role="assistant", content=text, tool_calls=tuple(tool_calls), name=name)

    @classmethod
    def tool(
        cls,
        content: str,
        *,
        tool_call_id: str,
        name: str | None = None,
        is_error: bool = False,
        parts: Iterable[Part] = (),
    ) -> Message:
        """The result of the tool call `tool_call_id`; `is_error=True` if the tool failed;
        `parts` (images, files) follow `content`."""
        return cls(
            role="tool",
            content=content,
            tool_call_id=tool_call_id,
            name=name,
            is_error=is_error,
            parts=tuple(parts),
        )


@contextmanager
def _at(where: str) -> Iterator[None]:
    """Prefix any format error raised inside with the payload item it concerns."""
    try:
        yield
    except MessageFormatError as exc:
        raise MessageFormatError(f"{where}: {exc}") from exc


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        raise MessageFormatError(f"{what} is missing")
    if not isinstance(value, Mapping):
        raise MessageFormatError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _not_text(j: int, kind: object, allowed: str = "`text`") -> MessageFormatError:
    return MessageFormatError(
        f"content part {j} has type `{kind}`, but this message carries text only "
        f"(here: {allowed} parts); replace it with a text description, or drop it, before "
        "converting"
    )


def _text_part(j: int, raw: Any) -> str:
    part = _mapping(raw, f"content part {j}")
    if part.get("type") != "text":
        raise _not_text(j, part.get("type"))
    text = part.get("text")
    if not isinstance(text, str):
        raise MessageFormatError(f"text part {j} needs a string `text`, got {text!r}")
    return text


def _joined_text(content: Any, what: str, sep: str = "") -> str:
    """Text of `content` given as a string, None, or a list of `text` parts joined with `sep`."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, Sequence):
        raise MessageFormatError(
            f"{what} must be a string or a list of content parts, got {type(content).__name__}"
        )
    return sep.join(_text_part(j, raw) for j, raw in enumerate(content))


def tool_parts_note(call_id: str | None) -> str:
    """The text before a tool result's images and files where they must travel in a user
    message of their own (`to_openai(..., strict=True)`)."""
    return f"Images and files returned by tool call {call_id}:"


def to_openai(messages: Iterable[Message], *, strict: bool = False) -> list[dict[str, Any]]:
    """Convert to OpenAI chat-completions messages.

    An assistant message with tool calls and no text gets `"content": None`, as OpenAI sends
    it. OpenAI has no field for two things, which are dropped: `name` on a tool message, and
    `is_error` (an error result's content, which should say what failed, is sent as is).

    A tool result's images and files stay in its message as content parts (Loom's own wire
    form, which `from_openai` reads back). With `strict`, the form OpenAI's API accepts: a
    tool message carries text only, so they follow the run of tool results, in one user
    message, each result's after `tool_parts_note` naming its call (as agent frameworks send
    a tool's screenshot).
    """
    out: list[dict[str, Any]] = []
    held: list[dict[str, Any]] = []  # the parts of the tool results just converted
    for m in messages:
        if held and m.role != "tool":
            out.append({"role": "user", "content": held})
            held = []
        if m.role == "tool":
            content: Any = m.content
            if m.parts and strict:
                held.append({"type": "text", "text": tool_parts_note(m.tool_call_id)})
                held += [part_to_openai(p) for p in m.parts if not isinstance(p, TextPart)]
            elif m.parts:
                content = [part_to_openai(p) for p in m.parts]
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": content})
            continue
        wire: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.parts:
            wire["content"] = [part_to_openai(p) for p in m.parts]
        if m.tool_calls:
            wire["content"] = m.content or None
            wire["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_json()},
                }
                for call in m.tool_calls
            ]
        if m.name is not None:
            wire["name"] = m.name
        out.append(wire)
    if held:
        out.append({"role": "user", "content": held})
    return out


def _openai_arguments(call_id: str, raw: Any) -> Mapping[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, str):
        raise MessageFormatError(
            f"tool call `{call_id}` has `arguments` of type {type(raw).__name__}; OpenAI "
            "sends them as a JSON string: serialize them with `json.dumps` before converting"
        )
    return parse_arguments(raw, call_id=call_id)


def _openai_tool_call(raw: Any) -> ToolCall:
    call = _mapping(raw, "a tool call")
    call_id: Any = call.get("id")
    if call_id is None:
        raise MessageFormatError(
            "a tool call has no `id`; every call needs the id its result cites"
        )
    if call.get("type", "function") != "function":
        raise MessageFormatError(
            f"tool call `{call_id}` has type {call['type']!r}; Loom supports `function` calls only"
        )
    function = _mapping(call.get("function"), f"the `function` of tool call `{call_id}`")
    name: Any = function.get("name")
    return ToolCall(
        id=call_id, name=name, arguments=_openai_arguments(call_id, function.get("arguments"))
    )


def _from_openai_message(raw: Any) -> Message:
    wire = _mapping(raw, "a message")
    if wire.get("role") == "function" or wire.get("function_call") is not None:
        raise MessageFormatError(
            "this is the legacy function-calling format (`function` role or `function_call`); "
            "send `tool_calls` on the assistant message and answer each call with a `tool` "
            "message instead"
        )
    if "role" not in wire:
        raise MessageFormatError(
            "the message has no `role`; set it to `system`, `developer`, `user`, `assistant` "
            "or `tool`"
        )
    role = wire["role"]
    content = wire.get("content")
    if role == "user" and isinstance(content, list):
        parts = [
            part_from_openai(j, _mapping(p, f"content part {j}")) for j, p in enumerate(content)
        ]
        return Message(role="user", parts=tuple(parts), name=wire.get("name"))
    if role == "tool" and isinstance(content, list):
        parts = [
            part_from_openai(j, _mapping(p, f"content part {j}")) for j, p in enumerate(content)
        ]
        return Message(
            role="tool",
            parts=tuple(parts),
            tool_call_id=wire.get("tool_call_id"),
            name=wire.get("name"),
        )
    return Message(
        role="system" if role == "developer" else role,
        content=_joined_text(content, "`content`"),
        tool_calls=tuple(_openai_tool_call(c) for c in wire.get("tool_calls") or ()),
        tool_call_id=wire.get("tool_call_id"),
        name=wire.get("name"),
    )


def from_openai(payload: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Convert OpenAI chat-completions messages to Loom messages.

    `content` may be a string, None, or a list of `text` parts (joined with ""); a user
    message's images, files and audio (`image_url`, `file`, `input_audio`, and the Responses
    API's `input_*` parts) become its `parts`, as do a tool result's images and files. The
    `developer` role becomes `system`. Tool-call arguments are parsed from their JSON string
    ("" means `{}`). Fields with no counterpart in the model (`refusal`, `annotations`, ...)
    are ignored.
    """
    out: list[Message] = []
    for i, raw in enumerate(payload):
        with _at(f"OpenAI message {i}"):
            out.append(_from_openai_message(raw))
    return out


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
        block = _mapping(raw, f"content part {j}")
        kind = block.get("type")
        if kind in _DROPPED_BLOCKS:
            continue
        if kind not in _KEPT_BLOCKS[role]:
            raise _not_text(j, kind, " and ".join(f"`{k}`" for k in _KEPT_BLOCKS[role]))
        yield j, kind, block


def _tool_result_content(content: Any) -> dict[str, Any]:
    """A `tool_result` block's content as a tool message's: text, or parts when it holds an
    image or a document."""
    media = ("image", "document")
    if isinstance(content, Sequence) and not isinstance(content, str):
        blocks = [_mapping(b, f"content part {j}") for j, b in enumerate(content)]
        if any(b.get("type") in media for b in blocks):
            for j, b in enumerate(blocks):
                if b.get("type") not in ("text", *media):
                    raise _not_text(j, b.get("type"), "`text`, `image` and `document`")
            return {"parts": tuple(part_from_anthropic(j, b) for j, b in enumerate(blocks))}
    return {"content": _joined_text(content, "`content` of a tool_result")}


def _from_anthropic_message(raw: Any) -> list[Message]:
    wire = _mapping(raw, "a message")
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
                texts.append(_text_part(j, block))
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
            run.append(TextPart(text=_text_part(j, block)))
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
    with _at("Anthropic `system`"):
        text = _joined_text(system, "`system`", sep="\n\n")
    out = [Message.system(text)] if text else []
    for i, raw in enumerate(messages):
        with _at(f"Anthropic message {i}"):
            out.extend(_from_anthropic_message(raw))
    return out


_RESPONSES_TEXT: Final = frozenset({"input_text", "output_text", "text", "refusal"})


def _responses_content(content: Any, where: str) -> str | list[dict[str, Any]]:
    """A message's content as chat content: text, or parts when it holds an image or file."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise MessageFormatError(f"`{where}.content` must be a string or a list of content parts")
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in _RESPONSES_TEXT:
            text = part.get("text", part.get("refusal"))
            if not isinstance(text, str):
                raise MessageFormatError(f"`{where}.content[{j}]` needs a string `text`")
            parts.append({"type": "text", "text": text})
        elif kind == "input_image":
            image: dict[str, Any] = {"url": part.get("image_url") or part.get("file_id")}
            if part.get("detail"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        elif kind == "input_file":
            file = {k: part[k] for k in ("file_data", "file_id", "filename") if k in part}
            parts.append({"type": "file", "file": file})
        else:
            raise MessageFormatError(
                f"`{where}.content[{j}]` has type {kind!r:.40}; Loom takes "
                "`input_text`, `output_text`, `input_image` and `input_file` parts"
            )
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def responses_input_to_openai(items: Any) -> list[dict[str, Any]]:
    """OpenAI Responses API `input` (a string, or a list of items) as chat-completions
    messages: ``message`` items (`input_text` / `output_text` parts; `input_image` and
    `input_file` as the chat format's image and file parts), ``function_call`` items as the
    tool calls of an assistant message, ``function_call_output`` items as their results;
    ``reasoning`` items are dropped (the model has no place for them). Anything else raises
    `MessageFormatError` naming the item."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise MessageFormatError("`input` must be a string or a list of input items")
    out: list[dict[str, Any]] = []
    calling = False  # the last message is an assistant message that function calls extend
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, Mapping):
            raise MessageFormatError(f"`{where}` must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise MessageFormatError(
                    f"`{where}.role` must be user, assistant, system or developer, got {role!r:.40}"
                )
            out.append({"role": role, "content": _responses_content(item.get("content"), where)})
            calling = role == "assistant"
        elif kind == "function_call":
            call_id, name = item.get("call_id"), item.get("name")
            if not isinstance(call_id, str) or not call_id or not isinstance(name, str):
                raise MessageFormatError(f"`{where}` needs a `call_id` and a `name`")
            call = {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": item.get("arguments") or ""},
            }
            if not calling:
                out.append({"role": "assistant", "content": None})
                calling = True
            out[-1].setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            call_id, output = item.get("call_id"), item.get("output")
            if not isinstance(call_id, str) or not call_id:
                raise MessageFormatError(f"`{where}` needs the `call_id` of the call it answers")
            content = output if isinstance(output, str) else _responses_content(output, where)
            out.append({"role": "tool", "tool_call_id": call_id, "content": content})
            calling = False
        elif kind == "reasoning":
            continue
        else:
            raise MessageFormatError(
                f"`{where}` has type {kind!r:.40}; Loom takes `message`, "
                "`function_call`, `function_call_output` and `reasoning` items"
            )
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageUnit:
    """The smallest piece of history Loom may keep or drop: one plain message, or a tool unit."""

    messages: tuple[Message, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(self.messages))
        if not self.messages:
            raise MessageFormatError("a `MessageUnit` needs at least one message")

    @property
    def is_tool_unit(self) -> bool:
        """True for an assistant message with tool calls followed by all of their results."""
        return bool(self.messages[0].tool_calls)


def _stray_result(index: int, m: Message, answered: set[str]) -> MessageFormatError:
    if m.tool_call_id in answered:
        return MessageFormatError(
            f"message {index} is a second result for tool call `{m.tool_call_id}`; each call "
            "takes exactly one result, so drop the duplicate"
        )
    return MessageFormatError(
        f"tool message {index} answers `{m.tool_call_id}`, which is no open tool call (an "
        "orphan result); a result must directly follow the assistant message whose "
        "`tool_calls` include its `tool_call_id`, with only other results in between"
    )


def split_units(messages: Sequence[Message]) -> list[MessageUnit]:
    """Cut a history into units: each assistant message with tool calls plus its results, and
    every other message on its own.

    The results of an assistant message's calls must follow it directly, in any order among
    themselves. Raises `MessageFormatError`, naming the message index, on an orphan result, a
    call without a result, a second result for a call, or a tool-call id used twice.
    """
    units: list[MessageUnit] = []
    made_at: dict[str, int] = {}  # call id -> index of the message that made the call
    answered: set[str] = set()
    i, n = 0, len(messages)
    while i < n:
        m = messages[i]
        if m.role == "tool":
            raise _stray_result(i, m, answered)
        pending: dict[str, ToolCall] = {}
        for call in m.tool_calls:
            if call.id in made_at:
                raise MessageFormatError(
                    f"tool call id `{call.id}` at message {i} is already used at message "
                    f"{made_at[call.id]}; every tool call needs a unique id"
                )
            made_at[call.id] = i
            pending[call.id] = call
        j = i + 1
        while pending and j < n and messages[j].role == "tool":
            result = messages[j]
            if result.tool_call_id not in pending:
                raise _stray_result(j, result, answered)
            del pending[result.tool_call_id]
            answered.add(result.tool_call_id)
            j += 1
        if pending:
            call = next(iter(pending.values()))
            before = f"before message {j}" if j < n else "at the end of the history"
            raise MessageFormatError(
                f"tool call `{call.id}` (`{call.name}`) at message {i} has no result; add a "
                f"`tool` message with `tool_call_id={call.id!r}` after message {i}'s other "
                f"results ({before}), or remove the call"
            )
        units.append(MessageUnit(messages=tuple(messages[i:j])))
        i = j
    return units


def flatten_units(units: Iterable[MessageUnit]) -> list[Message]:
    """The messages of `units`, in order: the inverse of `split_units`."""
    return [m for unit in units for m in unit.messages]


# --- tool definitions ---------------------------------------------------------------------


def tool_spec(tool: Mapping[str, Any]) -> tuple[str, str, Mapping[str, Any]]:
    """(name, description, JSON schema) of a tool definition in OpenAI's function format
    (chat completions' or the Responses API's flat one) or Anthropic's format; `ConfigError`
    when it has no name."""
    if not isinstance(tool, Mapping):
        raise ConfigError(
            f"a tool definition must be a JSON object, got {type(tool).__name__} {tool!r:.60}; "
            'use OpenAI\'s {"type": "function", "function": {"name", "description", '
            '"parameters"}} or Anthropic\'s {"name", "description", "input_schema"}'
        )
    nested = tool.get("type") == "function" and "function" in tool  # else Responses' flat form
    spec = tool.get("function") if nested else tool
    if not isinstance(spec, Mapping):
        raise ConfigError(
            f"a function tool's `function` must be a JSON object with `name`, `description` and "
            f"`parameters`, got {type(spec).__name__} {spec!r:.60}"
        )
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(
            f"a tool definition has no `name`: {json.dumps(tool, default=str)[:120]!r}; use "
            'OpenAI\'s {"type": "function", "function": {"name", "description", "parameters"}} '
            'or Anthropic\'s {"name", "description", "input_schema"}'
        )
    schema = spec.get("parameters", spec.get("input_schema")) or {
        "type": "object",
        "properties": {},
    }
    if not isinstance(schema, Mapping):
        raise ConfigError(
            f"the tool `{name}`'s parameters must be a JSON schema object, got "
            f"{type(schema).__name__} {schema!r:.60}"
        )
    return name, str(spec.get("description") or ""), schema


def to_openai_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tools as OpenAI chat-completions function tools; chat-style definitions pass through
    unchanged, the Responses API's flat function tools are nested as chat's."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        kind = tool.get("type")
        if kind == "function" and "function" not in tool:
            tool_spec(tool)  # checks that it has a name
            keys = ("name", "description", "parameters", "strict")
            flat = {k: tool[k] for k in keys if tool.get(k) is not None}
            out.append({"type": "function", "function": flat})
        elif kind == "function":
            tool_spec(tool)  # checks that it has a name
            out.append(dict(tool))
        elif kind is not None and "input_schema" not in tool:
            out.append(dict(tool))  # another OpenAI tool type: the API decides
        else:
            name, description, schema = tool_spec(tool)
            function: dict[str, Any] = {"name": name, "parameters": dict(schema)}
            if description:
                function["description"] = description
            out.append({"type": "function", "function": function})
    return out


def to_anthropic_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tools as Anthropic tools; Anthropic-style definitions (and server tools, which carry
    their own `type`) pass through unchanged."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        name, description, schema = tool_spec(tool)  # also checks that it has a name
        if tool.get("type") != "function":
            out.append(dict(tool))
            continue
        converted: dict[str, Any] = {"name": name, "input_schema": dict(schema)}
        if description:
            converted["description"] = description
        out.append(converted)
    return out

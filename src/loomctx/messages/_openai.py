"""Converting to and from OpenAI's formats: chat completions, and the Responses API's input."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from loomctx.errors import MessageFormatError
from loomctx.messages._model import Message, ToolCall
from loomctx.messages._text import parse_arguments
from loomctx.messages._wire import joined_text, located, mapping
from loomctx.parts import TextPart, part_from_openai, part_to_openai

__all__ = ["from_openai", "responses_input_to_openai", "to_openai", "tool_parts_note"]


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
    call = mapping(raw, "a tool call")
    call_id: Any = call.get("id")
    if call_id is None:
        raise MessageFormatError(
            "a tool call has no `id`; every call needs the id its result cites"
        )
    if call.get("type", "function") != "function":
        raise MessageFormatError(
            f"tool call `{call_id}` has type {call['type']!r}; Loom supports `function` calls only"
        )
    function = mapping(call.get("function"), f"the `function` of tool call `{call_id}`")
    name: Any = function.get("name")
    return ToolCall(
        id=call_id, name=name, arguments=_openai_arguments(call_id, function.get("arguments"))
    )


def _from_openai_message(raw: Any) -> Message:
    wire = mapping(raw, "a message")
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
            part_from_openai(j, mapping(p, f"content part {j}")) for j, p in enumerate(content)
        ]
        return Message(role="user", parts=tuple(parts), name=wire.get("name"))
    if role == "tool" and isinstance(content, list):
        parts = [
            part_from_openai(j, mapping(p, f"content part {j}")) for j, p in enumerate(content)
        ]
        return Message(
            role="tool",
            parts=tuple(parts),
            tool_call_id=wire.get("tool_call_id"),
            name=wire.get("name"),
        )
    return Message(
        role="system" if role == "developer" else role,
        content=joined_text(content, "`content`"),
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
        with located(f"OpenAI message {i}"):
            out.append(_from_openai_message(raw))
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

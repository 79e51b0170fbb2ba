"""``POST /v1/messages``: Anthropic's Messages API, converted at the edge.

The request (`system` as a string or text blocks, `messages` with content blocks,
`tool_use` / `tool_result` (a result may hold images and documents), `tools` in Anthropic's
shape, `max_tokens`, `stream`) becomes a chat-completions body (`from_anthropic`, then
`to_openai`) that goes through the proxy's one pipeline, to whichever upstream the model is
configured with; the reply comes back as a
``message`` object, or as Anthropic's events (``message_start``, ``content_block_start``,
``content_block_delta`` with ``text_delta`` / ``input_json_delta``, ``content_block_stop``,
``message_delta``, ``message_stop``). Errors are in Anthropic's shape,
``{"type": "error", "error": {"type", "message"}}``.

What does not carry over, refused with a 400 naming it: server tools (``web_search``,
``bash``...: a proxy cannot run them), extended ``thinking`` (Loom's messages have no place
for signed thinking blocks), and any field this module does not know. ``top_k`` and
``metadata`` are accepted and not sent on. The client's ``cache_control`` marks are read
into `ClientMarks` and moved onto the matching content of the window Loom sends
(`loomctx.server._cache_marks` says where each one goes).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import replace
from typing import Any, Final

from loomctx.errors import ConfigError
from loomctx.messages import Message, from_anthropic, to_openai, to_openai_tools
from loomctx.server._cache_marks import (
    ClientMarks,
    MarkedMessage,
    check_count,
    control_of,
    message_key,
)
from loomctx.server._errors import RequestError
from loomctx.server._faces import Blocks, arguments_of, body_fields, error_of, sse
from loomctx.server._upstream import Reply

__all__ = ["MessagesFace", "anthropic_error", "chat_body_of_messages", "client_marks"]

_PASSED: Final = frozenset({"temperature", "top_p"})
_IGNORED: Final = frozenset({"top_k", "metadata", "cache_control"})
_HANDLED: Final = frozenset(
    {"model", "messages", "system", "max_tokens", "stream", "tools", "tool_choice"}
    | {"stop_sequences"}
)
_STOP: Final = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
_ERROR_TYPES: Final = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def anthropic_error(status: int, body: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI-shaped error `body` in Anthropic's shape."""
    error = error_of(body)
    message = str(error.get("message") or "the request failed")
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _refuse(message: str, param: str) -> RequestError:
    return RequestError(message, param=param)


def _tools(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _refuse("`tools` must be a list of tool definitions", "tools")
    for i, tool in enumerate(raw):
        if not isinstance(tool, Mapping):
            raise _refuse(f"`tools[{i}]` must be an object", "tools")
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise _refuse(
                f"`tools[{i}]` is the server tool `{kind}`, which Loom's proxy cannot run; "
                'send client tools ({"name", "description", "input_schema"}) only',
                "tools",
            )
    try:
        return to_openai_tools([{k: v for k, v in t.items() if k != "type"} for t in raw])
    except ConfigError as exc:
        raise _refuse(f"`tools`: {exc}", "tools") from None


def _tool_choice(raw: Any) -> Any:
    if not isinstance(raw, Mapping):
        raise _refuse('`tool_choice` must be an object such as {"type": "auto"}', "tool_choice")
    kind = raw.get("type")
    if kind == "tool":
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise _refuse('`tool_choice` of type "tool" needs the tool\'s `name`', "tool_choice")
        return {"type": "function", "function": {"name": name}}
    choices = {"auto": "auto", "any": "required", "none": "none"}
    if kind not in choices:
        raise _refuse(
            f"`tool_choice.type` must be auto, any, tool or none, got {kind!r:.40}", "tool_choice"
        )
    return choices[kind]


def chat_body_of_messages(body: Any) -> dict[str, Any]:
    """A Messages API request as a chat-completions body (a 400 `RequestError` naming what
    is wrong or not supported)."""
    body = body_fields(body, _HANDLED | _PASSED | _IGNORED, route="/v1/messages")
    max_tokens = body.get("max_tokens")
    if type(max_tokens) is not int or max_tokens < 1:
        raise _refuse(
            f"`max_tokens` is required: a whole number of at least 1, got {max_tokens!r:.40}",
            "max_tokens",
        )
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _refuse("`messages` must be a non-empty list of messages", "messages")
    system = body.get("system")
    try:
        converted = to_openai(from_anthropic(messages, system=system))
    except ConfigError as exc:
        raise _refuse(str(exc), "messages") from None
    out: dict[str, Any] = {
        "model": body.get("model"),
        "messages": converted,
        "max_tokens": max_tokens,
        "stream": body.get("stream", False),
        "stream_options": {"include_usage": True},
    }
    tools = _tools(body.get("tools"))
    if tools:
        out["tools"] = tools
    choice = body.get("tool_choice")
    if choice is not None:
        out["tool_choice"] = _tool_choice(choice)
        if isinstance(choice, Mapping) and choice.get("disable_parallel_tool_use") and tools:
            out["parallel_tool_calls"] = False
    stop = body.get("stop_sequences")
    if stop is not None:
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise _refuse("`stop_sequences` must be a list of strings", "stop_sequences")
        out["stop"] = stop
    out.update({k: body[k] for k in _PASSED if k in body})
    return out


def client_marks(body: Mapping[str, Any]) -> ClientMarks:
    """The ``cache_control`` marks of a Messages API request `body` that
    `chat_body_of_messages` accepted (a 400 for a malformed mark, or too many): a mark on a
    message's block stands for the Loom message that block became."""
    system = body.get("system")
    on_system = None
    count = 0
    if isinstance(system, list):
        for j, block in enumerate(system):
            control = control_of(block, f"system[{j}]")
            count += control is not None
            on_system = control or on_system
    tools = {
        str(tool.get("name")): control
        for i, tool in enumerate(body.get("tools") or ())
        if (control := control_of(tool, f"tools[{i}]")) is not None
    }
    found: list[tuple[int, int, Mapping[str, Any]]] = []  # (message, block, mark)
    for i, raw in enumerate(body["messages"]):
        content = raw.get("content")
        for j, block in enumerate(content if isinstance(content, list) else ()):
            control = control_of(block, f"messages[{i}].content[{j}]")
            for k, inner in enumerate(_inner_blocks(block)):
                where = f"messages[{i}].content[{j}].content[{k}]"
                control = control_of(inner, where) or control
            if control is not None:
                found.append((i, j, control))
    check_count(count + len(tools) + len(found))
    marks = ClientMarks(system=on_system, tools=tools)
    if not found:
        return marks
    converted: list[Message] = []
    starts: list[int] = []  # where each message's conversion begins in `converted`
    for raw in body["messages"]:
        starts.append(len(converted))
        converted += from_anthropic([raw])
    marked: list[tuple[int, Mapping[str, Any]]] = []  # (index in `converted`, mark)
    for i, j, control in found:
        raw = body["messages"][i]
        # The message that block became: the last one its message's blocks up to it make.
        upto = len(from_anthropic([{**raw, "content": raw["content"][: j + 1]}]))
        if upto:
            marked.append((starts[i] + upto - 1, control))
    keys = [message_key(m) for m in converted]
    return replace(
        marks,
        messages=tuple(
            MarkedMessage(key=keys[at], later=keys[at + 1 :].count(keys[at]), control=control)
            for at, control in marked
        ),
    )


def _inner_blocks(block: Any) -> list[Any]:
    """The blocks inside a `tool_result` block's content (none for other blocks)."""
    if isinstance(block, Mapping) and block.get("type") == "tool_result":
        inner = block.get("content")
        if isinstance(inner, list):
            return inner
    return []


def _usage(usage: Mapping[str, Any] | None) -> dict[str, Any]:
    """Chat usage as Anthropic's: the cache's reads and writes as the upstream reported them
    (``prompt_tokens_details``: `cached_tokens`, `cache_write_tokens`; an OpenAI upstream
    that reports no writes wrote none), and `input_tokens` without either, as Anthropic
    counts them."""
    usage = usage or {}
    prompt = int(usage.get("prompt_tokens") or 0)
    details = usage.get("prompt_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0)
    written = int(details.get("cache_write_tokens") or 0)
    return {
        "input_tokens": max(0, prompt - cached - written),
        "output_tokens": int(usage.get("completion_tokens") or 0),
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": written,
    }


class MessagesFace:
    """Anthropic's ``message`` object and events."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.id = "msg_" + uuid.uuid4().hex

    def _message(self, content: list[dict[str, Any]], reply: Reply | None) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": _stop(reply),
            "stop_sequence": None,
            "usage": _usage(reply.usage if reply else None),
        }

    async def body(self, reply: Reply) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        for call in reply.tool_calls:
            content.append(
                {
                    "type": "tool_use",
                    "id": call["id"],
                    "name": call["function"]["name"],
                    "input": arguments_of(call["function"]["arguments"]),
                }
            )
        return self._message(content, reply)

    async def events(self, chunks: AsyncIterator[dict[str, Any]]) -> AsyncGenerator[bytes]:
        blocks = Blocks(self.model)
        start = self._message([], None)
        start["stop_reason"] = None
        yield sse({"type": "message_start", "message": start}, "message_start")
        index = -1
        async for chunk in chunks:
            for step in blocks.feed(chunk):
                if step.kind == "start_text":
                    index += 1
                    block: dict[str, Any] = {"type": "text", "text": ""}
                    yield _event("content_block_start", index=index, content_block=block)
                elif step.kind == "start_call":
                    index += 1
                    block = {"type": "tool_use", "id": step.call_id, "name": step.name}
                    block["input"] = {}
                    yield _event("content_block_start", index=index, content_block=block)
                elif step.kind == "text":
                    delta = {"type": "text_delta", "text": step.text}
                    yield _event("content_block_delta", index=index, delta=delta)
                elif step.kind == "arguments":
                    delta = {"type": "input_json_delta", "partial_json": step.text}
                    yield _event("content_block_delta", index=index, delta=delta)
                else:
                    yield _event("content_block_stop", index=index)
        for _ in blocks.close():
            yield _event("content_block_stop", index=index)
        end = {"stop_reason": _stop(blocks.reply), "stop_sequence": None}
        yield _event("message_delta", delta=end, usage=_usage(blocks.reply.usage))
        yield _event("message_stop")

    def error_event(self, body: Mapping[str, Any]) -> bytes:
        return sse(anthropic_error(502, body), "error")


def _stop(reply: Reply | None) -> str | None:
    if reply is None:
        return None
    if reply.calls:
        return "tool_use"
    return _STOP.get(reply.finish_reason or "stop", "end_turn")


def _event(kind: str, **fields: Any) -> bytes:
    return sse({"type": kind, **fields}, kind)

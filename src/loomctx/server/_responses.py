"""``POST /v1/responses``: OpenAI's Responses API, converted at the edge.

The request becomes a chat-completions body that goes through the proxy's one pipeline:

- `instructions` becomes the system message;
- `input` (a string, or a list of items) becomes the conversation: messages (`input_text`
  / `output_text` parts; image and file parts as the chat format's), ``function_call``
  items as the tool calls of an assistant message, ``function_call_output`` items as their
  results (a tool unit; an `output` list may hold ``input_image`` and ``input_file`` parts);
  ``reasoning`` items are dropped (no place for them in Loom's messages). The conversion is
  `loomctx.messages.responses_input_to_openai`, which `loomctx replay` reads logs with too;
- `tools`: function tools (``{"type": "function", "name", "parameters", ...}``) only;
  built-in tools (``web_search``, ``file_search``, ``computer_use``...) are refused: a proxy
  cannot run them;
- `previous_response_id`: the conversation of a response Loom answered for this tenant (the
  input and output of it and of the responses before it, which Loom keeps unless a request
  said ``store: false``, see `previous_response`) comes before `input`, and the response's
  session is the request's. An id Loom did not issue to this tenant is refused with a 400
  saying so;
- `max_output_tokens`, `temperature`, `top_p`, `tool_choice`, `parallel_tool_calls`,
  `text.format`, `reasoning.effort`, `user`, `service_tier`, `prompt_cache_key` and
  `safety_identifier` are sent on in their chat-completions form; `store`, `metadata`,
  `include` and `truncation` are accepted (Loom fits the window itself); any other field is
  refused with a 400 naming it.

The reply comes back as a ``response`` object, or as the Responses API's events.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any, Final

from loomctx.errors import ConfigError, MessageFormatError
from loomctx.messages import responses_input_to_openai, to_openai_tools
from loomctx.server._errors import RequestError
from loomctx.server._faces import Blocks, body_fields, error_of, sse
from loomctx.server._upstream import Reply
from loomctx.stores.base import Get, MemoryStore, Put, Record

__all__ = ["RESPONSE_KIND", "ResponsesFace", "chat_body_of_responses", "previous_response"]

RESPONSE_KIND: Final = "proxy_response"
_PASSED: Final = frozenset(
    {"temperature", "top_p", "parallel_tool_calls", "user", "service_tier"}
    | {"prompt_cache_key", "safety_identifier"}
)
_IGNORED: Final = frozenset({"store", "metadata", "include", "truncation"})
_HANDLED: Final = frozenset(
    {"model", "input", "instructions", "tools", "tool_choice", "stream", "max_output_tokens"}
    | {"previous_response_id", "text", "reasoning"}
)


def _refuse(message: str, param: str, code: str | None = None) -> RequestError:
    return RequestError(message, param=param, code=code)


def previous_response(store: MemoryStore, tenant: str, response_id: Any) -> dict[str, Any]:
    """The kept conversation of response `response_id`, or a 400 naming why there is none:
    ``{"session", "messages", "chain"}``, `chain` the ids of the responses it is made of,
    oldest first, this one last.

    Each response keeps only what it added (its input and its output) and the ids of the
    responses before it: the conversation is read back in one more batch, and a long chain
    stores each turn once, not the whole conversation again with every response."""
    if not isinstance(response_id, str) or not response_id:
        raise _refuse(
            "`previous_response_id` must be the id of an earlier response", "previous_response_id"
        )
    namespace = (tenant, "responses")
    found = store.batch([Get(namespace=namespace, key=response_id)])[0]
    if found is None:
        raise _refuse(
            f"previous response {response_id!r:.80} is not one this server answered for this "
            "API key, or it was created with `store: false`; send the whole conversation in "
            "`input` instead",
            "previous_response_id",
            "previous_response_not_found",
        )
    chain = [str(k) for k in found.data.get("chain") or ()]
    earlier = store.batch([Get(namespace=namespace, key=k) for k in chain]) if chain else []
    if any(r is None for r in earlier):
        raise _refuse(
            f"an earlier response of the conversation of {response_id!r:.80} is no longer "
            "kept; send the whole conversation in `input` instead",
            "previous_response_id",
            "previous_response_not_found",
        )
    messages = [m for r in earlier if r is not None for m in r.data["messages"]]
    return {
        "session": found.data["session"],
        "messages": [*messages, *found.data["messages"]],
        "chain": [*chain, response_id],
    }


def _messages(items: Any) -> list[dict[str, Any]]:
    """Responses input items as chat messages (a 400 naming what is wrong)."""
    try:
        return responses_input_to_openai(items)
    except MessageFormatError as exc:
        raise _refuse(str(exc), "input") from None


def _tools(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _refuse("`tools` must be a list of tool definitions", "tools")
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(raw):
        kind = tool.get("type") if isinstance(tool, Mapping) else None
        if kind != "function":
            raise _refuse(
                f"`tools[{i}]` is of type {kind!r:.40}: built-in tools run on OpenAI's servers, "
                "which a proxy cannot do; send function tools "
                '({"type": "function", "name", "parameters"}) only',
                "tools",
            )
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise _refuse(f"`tools[{i}]` needs a `name`", "tools")
        try:
            out += to_openai_tools([tool])
        except ConfigError as exc:
            raise _refuse(f"`tools[{i}]`: {exc}", "tools") from None
    return out


def _tool_choice(raw: Any) -> Any:
    if isinstance(raw, str):
        return raw
    if isinstance(raw, Mapping) and raw.get("type") == "function":
        return {"type": "function", "function": {"name": raw.get("name")}}
    raise _refuse(
        '`tool_choice` must be "auto", "none", "required" or {"type": "function", "name"}',
        "tool_choice",
    )


def chat_body_of_responses(
    body: Any, history: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A Responses API request as a chat-completions body, after `history` (the previous
    response's conversation), and the messages its `input` adds (a 400 `RequestError`
    naming what is wrong or not supported)."""
    body = body_fields(body, _HANDLED | _PASSED | _IGNORED, route="/v1/responses")
    if not isinstance(body.get("store", True), bool):
        raise _refuse(f"`store` must be true or false, got {body['store']!r:.40}", "store")
    if "input" not in body:
        raise _refuse("`input` is required: a string or a list of input items", "input")
    added = _messages(body["input"])
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise _refuse("`instructions` must be a string", "instructions")
    messages = [{"role": "system", "content": instructions}] if instructions else []
    out: dict[str, Any] = {
        "model": body.get("model"),
        "messages": [*messages, *history, *added],
        "stream": body.get("stream", False),
        "stream_options": {"include_usage": True},
    }
    tools = _tools(body.get("tools"))
    if tools:
        out["tools"] = tools
    if body.get("tool_choice") is not None:
        out["tool_choice"] = _tool_choice(body["tool_choice"])
    limit = body.get("max_output_tokens")
    if limit is not None:
        if type(limit) is not int or limit < 1:
            raise _refuse(
                "`max_output_tokens` must be a whole number of at least 1", "max_output_tokens"
            )
        out["max_completion_tokens"] = limit
    text = body.get("text")
    form = text.get("format") if isinstance(text, Mapping) else None
    if isinstance(form, Mapping) and form.get("type") == "json_schema":
        schema = {k: form[k] for k in ("name", "schema", "strict", "description") if k in form}
        out["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif isinstance(form, Mapping) and form.get("type") == "json_object":
        out["response_format"] = {"type": "json_object"}
    reasoning = body.get("reasoning")
    if isinstance(reasoning, Mapping) and reasoning.get("effort"):
        out["reasoning_effort"] = reasoning["effort"]
    out.update({k: body[k] for k in _PASSED if k in body})
    return out, added


def _usage(usage: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    prompt = int(usage.get("prompt_tokens") or 0)
    output = int(usage.get("completion_tokens") or 0)
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": int(reasoning)},
        "total_tokens": prompt + output,
    }


class ResponsesFace:
    """The Responses API's ``response`` object and events. What the response adds to the
    conversation (`added`, the input's messages, and its output) is kept, with `chain` (the
    ids of the responses before it), for a later `previous_response_id`, before the client
    has the response's end."""

    def __init__(
        self,
        body: Mapping[str, Any],
        *,
        added: list[dict[str, Any]],
        chain: list[str],
        store: MemoryStore,
        tenant: str,
        session: str,
    ) -> None:
        self.id = "resp_" + uuid.uuid4().hex
        self.created = int(time.time())
        self.request = body
        self.added = added
        self.chain = chain
        self.store = store
        self.tenant = tenant
        self.session = session
        self.keep = body.get("store", True) is not False
        self.sequence = 0

    def _response(
        self, status: str, output: list[dict[str, Any]], reply: Reply | None
    ) -> dict[str, Any]:
        body = self.request
        tools = body.get("tools") or []
        incomplete = reply is not None and reply.finish_reason == "length"
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": "incomplete" if incomplete else status,
            "model": body.get("model"),
            "output": output,
            "usage": _usage(reply.usage) if reply else None,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "metadata": body.get("metadata") or {},
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "temperature": body.get("temperature"),
            "top_p": body.get("top_p"),
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": tools,
            "text": body.get("text") or {"format": {"type": "text"}},
            "truncation": body.get("truncation", "disabled"),
            "store": self.keep,
        }

    async def _kept(self, reply: Reply) -> None:
        """Keep the conversation with the reply (unless ``store: false``), in a worker
        thread."""
        if not self.keep:
            return
        data = {
            "session": self.session,
            "chain": self.chain,
            "messages": [*self.added, reply.message()],
        }
        record = Record(
            namespace=(self.tenant, "responses"), key=self.id, kind=RESPONSE_KIND, data=data
        )
        await asyncio.to_thread(self.store.batch, [Put(record=record)])

    async def body(self, reply: Reply) -> dict[str, Any]:
        await self._kept(reply)
        output: list[dict[str, Any]] = []
        if reply.text:
            output.append(_message_item("msg_" + uuid.uuid4().hex, reply.text, "completed"))
        for call in reply.tool_calls:
            function = call["function"]
            output.append(
                _call_item(
                    "fc_" + uuid.uuid4().hex, call["id"], function["name"], function["arguments"]
                )
            )
        return self._response("completed", output, reply)

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return sse(data, kind)

    async def events(self, chunks: AsyncIterator[dict[str, Any]]) -> AsyncGenerator[bytes]:
        blocks = Blocks(str(self.request.get("model")))
        start = self._response("in_progress", [], None)
        yield self._event("response.created", response=start)
        yield self._event("response.in_progress", response=start)
        output: list[dict[str, Any]] = []
        item: dict[str, Any] = {}
        async for chunk in chunks:
            steps = blocks.feed(chunk)
            for step in steps:
                at = {"item_id": item.get("id"), "output_index": len(output) - 1}
                if step.kind == "start_text":
                    item = _message_item("msg_" + uuid.uuid4().hex, "", "in_progress")
                    item["content"] = []
                    output.append(item)
                    added = {"output_index": len(output) - 1, "item": dict(item)}
                    yield self._event("response.output_item.added", **added)
                    part = {"type": "output_text", "text": "", "annotations": []}
                    at = {"item_id": item["id"], "output_index": len(output) - 1}
                    yield self._event(
                        "response.content_part.added", **at, content_index=0, part=part
                    )
                    item["text"] = ""
                elif step.kind == "start_call":
                    item = _call_item("fc_" + uuid.uuid4().hex, step.call_id, step.name, "")
                    item["status"] = "in_progress"
                    output.append(item)
                    added = {"output_index": len(output) - 1, "item": dict(item)}
                    yield self._event("response.output_item.added", **added)
                elif step.kind == "text":
                    item["text"] += step.text
                    yield self._event(
                        "response.output_text.delta",
                        **at,
                        content_index=0,
                        delta=step.text,
                        logprobs=[],
                    )
                elif step.kind == "arguments":
                    item["arguments"] += step.text
                    yield self._event(
                        "response.function_call_arguments.delta", **at, delta=step.text
                    )
                else:
                    for event in self._closed(item, len(output) - 1):
                        yield event
        for _ in blocks.close():
            for event in self._closed(item, len(output) - 1):
                yield event
        reply = blocks.reply
        await self._kept(reply)
        done = self._response("completed", output, reply)
        kind = "response.incomplete" if done["status"] == "incomplete" else "response.completed"
        yield self._event(kind, response=done)

    def _closed(self, item: dict[str, Any], index: int) -> list[bytes]:
        """The events that close `item` (made whole in place)."""
        at = {"item_id": item["id"], "output_index": index}
        out: list[bytes] = []
        if item["type"] == "message":
            text = item.pop("text")
            part = {"type": "output_text", "text": text, "annotations": []}
            out.append(
                self._event(
                    "response.output_text.done", **at, content_index=0, text=text, logprobs=[]
                )
            )
            out.append(self._event("response.content_part.done", **at, content_index=0, part=part))
            item["content"] = [part]
        else:
            out.append(
                self._event(
                    "response.function_call_arguments.done",
                    **at,
                    name=item["name"],
                    arguments=item["arguments"],
                )
            )
        item["status"] = "completed"
        out.append(self._event("response.output_item.done", output_index=index, item=dict(item)))
        return out

    def error_event(self, body: Mapping[str, Any]) -> bytes:
        error = error_of(body)
        return self._event(
            "error",
            code=error.get("code") or error.get("type"),
            message=str(error.get("message") or "the reply failed"),
            param=error.get("param"),
        )


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _call_item(item_id: str, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "status": "completed",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }

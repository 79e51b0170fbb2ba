"""The wire formats the proxy answers in, over one pipeline.

Every face of the proxy (chat completions, the Responses API, Anthropic's Messages API) is
converted at the edge: its request becomes a chat-completions body that goes through the one
`ChatProxy` pipeline (the same budget, layout, report, recording and passthrough rules), and
the upstream's chunks (OpenAI ``chat.completion.chunk`` dicts, whatever the upstream) are
turned back into the face's own response and events by its `Face`:

- `Face.body`: the non-streamed response, from the assembled `Reply`;
- `Face.events`: the streamed response's server-sent events, from the chunks;
- `Face.error_event`: the event that ends a stream cut by an error, in the face's shape
  (a refusal before the response starts is answered by the route's error shape).

`Blocks` reads chunks as content blocks (the text, then each tool call, each opened and
closed in order), which is how both the Responses API and the Messages API stream.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from loomctx.server._errors import RequestError
from loomctx.server._upstream import Reply

__all__ = ["Block", "Blocks", "ChatFace", "Face", "arguments_of", "error_of", "sse"]


class Face(Protocol):
    """How one wire format answers (see the module docstring)."""

    async def body(self, reply: Reply) -> dict[str, Any]:
        """The non-streamed response for the finished `reply`."""
        ...

    def events(self, chunks: AsyncIterator[dict[str, Any]]) -> AsyncGenerator[bytes]:
        """The streamed response: server-sent events for `chunks`, ending the stream."""
        ...

    def error_event(self, body: Mapping[str, Any]) -> bytes:
        """The event that ends a stream cut by an error (`body`: OpenAI's error shape)."""
        ...


def sse(data: Mapping[str, Any], event: str | None = None) -> bytes:
    """One server-sent event: `data` as JSON, named `event` if given."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


class ChatFace:
    """Chat completions: the chunks as they come, then ``[DONE]``."""

    async def body(self, reply: Reply) -> dict[str, Any]:
        return reply.completion()

    async def events(self, chunks: AsyncIterator[dict[str, Any]]) -> AsyncGenerator[bytes]:
        async for chunk in chunks:
            yield sse(chunk)
        yield b"data: [DONE]\n\n"

    def error_event(self, body: Mapping[str, Any]) -> bytes:
        return sse(body)


@dataclass(frozen=True, slots=True, kw_only=True)
class Block:
    """One step of a streamed reply read as content blocks: a text block or a tool call
    opens (`start_text`, `start_call` with its id and name), gets a piece (`text`,
    `arguments`), or closes (`stop`)."""

    kind: Literal["start_text", "text", "start_call", "arguments", "stop"]
    text: str = ""
    call_id: str = ""
    name: str = ""


class Blocks:
    """Chat chunks read as content blocks, and folded into a `Reply` (for the end of the
    stream: its finish reason and usage). One block is open at a time: a chunk for another
    one closes it."""

    def __init__(self, model: str) -> None:
        self.reply = Reply(model)
        self._open: tuple[str, int] | None = None

    def feed(self, chunk: Mapping[str, Any]) -> list[Block]:
        """The blocks' steps in `chunk`."""
        self.reply.add(chunk)
        out: list[Block] = []
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if text:
                if self._open != ("text", 0):
                    out += self.close()
                    out.append(Block(kind="start_text"))
                    self._open = ("text", 0)
                out.append(Block(kind="text", text=str(text)))
            for call in delta.get("tool_calls") or ():
                index = int(call.get("index", 0))
                function = call.get("function") or {}
                if self._open != ("call", index):
                    out += self.close()
                    call_id = str(call.get("id") or "call_" + uuid.uuid4().hex[:24])
                    name = str(function.get("name") or "")
                    out.append(Block(kind="start_call", call_id=call_id, name=name))
                    self._open = ("call", index)
                if function.get("arguments"):
                    out.append(Block(kind="arguments", text=str(function["arguments"])))
        return out

    def close(self) -> list[Block]:
        """Close the open block, if any."""
        if self._open is None:
            return []
        self._open = None
        return [Block(kind="stop")]


def error_of(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``error`` object of an OpenAI error body (the body itself if it has none)."""
    error = body.get("error")
    return error if isinstance(error, Mapping) else body


def arguments_of(raw: str) -> Any:
    """A tool call's arguments (JSON text) as a value; text that is not JSON stays text."""
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        return raw


def body_fields(body: Any, known: Collection[str], *, route: str) -> Mapping[str, Any]:
    """`body` if it is a JSON object with only `known` fields, else a 400 `RequestError`
    naming the first field `route` does not serve."""
    if not isinstance(body, Mapping):
        raise RequestError("the request body must be a JSON object", code="invalid_body")
    unknown = sorted(set(body) - set(known))
    if unknown:
        names = ", ".join(f"`{k}`" for k in unknown)
        raise RequestError(
            f"{names} {'is' if len(unknown) == 1 else 'are'} not supported by Loom's {route}; "
            "remove it (docs/serving.md lists the fields served)",
            param=unknown[0],
        )
    return body

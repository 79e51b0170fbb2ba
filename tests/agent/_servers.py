"""A scripted HTTP server speaking the OpenAI and Anthropic wire protocols, for provider tests.

The real `openai` and `anthropic` SDK clients talk to it over HTTP on 127.0.0.1, so the tests
exercise the SDKs' own request building, SSE parsing, retries and timeouts. Each test scripts
the replies in order (`WireServer.script`); every request the server receives is recorded with
its parsed JSON body, so a test can assert on exactly what an SDK sent.

Builders below produce the payloads each provider streams: `openai_*` for chat completions
(`data: {...}` chunks closed by `data: [DONE]`), `anthropic_*` for the messages API (named
events `message_start` ... `message_stop`). A `Pause` inside a reply holds the connection open
(before the status line, or between events) to provoke timeouts; every pause ends early when the
server stops, so no handler thread outlives its test.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from loomctx.agent.llm import LLMChunk


@dataclass(frozen=True, slots=True, kw_only=True)
class Pause:
    """Hold the connection open for `seconds` (ends early when the server stops)."""

    seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class JSONReply:
    """A complete JSON response (an error, or a non-streaming body)."""

    status: int = 200
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0  # before the status line: the client sees no response at all


@dataclass(frozen=True, slots=True, kw_only=True)
class SSEReply:
    """A `text/event-stream` response: raw SSE event texts, with `Pause`s in between."""

    events: Sequence[str | Pause]
    status: int = 200


Reply = JSONReply | SSEReply


@dataclass(frozen=True, slots=True, kw_only=True)
class Recorded:
    """One request as the server received it."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any


class WireServer:
    """A threaded HTTP server on 127.0.0.1 that answers each request with the next scripted reply.

    A request with nothing left in the script gets a 400 naming the problem, and is counted in
    `unexpected`, so a test that makes one call too many fails loudly.
    """

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.unexpected = 0
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.01,), daemon=True)

    @property
    def url(self) -> str:
        """The server's root URL (the Anthropic SDK's `base_url`)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_url(self) -> str:
        """The OpenAI SDK's `base_url` (it appends `/chat/completions`)."""
        return f"{self.url}/v1"

    def script(self, *replies: Reply) -> None:
        """Queue replies, answered in order, one per request."""
        with self._lock:
            self._replies.extend(replies)

    @property
    def remaining(self) -> int:
        """How many scripted replies have not been used yet."""
        with self._lock:
            return len(self._replies)

    def start(self) -> WireServer:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """End every pause, stop serving and close the socket."""
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def _next(self, recorded: Recorded) -> Reply | None:
        with self._lock:
            self.requests.append(recorded)
            if not self._replies:
                self.unexpected += 1
                return None
            return self._replies.popleft()

    def _pause(self, seconds: float) -> None:
        self._stopping.wait(seconds)


def _handler_for(server: WireServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # the test output stays clean
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            recorded = Recorded(
                method="POST",
                path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=json.loads(raw) if raw else None,
            )
            reply = server._next(recorded)
            try:
                if reply is None:
                    self._json(400, {"error": {"message": "test server: no scripted reply left"}})
                elif isinstance(reply, JSONReply):
                    server._pause(reply.delay)
                    self._json(reply.status, reply.body, reply.headers)
                else:
                    self._sse(reply)
            except OSError:  # the client gave up (a timeout test): nothing left to say
                self.close_connection = True

        def _json(self, status: int, body: Any, headers: Mapping[str, str] = {}) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _sse(self, reply: SSEReply) -> None:
            # No content-length: the stream ends when the connection closes.
            self.send_response(reply.status)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("connection", "close")
            self.end_headers()
            self.close_connection = True
            for event in reply.events:
                if isinstance(event, Pause):
                    self.wfile.flush()
                    server._pause(event.seconds)
                else:
                    self.wfile.write(event.encode())
            self.wfile.flush()

    return Handler


# ---------------------------------------------------------------------------------------------
# OpenAI chat completions


def openai_chunk(
    delta: Mapping[str, Any] | None = None,
    *,
    finish_reason: str | None = None,
    model: str = "gpt-test",
) -> dict[str, Any]:
    """One `chat.completion.chunk` with a single choice."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": model,
        "choices": [{"index": 0, "delta": dict(delta or {}), "finish_reason": finish_reason}],
    }


def openai_usage_chunk(
    prompt: int, completion: int, *, cached: int = 0, written: int = 0
) -> dict[str, Any]:
    """The final chunk `stream_options={"include_usage": True}` asks for: no choices, usage."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "gpt-test",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
        },
    }


def openai_tool_delta(
    index: int, *, id: str | None = None, name: str | None = None, arguments: str = ""
) -> dict[str, Any]:
    """A `delta` carrying one fragment of tool call `index` (id and name come first, once)."""
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if id is not None:
        call["id"] = id
        call["type"] = "function"
    if name is not None:
        call["function"]["name"] = name
    return {"tool_calls": [call]}


def openai_sse(chunks: Iterable[Mapping[str, Any] | Pause], *, done: bool = True) -> SSEReply:
    """An SSE reply of `data: {chunk}` events, closed by `data: [DONE]`."""
    events: list[str | Pause] = [
        c if isinstance(c, Pause) else f"data: {json.dumps(c)}\n\n" for c in chunks
    ]
    if done:
        events.append("data: [DONE]\n\n")
    return SSEReply(events=events)


def openai_text(
    *pieces: str,
    finish_reason: str = "stop",
    usage: tuple[int, int] | None = (11, 3),
    cached: int = 0,
    written: int = 0,
) -> SSEReply:
    """A streamed text reply: a role chunk, one chunk per piece, the finish, the usage."""
    chunks: list[dict[str, Any]] = [openai_chunk({"role": "assistant", "content": ""})]
    chunks += [openai_chunk({"content": p}) for p in pieces]
    chunks.append(openai_chunk({}, finish_reason=finish_reason))
    if usage is not None:
        chunks.append(openai_usage_chunk(*usage, cached=cached, written=written))
    return openai_sse(chunks)


def openai_error(
    status: int, message: str, *, type: str = "invalid_request_error", **headers: str
) -> JSONReply:
    """An OpenAI error response: `{"error": {"message", "type", "param", "code"}}`."""
    body = {"error": {"message": message, "type": type, "param": None, "code": None}}
    return JSONReply(
        status=status, body=body, headers={k.replace("_", "-"): v for k, v in headers.items()}
    )


# ---------------------------------------------------------------------------------------------
# Anthropic messages


def anthropic_event(data: Mapping[str, Any]) -> str:
    """One named SSE event; the name is the payload's `type`, as Anthropic sends it."""
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n"


def anthropic_message_start(
    *,
    input_tokens: int = 21,
    cache_read: int = 0,
    cache_creation: int = 0,
    model: str = "claude-test",
) -> str:
    return anthropic_event(
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": input_tokens,
                    "output_tokens": 1,
                    "cache_read_input_tokens": cache_read,
                    "cache_creation_input_tokens": cache_creation,
                },
            },
        }
    )


def anthropic_text_block(index: int, *pieces: str) -> list[str]:
    """A text content block streamed as `text_delta`s."""
    return [
        anthropic_event(
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "text", "text": ""},
            }
        ),
        *(
            anthropic_event(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": p},
                }
            )
            for p in pieces
        ),
        anthropic_event({"type": "content_block_stop", "index": index}),
    ]


def anthropic_tool_block(index: int, id: str, name: str, *fragments: str) -> list[str]:
    """A `tool_use` block whose input arrives as `input_json_delta` fragments."""
    return [
        anthropic_event(
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}},
            }
        ),
        *(
            anthropic_event(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": f},
                }
            )
            for f in fragments
        ),
        anthropic_event({"type": "content_block_stop", "index": index}),
    ]


def anthropic_end(
    stop_reason: str = "end_turn", *, output_tokens: int = 7, **usage: int
) -> list[str]:
    """`message_delta` (stop reason, cumulative usage: output tokens, and any other counts
    given as keywords) and `message_stop`."""
    return [
        anthropic_event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens, **usage},
            }
        ),
        anthropic_event({"type": "message_stop"}),
    ]


def anthropic_sse(*parts: str | Pause | Sequence[str | Pause]) -> SSEReply:
    """An SSE reply from events and lists of events, flattened in order."""
    events: list[str | Pause] = []
    for part in parts:
        if isinstance(part, str | Pause):
            events.append(part)
        else:
            events.extend(part)
    return SSEReply(events=events)


def anthropic_text(
    *pieces: str,
    stop_reason: str = "end_turn",
    input_tokens: int = 21,
    cache_read: int = 0,
    output_tokens: int = 7,
) -> SSEReply:
    """A streamed text reply."""
    return anthropic_sse(
        anthropic_message_start(input_tokens=input_tokens, cache_read=cache_read),
        anthropic_text_block(0, *pieces),
        anthropic_end(stop_reason, output_tokens=output_tokens),
    )


def anthropic_error(status: int, type: str, message: str, **headers: str) -> JSONReply:
    """An Anthropic error response: `{"type": "error", "error": {"type", "message"}}`."""
    body = {"type": "error", "error": {"type": type, "message": message}}
    return JSONReply(
        status=status, body=body, headers={k.replace("_", "-"): v for k, v in headers.items()}
    )


# ---------------------------------------------------------------------------------------------
# Reading streams


async def collect(stream: AsyncIterator[LLMChunk]) -> list[LLMChunk]:
    """Every chunk of a stream."""
    return [chunk async for chunk in stream]


async def drain(stream: AsyncIterator[LLMChunk], into: list[LLMChunk]) -> None:
    """Append every chunk of a stream to `into`, so that a test still has the chunks that
    arrived before the stream raised."""
    async for chunk in stream:
        into.append(chunk)


def texts(chunks: Sequence[LLMChunk]) -> list[str]:
    """The text deltas of `chunks`."""
    return [c.text for c in chunks if c.kind == "text"]


def kinds(chunks: Sequence[LLMChunk]) -> list[str]:
    """The kind of each chunk."""
    return [c.kind for c in chunks]

"""`OpenAIWireServer`: any `LLM` (a `ScriptedLLM`, say) behind a local HTTP server speaking
OpenAI's chat-completions wire protocol, for examples and tests of code that calls a model over
HTTP (an `openai` client, `loomctx serve`'s proxy) with no network and no key.

``POST /v1/chat/completions`` converts the request's `messages` with `from_openai`, streams the
`LLM`'s answer, and sends it back as OpenAI does: ``chat.completion.chunk`` events closed by
``data: [DONE]`` when the request asks to stream (with a usage chunk when
``stream_options.include_usage`` is set), a ``chat.completion`` body otherwise. What the `LLM`
cannot answer (a `ScriptedLLM` whose script is used up, a reply that is an exception) is a 500
in OpenAI's error shape naming the failure, so the calling client raises instead of waiting. A
malformed request is a 400.

The server listens on a free port of 127.0.0.1 in a background thread; requests are answered one
at a time (a script is an order). Use it as a context manager, or `start()` / `stop()`::

    with OpenAIWireServer(ScriptedLLM(["Hello!"])) as upstream:
        client = openai.OpenAI(base_url=upstream.base_url, api_key="unused")
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from loomctx.agent.llm import LLM, Completed, LLMChunk, LLMOptions, ToolCallDelta, Usage
from loomctx.errors import LoomError
from loomctx.messages import from_openai

__all__ = ["OpenAIWireServer"]


class OpenAIWireServer:
    """`llm` served over OpenAI's chat-completions wire protocol on 127.0.0.1 (see the module
    docstring). `requests` holds every request body received, in order."""

    def __init__(self, llm: LLM, *, model: str = "scripted") -> None:
        self.llm = llm
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self._turn = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as `base_url` (``http://127.0.0.1:<port>/v1``)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> OpenAIWireServer:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> OpenAIWireServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def answer(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The OpenAI chunks answering one request `body` (raises `LoomError` for a malformed
        one, and whatever the `LLM` raises)."""
        raw = body.get("messages")
        if not isinstance(raw, list):
            raise _BadRequest("`messages` must be a list of chat messages")
        try:
            messages = from_openai(raw)
        except LoomError as exc:
            raise _BadRequest(str(exc)) from None
        tools = body.get("tools") or []
        options = LLMOptions(model=body.get("model"), temperature=body.get("temperature"))
        with self._turn:
            self.requests.append(body)
            chunks = asyncio.run(_drain(self.llm, messages, tools, options))
        return self._openai_chunks(chunks)

    def _openai_chunks(self, chunks: list[LLMChunk]) -> list[dict[str, Any]]:
        cid, created = "chatcmpl-" + uuid.uuid4().hex[:12], int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        out = [chunk({"role": "assistant", "content": ""})]
        usage: Usage | None = None
        for part in chunks:
            if part.kind == "text":
                out.append(chunk({"content": part.text}))
            elif isinstance(part, ToolCallDelta):
                call: dict[str, Any] = {"index": part.index, "function": {}}
                if part.id is not None:
                    call["id"], call["type"] = part.id, "function"
                if part.name is not None:
                    call["function"]["name"] = part.name
                call["function"]["arguments"] = part.arguments
                out.append(chunk({"tool_calls": [call]}))
            elif isinstance(part, Usage):
                usage = part
            elif isinstance(part, Completed):
                out.append(chunk({}, part.finish_reason))
                usage = part.usage or usage
        if usage is not None:
            out.append(
                {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": self.model,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": usage.input_tokens,
                        "completion_tokens": usage.output_tokens,
                        "total_tokens": usage.input_tokens + usage.output_tokens,
                        "prompt_tokens_details": {"cached_tokens": usage.cached_input_tokens},
                    },
                }
            )
        return out


class _BadRequest(LoomError):
    """A request the server cannot read: answered with 400."""


async def _drain(
    llm: LLM, messages: Any, tools: list[dict[str, Any]], options: LLMOptions
) -> list[LLMChunk]:
    return [c async for c in llm.stream(messages, tools=tools, options=options)]


def _completion(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``chat.completion`` a non-streaming client gets for the same chunks."""
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish, usage = "stop", None
    for c in chunks:
        usage = c.get("usage") or usage
        for choice in c["choices"]:
            delta = choice["delta"]
            text.append(delta.get("content") or "")
            for call in delta.get("tool_calls") or ():
                slot = calls.setdefault(
                    call["index"], {"id": "", "type": "function", "function": {"name": ""}}
                )
                slot["id"] = call.get("id") or slot["id"]
                slot["function"]["name"] += call["function"].get("name", "")
                slot["function"]["arguments"] = slot["function"].get("arguments", "") + call[
                    "function"
                ].get("arguments", "")
            finish = choice["finish_reason"] or finish
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    out: dict[str, Any] = {
        "id": chunks[0]["id"],
        "object": "chat.completion",
        "created": chunks[0]["created"],
        "model": chunks[0]["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
    }
    if usage is not None:
        out["usage"] = usage
    return out


def _handler_for(server: OpenAIWireServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # One write per response: Nagle's algorithm and the client's delayed ACK would
        # otherwise stall small responses written in pieces.
        wbufsize = 1 << 16

        def log_message(self, format: str, *args: Any) -> None:  # the caller's output stays clean
            pass

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._json(404, _error(f"no route {self.path!r}: POST /v1/chat/completions"))
                return
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                body = json.loads(raw)
                if not isinstance(body, dict):
                    raise _BadRequest("the request body must be a JSON object")
                chunks = server.answer(body)
            except (json.JSONDecodeError, _BadRequest) as exc:
                self._json(400, _error(f"bad request: {exc}"))
                return
            except Exception as exc:  # the LLM failed (a used-up script): say so
                self._json(500, _error(f"the model failed: {type(exc).__name__}: {exc}"))
                return
            if not body.get("stream"):
                self._json(200, _completion(chunks))
                return
            options = body.get("stream_options") or {}
            if not options.get("include_usage"):
                chunks = [c for c in chunks if c["choices"]]
            data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            self._send(200, data.encode(), "text/event-stream")

        def _json(self, status: int, body: Any) -> None:
            self._send(status, json.dumps(body).encode(), "application/json")

        def _send(self, status: int, data: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "server_error", "param": None, "code": None}}

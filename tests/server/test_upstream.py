"""`OpenAIUpstream` reading a real HTTP server's event stream: what OpenAI-compatible servers
send besides one JSON chunk per event (comments, events split over several ``data:`` lines,
an error in the middle of the stream, a stream cut before ``[DONE]``), and refusals."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from loomctx.agent.llm import allow_model_requests
from loomctx.server._config import ModelConfig
from loomctx.server._upstream import OpenAIUpstream, UpstreamError
from tests.agent._servers import (
    Pause,
    SSEReply,
    WireServer,
    openai_chunk,
    openai_error,
    openai_text,
)

KEY = "sk-upstream-abcdef0123456789"


@pytest.fixture
def wire() -> Iterator[WireServer]:
    server = WireServer().start()
    yield server
    server.stop()


def _stream(wire: WireServer, fields: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        upstream = OpenAIUpstream(
            ModelConfig(name="m", base_url=wire.openai_url, upstream="gpt-up", api_key_env="K")
        )
        try:
            return [
                c
                async for c in upstream.stream(
                    [{"role": "user", "content": "hi"}], fields=fields or {}
                )
            ]
        finally:
            await upstream.aclose()

    with allow_model_requests():
        return asyncio.run(run())


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K", KEY)


def test_chunks_pass_through_and_the_request_is_the_sdks(wire: WireServer) -> None:
    wire.script(openai_text("Hel", "lo"))
    chunks = _stream(wire, {"temperature": 0.2, "stream": False})
    assert [c["choices"][0]["delta"].get("content") for c in chunks[:3]] == ["", "Hel", "lo"]
    assert chunks[-1]["usage"]["prompt_tokens"] == 11
    (sent,) = wire.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.body == {
        "model": "gpt-up",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.2,
        "stream": True,  # always streamed; a client that did not ask gets it assembled
    }


def test_comments_and_multi_line_events_are_read_as_sse_says(wire: WireServer) -> None:
    payload = json.dumps(openai_chunk({"content": "two lines"}), indent=1)
    multi = "".join(f"data: {line}\n" for line in payload.splitlines()) + "\n"
    wire.script(
        SSEReply(
            events=[
                ": keep-alive comment\n\n",
                "event: message\n" + f"data:{json.dumps(openai_chunk({'content': 'a'}))}\n\n",
                multi,
                "data: [DONE]\n\n",
                f"data: {json.dumps(openai_chunk({'content': 'after done'}))}\n\n",
            ]
        )
    )
    chunks = _stream(wire)
    assert [c["choices"][0]["delta"]["content"] for c in chunks] == ["a", "two lines"]


def test_a_server_holding_the_stream_open_after_done_is_left_within_a_second(
    wire: WireServer,
) -> None:
    """After `[DONE]` the proxy reads on (to keep the connection), but not for as long as a
    server that never ends the body would have it wait."""
    wire.script(
        SSEReply(
            events=[f"data: {json.dumps(openai_chunk({'content': 'x'}))}\n\n", "data: [DONE]\n\n",
                    Pause(seconds=30)]
        )
    )  # fmt: skip
    start = time.monotonic()
    assert [c["choices"][0]["delta"]["content"] for c in _stream(wire)] == ["x"]
    assert time.monotonic() - start < 5


def test_a_stream_cut_before_done_ends_with_what_came(wire: WireServer) -> None:
    wire.script(SSEReply(events=[f"data: {json.dumps(openai_chunk({'content': 'x'}))}\n\n"]))
    assert [c["choices"][0]["delta"]["content"] for c in _stream(wire)] == ["x"]


def test_an_error_event_mid_stream_is_an_upstream_error_without_the_key(
    wire: WireServer,
) -> None:
    error = {"error": {"message": f"overloaded (key {KEY})", "type": "server_error"}}
    wire.script(
        SSEReply(
            events=[
                f"data: {json.dumps(openai_chunk({'content': 'x'}))}\n\n",
                f"data: {json.dumps(error)}\n\n",
            ]
        )
    )
    with pytest.raises(UpstreamError) as raised:
        _stream(wire)
    assert raised.value.status == 502
    assert raised.value.body["error"]["message"] == "overloaded (key [redacted])"


def test_an_event_that_is_not_json_is_named(wire: WireServer) -> None:
    wire.script(SSEReply(events=["data: <html>oops</html>\n\n"]))
    with pytest.raises(UpstreamError, match="not a JSON object") as raised:
        _stream(wire)
    assert raised.value.status == 502


def test_a_refusal_keeps_its_status_and_body(wire: WireServer) -> None:
    wire.script(openai_error(429, f"slow down, {KEY}", type="rate_limit_error"))
    with pytest.raises(UpstreamError) as raised:
        _stream(wire)
    assert raised.value.status == 429
    assert raised.value.body["error"]["type"] == "rate_limit_error"
    assert KEY not in json.dumps(raised.value.body)


def test_an_unreachable_upstream_is_a_502(wire: WireServer) -> None:
    wire.stop()
    with pytest.raises(UpstreamError, match="could not be reached") as raised:
        _stream(wire)
    assert raised.value.status == 502


class _KeepAliveUpstream(ThreadingHTTPServer):
    """Streams one text chunk and ``[DONE]`` per request, with a content-length so that the
    connection stays open for the next request (as OpenAI's servers keep it); counts the
    connections its clients opened."""

    daemon_threads = True

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                owner.connections += 1

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["content-length"]))
                owner.requests += 1
                body = (
                    f"data: {json.dumps(openai_chunk({'content': 'ok'}))}\n\ndata: [DONE]\n\n"
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__(("127.0.0.1", 0), Handler)


def test_the_upstream_connection_is_kept_from_call_to_call() -> None:
    """Reading a stream only to ``[DONE]`` left its response unread and closed it with its
    connection: every proxied call opened a new one (a TLS handshake each, to a provider)."""
    server = _KeepAliveUpstream()
    threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()

    async def run() -> list[list[str]]:
        host, port = server.server_address[:2]
        upstream = OpenAIUpstream(
            ModelConfig(name="m", base_url=f"http://{host!s}:{port}/v1", api_key_env="K")
        )
        try:
            return [
                [
                    c["choices"][0]["delta"]["content"]
                    async for c in upstream.stream([{"role": "user", "content": "hi"}], fields={})
                ]
                for _ in range(3)
            ]
        finally:
            await upstream.aclose()

    try:
        with allow_model_requests():
            replies = asyncio.run(run())
    finally:
        server.shutdown()
        server.server_close()
    assert replies == [["ok"]] * 3
    assert (server.requests, server.connections) == (3, 1)

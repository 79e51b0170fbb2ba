"""A session is never held past its request: ids are validated exactly, a response that
cannot start still frees its session, a client that goes away cancels the upstream call, the
upstream's timeouts are the operator's, and MCP's `GET` is refused rather than held open."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import openai
import pytest
import uvicorn

from loomctx.agent.llm import allow_model_requests
from loomctx.server import LoomService, create_app, hash_key
from loomctx.server._config import serve_config_from
from loomctx.server._errors import RequestError
from loomctx.server._service import check_session_id
from tests.agent._servers import JSONReply, Pause, WireServer, openai_chunk, openai_sse, openai_text
from tests.server._http import call
from tests.server.conftest import ACME_KEY, UPSTREAM_KEY, free_port, serve_table, start_loom

HANG = 600.0  # an upstream that never answers (its pause ends when the test's server stops)


def _wait_for(condition: Any, what: str, *, within: float = 30.0) -> None:
    """Poll `condition` until it holds; fail naming `what` after a generous bound."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.01)


@pytest.mark.parametrize("session", ["s1\n", "s1\r\n", "\ns1", "s1\x00"])
def test_a_session_id_is_validated_exactly(session: str) -> None:
    with pytest.raises(RequestError) as raised:
        check_session_id(session)
    assert raised.value.code == "invalid_session"
    assert raised.value.status == 400


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        (
            "POST",
            "/v1/chat/completions",
            {"model": "gpt-test", "user": "s1\n", "messages": [{"role": "user", "content": "hi"}]},
        ),
        ("GET", "/v1/sessions/s1%0A", None),
        ("POST", "/v1/sessions/s1%0A/memory", {"content": "a fact"}),
        ("GET", "/v1/sessions/s1%0A/memory?q=fact", None),
    ],
)
def test_a_session_id_ending_in_a_newline_is_refused_before_anything_is_stored(
    loom, method: str, path: str, body: Any
) -> None:
    status, answer, _ = call(method, f"{loom.url}{path}", key=ACME_KEY, body=body)
    assert status == 400
    assert answer["error"]["code"] == "invalid_session"
    assert loom.wire.requests == []  # nothing went upstream
    assert loom.service.sessions("acme") == []  # no session was claimed, with or without `\n`
    # The session (and its id without the newline) still serves at once.
    loom.wire.script(openai_text("still here"))
    reply = loom.openai(ACME_KEY).chat.completions.create(
        model="gpt-test", user="s1", messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.choices[0].message.content == "still here"


def test_an_mcp_session_id_ending_in_a_newline_is_refused(loom) -> None:
    status, answer, _ = call(
        "POST",
        f"{loom.url}/mcp/s1%0A",
        key=ACME_KEY,
        body={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream"},
    )
    assert status == 400
    assert answer["error"]["code"] == "invalid_session"


@pytest.mark.parametrize("stream", [False, True])
def test_a_response_that_cannot_start_still_frees_its_session(
    wire: WireServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    """The server (or the connection) refuses the response's start: the session's lock is
    released all the same, and its next request is served."""
    monkeypatch.setenv("LOOM_TEST_UPSTREAM_KEY", UPSTREAM_KEY)
    config = serve_config_from(serve_table(wire), store=str(tmp_path / "l.db"), embedder="none")
    service = LoomService(config)
    app = create_app(service)
    wire.script(openai_text("never delivered"))
    body = json.dumps(
        {
            "model": "gpt-test",
            "user": "doomed",
            "stream": stream,
            "messages": [{"role": "user", "content": "hi"}],
        }
    ).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"authorization", f"Bearer {ACME_KEY}".encode()),
            (b"content-type", b"application/json"),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
    started: list[dict[str, Any]] = []

    async def run() -> None:
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.Event().wait()  # the client stays: only the start fails
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                started.append(message)
                raise OSError("the server refused the response's headers")

        with pytest.raises(OSError, match="refused the response"):
            await app(scope, receive, send)
        lock = service.lock("acme", "doomed")
        async with asyncio.timeout(30), lock:  # freed: taken at once
            pass

    try:
        with allow_model_requests():
            asyncio.run(run())
    finally:
        service.close()
    assert started  # the refusal happened where a response starts
    assert wire.remaining == 0


@pytest.fixture
def hanging(wire: WireServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A Loom server whose `gpt-test` has the given timeouts (in its `[serve.models.*]`)."""
    monkeypatch.setenv("LOOM_TEST_UPSTREAM_KEY", UPSTREAM_KEY)
    running: list[tuple[uvicorn.Server, threading.Thread]] = []

    def make(**timeouts: float) -> str:
        table = serve_table(wire)
        table["models"]["gpt-test"].update(timeouts)
        config = serve_config_from(
            table, store=str(tmp_path / f"h{len(running)}.db"), embedder="none"
        )
        server, thread, url = start_loom(LoomService(config))
        running.append((server, thread))
        return url

    with allow_model_requests():
        yield make
    for server, thread in running:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_goes_away_frees_the_session_from_a_hanging_upstream(
    hanging: Any, wire: WireServer, stream: bool
) -> None:
    url = hanging()  # the default timeouts: far longer than this test waits
    wire.script(JSONReply(body={}, delay=HANG), openai_text("second"))
    parts = urlsplit(url)
    first = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    body = {
        "model": "gpt-test",
        "user": "busy",
        "stream": stream,
        "messages": [{"role": "user", "content": "hang, please"}],
    }
    first.request(
        "POST",
        "/v1/chat/completions",
        body=json.dumps(body),
        headers={"Authorization": f"Bearer {ACME_KEY}", "Content-Type": "application/json"},
    )
    _wait_for(lambda: len(wire.requests) == 1, "the first request to reach the upstream")
    first.close()  # the client goes away while the upstream hangs
    with openai.OpenAI(base_url=f"{url}/v1", api_key=ACME_KEY, max_retries=0, timeout=60) as c:
        reply = c.chat.completions.create(
            model="gpt-test",
            user="busy",
            messages=[
                {"role": "user", "content": "hang, please"},
                {"role": "user", "content": "and now?"},
            ],
        )
    assert reply.choices[0].message.content == "second"


def test_a_client_that_goes_away_mid_stream_frees_the_session(
    hanging: Any, wire: WireServer
) -> None:
    """The stream has started (its first chunk is read) and the upstream then hangs: the
    client leaving closes the upstream's stream and frees the session."""
    url = hanging()
    first_chunk = openai_chunk({"role": "assistant", "content": "par"})
    wire.script(openai_sse([first_chunk, Pause(seconds=HANG)]), openai_text("second"))
    parts = urlsplit(url)
    first = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    body = {
        "model": "gpt-test",
        "user": "mid",
        "stream": True,
        "messages": [{"role": "user", "content": "go"}],
    }
    first.request(
        "POST",
        "/v1/chat/completions",
        body=json.dumps(body),
        headers={"Authorization": f"Bearer {ACME_KEY}", "Content-Type": "application/json"},
    )
    response = first.getresponse()
    assert response.status == 200
    assert b'"par"' in response.readline()  # the first event's data line
    first.close()
    with openai.OpenAI(base_url=f"{url}/v1", api_key=ACME_KEY, max_retries=0, timeout=60) as c:
        reply = c.chat.completions.create(
            model="gpt-test", user="mid", messages=[{"role": "user", "content": "again"}]
        )
    assert reply.choices[0].message.content == "second"


def test_an_upstream_slower_than_first_byte_timeout_is_a_504(
    hanging: Any, wire: WireServer
) -> None:
    url = hanging(connect_timeout=1, first_byte_timeout=1, timeout=30)
    wire.script(JSONReply(body={}, delay=HANG))
    status, body, _ = call(
        "POST",
        f"{url}/v1/chat/completions",
        key=ACME_KEY,
        body={"model": "gpt-test", "user": "slow", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert status == 504
    assert body["error"]["type"] == "upstream_error"
    assert body["error"]["code"] == "upstream_timeout"
    assert "`first_byte_timeout`" in body["error"]["message"]
    assert "[serve.models.gpt-test]" in body["error"]["message"]


def test_a_reply_longer_than_timeout_ends_its_stream_on_an_error_event(
    hanging: Any, wire: WireServer
) -> None:
    url = hanging(connect_timeout=5, first_byte_timeout=5, timeout=5)  # the first comes at once
    wire.script(
        openai_sse([openai_chunk({"role": "assistant", "content": "par"}), Pause(seconds=HANG)])
    )
    with openai.OpenAI(base_url=f"{url}/v1", api_key=ACME_KEY, max_retries=0, timeout=60) as c:
        stream = c.chat.completions.create(
            model="gpt-test", stream=True, messages=[{"role": "user", "content": "hi"}]
        )
        got: list[str] = []
        with pytest.raises(openai.APIError) as raised:
            got.extend(chunk.choices[0].delta.content or "" for chunk in stream)
    assert got == ["par"]
    assert "did not finish its reply" in raised.value.message
    assert "`timeout`" in raised.value.message


def test_mcp_get_is_refused_not_held_open(loom) -> None:
    """Stateless MCP has nothing to push: `GET` (and `DELETE`) are 405s naming `POST`. (Only
    the status line is read first: a stream held open would never end.)"""
    parts = urlsplit(loom.url)
    for method in ("GET", "DELETE"):
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
        try:
            headers = {"Authorization": f"Bearer {ACME_KEY}", "Accept": "text/event-stream"}
            conn.request(method, "/mcp/notes", headers=headers)
            response = conn.getresponse()
            assert response.status == 405
            assert response.getheader("allow") == "POST"
            body = json.loads(response.read())
        finally:
            conn.close()
        assert body["error"]["code"] == "method_not_allowed"
        assert "`POST /mcp/notes`" in body["error"]["message"]


def test_sigterm_stops_a_server_whose_request_waits_on_a_hanging_upstream(
    wire: WireServer, tmp_path: Path
) -> None:
    """`loomctx serve` as users run it: SIGTERM while a request waits on an upstream that
    never answers (the default timeouts, far longer than this test waits); the server gives
    it `--shutdown-timeout`, cancels it, and exits."""
    wire.script(JSONReply(body={}, delay=HANG))
    config = tmp_path / "loom.toml"
    config.write_text(
        f'store = "{tmp_path / "loom.db"}"\nembedder = "none"\n'
        f'[serve.models.local]\nbase_url = "{wire.openai_url}"\n'
        f'[serve.tenants.me]\nkeys = ["{hash_key("sk-me")}"]\n',
        encoding="utf-8",
    )
    port = free_port()
    exe = Path(sys.executable).parent / "loomctx"
    args = ["serve", "--config", str(config), "--port", str(port), "--shutdown-timeout", "1"]
    proc = subprocess.Popen(
        [str(exe), *args],
        stderr=subprocess.PIPE,
        env={**os.environ, "LOOM_EMBEDDER": "none"},
        text=True,
    )
    client = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:

        def ready() -> bool:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                return call("GET", f"http://127.0.0.1:{port}/readyz")[0] == 200
            except OSError:
                return False

        _wait_for(ready, "`loomctx serve` to start")
        body = {"model": "local", "user": "u1", "messages": [{"role": "user", "content": "hi"}]}
        client.request(
            "POST",
            "/v1/chat/completions",
            body=json.dumps(body),
            headers={"Authorization": "Bearer sk-me", "Content-Type": "application/json"},
        )
        _wait_for(lambda: len(wire.requests) == 1, "the request to reach the upstream")
        proc.send_signal(signal.SIGTERM)
        # uvicorn re-raises the signal once it has shut down
        assert proc.wait(timeout=60) in (0, -signal.SIGTERM)
    finally:
        client.close()
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)

"""`loomctx serve` publishes each window's ``context.assembled`` event on the configured bus
(the event Loom's sessions publish, with the tenant, model and report id), so that other
processes can follow calls live: on the in-process bus, and on Redis Streams across processes."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from loomctx.agent.llm import allow_model_requests
from loomctx.server import LoomService
from loomctx.server._config import serve_config_from
from loomctx.session.bus import Event, InProcessEventBus
from loomctx.session.topics import CONTEXT_ASSEMBLED
from tests.agent._servers import WireServer, openai_text
from tests.server.conftest import ACME_KEY, UPSTREAM_KEY, serve_table, start_loom
from tests.session.conftest import REDIS_URL, _redis_ready


@pytest.fixture
def serve(wire: WireServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Starts Loom's server over a service made with `bus` (a bus object) or `url` (the
    `bus` setting); returns its URL."""
    monkeypatch.setenv("LOOM_TEST_UPSTREAM_KEY", UPSTREAM_KEY)
    running: list[tuple[uvicorn.Server, threading.Thread]] = []

    def make(*, bus: Any = None, url: str | None = None) -> str:
        config = serve_config_from(
            serve_table(wire), store=str(tmp_path / f"l{len(running)}.db"), embedder="none", bus=url
        )
        server, thread, address = start_loom(LoomService(config, bus=bus))
        running.append((server, thread))
        return address

    with allow_model_requests():
        yield make
    for server, thread in running:
        server.should_exit = True
        thread.join(timeout=10)


def _check(event: Event, *, session: str, report_id: str, via: str) -> None:
    assert event.topic == CONTEXT_ASSEMBLED
    assert event.source == "serve:acme"
    payload = event.payload
    assert list(payload["session_ids"]) == [session]
    assert payload["tenant"] == "acme"
    assert payload["report_id"] == report_id
    assert payload["via"] == via
    assert payload["report"]["total_tokens"] > 0
    assert payload["report"]["available"] == 1600


def test_events_on_the_in_process_bus(serve, wire: WireServer) -> None:
    bus = InProcessEventBus()
    seen: list[Event] = []
    bus.subscribe("context.*", seen.append)
    url = serve(bus=bus)
    wire.script(openai_text("Hello."))
    with openai.OpenAI(base_url=f"{url}/v1", api_key=ACME_KEY, max_retries=0) as c:
        raw = c.chat.completions.with_raw_response.create(
            model="gpt-test", messages=[{"role": "user", "content": "Hi there"}], user="live"
        )

    async def build() -> str:
        headers = {"Authorization": f"Bearer {ACME_KEY}"}
        async with httpx2.AsyncClient(headers=headers) as http:
            transport = streamable_http_client(f"{url}/mcp/live", http_client=http)
            async with Client(transport) as mcp:
                result = await mcp.call_tool("build_context", {"query": "Hi", "model": "gpt-test"})
        return str(json.loads(result.content[0].text)["report_id"])

    built = asyncio.run(build())
    deadline = time.monotonic() + 10
    while len(seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    proxied, mcp_built = seen
    _check(proxied, session="live", report_id=raw.headers["x-loom-report"], via="proxy")
    assert proxied.payload["query"] == "Hi there"
    assert proxied.payload["model"] == "gpt-test"
    _check(mcp_built, session="live", report_id=built, via="mcp")


def test_events_on_redis_reach_another_process(serve, wire: WireServer) -> None:
    problem = _redis_ready()
    if problem is not None:
        pytest.skip(problem)
    import uuid

    from loomctx.session.redis_bus import RedisStreamsBus

    prefix = f"loomtest:{uuid.uuid4().hex[:12]}"
    url = serve(url=f"{REDIS_URL}?prefix={prefix}")
    wire.script(openai_text("Hello."))

    async def follow() -> tuple[list[Event], str]:
        # A follower of its own (another process would do the same), subscribed first.
        follower = RedisStreamsBus(REDIS_URL, prefix=prefix, block=0.05)
        seen: list[Event] = []
        got = asyncio.Event()

        def on_event(event: Event) -> None:
            seen.append(event)
            got.set()

        follower.subscribe("context.*", on_event)

        def call() -> str:
            with openai.OpenAI(base_url=f"{url}/v1", api_key=ACME_KEY, max_retries=0) as c:
                raw = c.chat.completions.with_raw_response.create(
                    model="gpt-test", messages=[{"role": "user", "content": "Hi"}], user="r1"
                )
            return str(raw.headers["x-loom-report"])

        report_id = await asyncio.to_thread(call)
        await asyncio.wait_for(got.wait(), timeout=10)
        await follower.close()
        return seen, report_id

    try:
        seen, report_id = asyncio.run(follow())
    finally:
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()
    (event,) = seen
    _check(event, session="r1", report_id=report_id, via="proxy")


def test_a_failing_bus_is_logged_and_the_request_goes_on(
    serve, wire: WireServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="loomctx.server")
    bus = InProcessEventBus()
    asyncio.run(bus.close())  # it refuses every publish now
    url = serve(bus=bus)
    wire.script(openai_text("Still answered."))
    with openai.OpenAI(base_url=f"{url}/v1", api_key=ACME_KEY, max_retries=0) as c:
        raw = c.chat.completions.with_raw_response.create(
            model="gpt-test", messages=[{"role": "user", "content": "Hi"}], user="nobus"
        )
    assert raw.parse().choices[0].message.content == "Still answered."
    assert raw.headers["x-loom-report"].startswith("rep_")  # the window was sent
    (line,) = [r for r in caplog.records if r.getMessage() == "the bus refused the window's event"]
    assert line.levelno == logging.WARNING
    assert line.error.startswith("BusClosedError")  # type: ignore[attr-defined]

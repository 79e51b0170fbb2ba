"""The in-process bus across event loops (a second `asyncio.run`).

These tests are synchronous on purpose: each runs its own event loops, one after another.
Every wait inside is bounded by `asyncio.timeout` as a safety net, so that a regression fails
the test instead of hanging the suite (nothing here measures speed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from loomctx.errors import BusLoopError
from loomctx.session import topics
from loomctx.session.bus import Event, InProcessEventBus
from loomctx.session.controller import ContextController
from loomctx.stores.sqlite import SQLiteStore
from tests.session._helpers import said

SAFETY = 10  # seconds


def run(body: Callable[[], Awaitable[Any]]) -> Any:
    """`asyncio.run(body())`, failing instead of hanging."""

    async def bounded() -> Any:
        async with asyncio.timeout(SAFETY):
            return await body()

    return asyncio.run(bounded())


async def settle(rounds: int = 20) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


def test_a_second_asyncio_run_delivers_and_full_mailboxes_do_not_block() -> None:
    bus = InProcessEventBus(max_pending=2)
    got: list[str] = []

    async def handler(event: Event) -> None:
        got.append(event.topic)

    bus.subscribe("*", handler, name="h")

    async def first() -> None:
        await bus.publish("a")
        await settle()

    async def second() -> None:
        for i in range(10):  # five times the mailbox: publish must not wait forever
            await bus.publish(f"b{i}")
        await bus.close()

    run(first)
    run(second)
    assert got == ["a", *(f"b{i}" for i in range(10))]
    stats = bus.stats()
    assert (stats.published, stats.delivered, stats.dropped) == (11, 11, 0)


def test_what_the_first_loop_left_queued_is_delivered_on_the_next() -> None:
    bus = InProcessEventBus()
    got: list[str] = []

    async def handler(event: Event) -> None:
        got.append(event.topic)
        if event.topic == "stuck":
            await asyncio.sleep(3600)  # still running when the loop ends

    bus.subscribe("*", handler, name="h")

    async def first() -> None:
        for topic in ("stuck", "q1", "q2"):
            await bus.publish(topic)
        await settle()

    async def second() -> None:
        await bus.publish("after")
        await bus.close()

    run(first)  # asyncio.run cancels the stuck handler as the loop ends
    run(second)
    assert got == ["stuck", "q1", "q2", "after"]
    stats = bus.stats().subscriptions["h"]
    assert (stats.delivered, stats.dropped, stats.pending) == (3, 1, 0)


def test_a_loop_closed_without_cancelling_its_tasks_loses_only_what_ran_there() -> None:
    bus = InProcessEventBus()
    got: list[str] = []

    async def handler(event: Event) -> None:
        got.append(event.topic)
        if event.topic == "stuck":
            await asyncio.Event().wait()

    bus.subscribe("*", handler, name="h")
    loop = asyncio.new_event_loop()

    async def first() -> None:
        for topic in ("stuck", "q1"):
            await bus.publish(topic)
        await settle()

    loop.run_until_complete(first())
    loop.close()  # its worker is left pending, mid-handler, forever

    async def second() -> None:
        await bus.publish("after")
        await bus.close()

    run(second)
    assert got == ["stuck", "q1", "after"]
    stats = bus.stats().subscriptions["h"]
    assert (stats.delivered, stats.dropped, stats.pending) == (2, 1, 0)


def test_a_publisher_waiting_when_its_loop_closed_is_withdrawn() -> None:
    bus = InProcessEventBus(max_pending=1)
    got: list[str] = []

    async def handler(event: Event) -> None:
        got.append(event.topic)
        if event.topic == "running":
            await asyncio.Event().wait()

    bus.subscribe("*", handler, name="h")
    loop = asyncio.new_event_loop()
    waiting: list[asyncio.Task[Event]] = []

    async def first() -> None:
        await bus.publish("running")
        await settle()
        await bus.publish("queued")
        waiting.append(loop.create_task(bus.publish("waiting")))  # the mailbox is full
        await settle()

    loop.run_until_complete(first())
    loop.close()
    assert not waiting[0].done()

    async def second() -> None:
        await bus.publish("after")
        await bus.close()

    run(second)
    assert got == ["running", "queued", "after"]
    stats = bus.stats().subscriptions["h"]
    assert (stats.delivered, stats.dropped, stats.pending) == (2, 2, 0)  # running, waiting


def test_another_open_loop_with_live_workers_is_a_typed_error_at_once() -> None:
    bus = InProcessEventBus()

    async def handler(event: Event) -> None:
        pass

    bus.subscribe("*", handler, name="h")
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(bus.publish("a"))  # its worker now waits on `loop`
        with pytest.raises(BusLoopError, match=r"runs on another event loop, which is still open"):
            run(lambda: bus.publish("b"))
        with pytest.raises(BusLoopError, match=r"close the bus there \(`await bus.close\(\)`\)"):
            run(bus.close)
        loop.run_until_complete(bus.close())  # on its own loop, the bus closes normally
    finally:
        loop.close()
    assert bus.stats().delivered == 1
    run(bus.close)  # closed, and its loop too: idempotent from anywhere


def test_a_controller_keeps_working_across_event_loops(tmp_path: Path) -> None:
    """The issue's scenario: `add_task` in a second `asyncio.run` hung once a mailbox was full."""
    store = SQLiteStore(tmp_path / "sessions.db")
    bus = InProcessEventBus(max_pending=2)
    added: list[str] = []

    async def record(event: Event) -> None:
        added.append(event.payload["task_id"])

    bus.subscribe(topics.TASK_ADDED, record)
    controller = ContextController(store, bus)

    async def first() -> None:
        session = await controller.create_session("s")
        await session.add_task(said("t0", "hello"))

    async def second() -> None:
        session = controller.get_session("s")
        for i in range(1, 8):
            await session.add_task(said(f"t{i}", f"message {i}"))
        await controller.close()
        await bus.close()

    run(first)
    run(second)
    assert added == [f"t{i}" for i in range(8)]
    assert bus.stats().failed == 0
    store.close()

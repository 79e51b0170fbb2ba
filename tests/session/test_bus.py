"""The event bus: order, wildcards, backpressure, failures, shutdown, no leaks.

Tests taking `make_bus` run on every backend (`InProcessEventBus` and `RedisStreamsBus` on a
real Redis, see conftest.py): they are the protocol. Tests that build an `InProcessEventBus`
themselves check what only the in-process bus promises, each saying why: backpressure
(a Redis publish never waits for subscribers, the stream is the buffer), exact mailbox
counts at shutdown (a Redis consumer's unhandled events stay pending in Redis instead, see
test_redis_bus.py), and deadlock avoidance for handlers publishing into full mailboxes (a
Redis publish cannot block on a subscriber). Redis-only behaviour is in test_redis_bus.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loomctx.errors import ConfigError, MessageFormatError
from loomctx.session.bus import (
    HANDLER_FAILED,
    BusClosedError,
    Event,
    EventBus,
    InProcessEventBus,
    Subscription,
)
from tests.session.conftest import MakeBus


class Recorder:
    """A handler that keeps what it receives; optionally yields to the loop on each event."""

    def __init__(self, *, yield_every: int = 0) -> None:
        self.events: list[Event] = []
        self._yield_every = yield_every

    async def __call__(self, event: Event) -> None:
        self.events.append(event)
        if self._yield_every and len(self.events) % self._yield_every == 0:
            await asyncio.sleep(0)

    def topics(self) -> list[str]:
        return [e.topic for e in self.events]


class Gate:
    """A handler that blocks on each event until released: a controllable slow subscriber."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.started = asyncio.Event()
        self.open = asyncio.Event()

    async def __call__(self, event: Event) -> None:
        self.events.append(event)
        self.started.set()
        await self.open.wait()


def bus_workers() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("loom-bus-worker")]


async def settle(rounds: int = 20) -> None:
    """Let every ready task run a few steps (event-driven, not timed)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


# -- Event -----------------------------------------------------------------------------------


def test_event_round_trips_through_json() -> None:
    event = Event(topic="task.added", payload={"a": [1, (2, 3)], "b": {"c": None}}, source="s")
    data = json.loads(json.dumps(event.to_dict()))
    assert data["payload"] == {"a": [1, [2, 3]], "b": {"c": None}}
    back = Event.from_dict(data)
    assert back == event
    assert hash(back) == hash(event)


def test_event_payload_keeps_json_scalars() -> None:
    payload = {"f": 1.5, "i": -3, "b": True, "n": None, "s": "文字", "l": []}
    assert Event(topic="t", payload=payload).to_dict()["payload"] == payload


def test_event_payload_is_read_only_and_a_copy() -> None:
    source = {"items": [1, 2]}
    event = Event(topic="t", payload=source)
    source["items"].append(3)
    assert event.payload["items"] == (1, 2)
    with pytest.raises(TypeError):
        event.payload["x"] = 1  # type: ignore[index]


def test_event_ids_are_unique_hex() -> None:
    ids = {Event(topic="t").id for _ in range(1000)}
    assert len(ids) == 1000
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        ({"a": {"b": [1, {2}]}}, "`a.b[1]`"),
        ({"a": {1: "x"}}, "`a`"),
        ({1: "x"}, "1"),
        ({"f": math.nan}, "`f`"),
        ({"f": [math.inf]}, "`f[0]`"),
        ({"o": object()}, "`o`"),
    ],
)
def test_payload_must_be_json(payload: Mapping[Any, Any], where: str) -> None:
    with pytest.raises(ConfigError, match="payload") as info:
        Event(topic="t", payload=payload)
    assert where in str(info.value)


def test_payload_cycles_and_non_mappings_are_refused() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = [loop]
    with pytest.raises(ConfigError, match="contains itself"):
        Event(topic="t", payload=loop)
    with pytest.raises(ConfigError, match="mapping"):
        Event(topic="t", payload=[1])  # type: ignore[arg-type]


@pytest.mark.parametrize("topic", ["", "a..b", ".a", "a.", "a b", "a.*", "*", 3])
def test_bad_topics_are_refused(topic: Any) -> None:
    with pytest.raises(ConfigError, match="topic"):
        Event(topic=topic)


def test_bad_ids_and_sources_are_refused() -> None:
    with pytest.raises(ConfigError, match="event_id"):
        Event(topic="t", id="")
    with pytest.raises(ConfigError, match="source"):
        Event(topic="t", source=3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "data",
    [
        [1],
        {"topic": "t", "payload": {}, "created_at": 1.0},
        {"id": "x", "topic": "t", "payload": {}, "created_at": "now"},
        {"id": "x", "topic": "t", "payload": {"s": {1, 2}}, "created_at": 1.0},
    ],
)
def test_from_dict_rejects_malformed_data(data: Any) -> None:
    with pytest.raises(MessageFormatError):
        Event.from_dict(data)


# -- subscribing and matching ---------------------------------------------------------------


async def test_wildcard_matching(make_bus: MakeBus, backend: str) -> None:
    async with make_bus() as bus:
        exact, prefix, everything = Recorder(), Recorder(), Recorder()
        bus.subscribe("task.added", exact)
        bus.subscribe("task.*", prefix)
        bus.subscribe("*", everything)
        topics = ["task.added", "task.done", "task.a.b", "task", "tasks.added", "session.ended"]
        for topic in topics:
            await bus.publish(topic, {"t": topic})
    # In process the order is total per subscription; the protocol (and Redis, a stream per
    # topic) promises the order per topic only, and each topic here has one event.
    same = list if backend == "memory" else sorted
    assert exact.topics() == ["task.added"]
    assert same(prefix.topics()) == same(["task.added", "task.done", "task.a.b"])
    assert same(everything.topics()) == same(topics)
    assert isinstance(bus, EventBus)


@pytest.mark.parametrize("pattern", ["", "ta*", "a.*.b", "*.a", "a.**", "a b"])
async def test_bad_patterns_are_refused(make_bus: MakeBus, pattern: str) -> None:
    async with make_bus() as bus:
        with pytest.raises(ConfigError, match="pattern"):
            bus.subscribe(pattern, Recorder())


async def test_subscribe_arguments_are_checked(make_bus: MakeBus) -> None:
    async with make_bus() as bus:
        sub = bus.subscribe("t", Recorder(), name="one")
        assert isinstance(sub, Subscription)
        assert (sub.name, sub.pattern) == ("one", "t")
        assert "one" in repr(sub)
        with pytest.raises(ConfigError, match="already exists"):
            bus.subscribe("t", Recorder(), name="one")
        with pytest.raises(ConfigError, match="name"):
            bus.subscribe("t", Recorder(), name="")
        with pytest.raises(ConfigError, match="max_pending"):
            bus.subscribe("t", Recorder(), max_pending=0)
        with pytest.raises(ConfigError, match="handler"):
            bus.subscribe("t", "not callable")  # type: ignore[arg-type]
        auto = bus.subscribe("t", Recorder())
        assert auto.name.startswith("Recorder#")
    with pytest.raises(ConfigError, match="max_pending"):
        make_bus(max_pending=True)
    with pytest.raises(ConfigError, match="failures_kept"):
        make_bus(failures_kept=0)


async def test_a_plain_function_is_a_handler(make_bus: MakeBus) -> None:
    """Before, `subscribe` took a plain function and then failed on every event (awaiting
    None); now it is called on the event loop, in order."""
    topics_seen: list[str] = []
    events: list[Event] = []
    async with make_bus() as bus:
        bus.subscribe("t.*", lambda event: topics_seen.append(event.topic))
        sub = bus.subscribe("t.*", events.append)  # a bound method returning None
        for i in range(3):
            await bus.publish(f"t.{i}")
    assert topics_seen == [e.topic for e in events] == ["t.0", "t.1", "t.2"]
    assert sub.delivered == 3
    assert bus.stats().failed == 0


async def test_a_plain_function_that_raises_is_isolated_like_any_handler(make_bus: MakeBus) -> None:
    def broken(event: Event) -> None:
        raise ValueError(f"cannot handle {event.topic}")

    async with make_bus() as bus:
        sub = bus.subscribe("x", broken, name="broken")
        await bus.publish("x")
    assert sub.failed == 1
    assert str(bus.failures[0].error) == "cannot handle x"


async def test_a_lambda_returning_a_coroutine_is_awaited(make_bus: MakeBus) -> None:
    got: list[str] = []

    async def record(event: Event) -> None:
        await asyncio.sleep(0)
        got.append(event.topic)

    async with make_bus() as bus:
        bus.subscribe("x", lambda event: record(event))
        await bus.publish("x")
    assert got == ["x"]


def test_subscribe_needs_no_running_loop(make_bus: MakeBus) -> None:
    bus = make_bus()
    rec = Recorder()
    bus.subscribe("t", rec)

    async def main() -> None:
        async with bus:
            await bus.publish("t")

    asyncio.run(main())
    assert rec.topics() == ["t"]


# -- ordering ---------------------------------------------------------------------------------


async def test_order_per_topic_under_concurrent_publishers(make_bus: MakeBus, backend: str) -> None:
    publishers, per_publisher, topics = 12, 60, ["o.a", "o.b", "o.c"]
    recorders = [Recorder(yield_every=k) for k in (1, 2, 3)]
    async with make_bus() as bus:
        bus.subscribe("o.*", recorders[0], max_pending=1)
        bus.subscribe("*", recorders[1], max_pending=3)
        bus.subscribe("o.*", recorders[2], max_pending=100)

        async def publisher(p: int) -> None:
            rng = random.Random(p)
            for i in range(per_publisher):
                await bus.publish(rng.choice(topics), {"p": p, "i": i})

        async with asyncio.TaskGroup() as tg:
            for p in range(publishers):
                tg.create_task(publisher(p))
    orders = []
    for rec in recorders:
        assert len(rec.events) == publishers * per_publisher
        # Each publisher's events arrive in its program order (in process across topics; on
        # Redis, a stream per topic, within each topic) ...
        seen: dict[tuple[int, str], list[int]] = defaultdict(list)
        for e in rec.events:
            seen[e.payload["p"], e.topic if backend == "redis" else ""].append(e.payload["i"])
        if backend == "memory":
            assert all(v == list(range(per_publisher)) for v in seen.values())
        assert all(v == sorted(v) for v in seen.values())
        assert sum(map(len, seen.values())) == publishers * per_publisher
        orders.append({t: [e.id for e in rec.events if e.topic == t] for t in topics})
    # ... and every subscriber sees the same interleaving per topic.
    assert orders[0] == orders[1] == orders[2]


# -- backpressure -----------------------------------------------------------------------------


async def test_publish_waits_for_a_full_matching_subscriber() -> None:
    async with InProcessEventBus() as bus:
        gate, other = Gate(), Recorder()
        slow = bus.subscribe("slow", gate, max_pending=2)
        bus.subscribe("fast", other)
        await bus.publish("slow", {"i": 0})
        await gate.started.wait()  # event 0 is in the handler, the mailbox is empty
        await bus.publish("slow", {"i": 1})
        await bus.publish("slow", {"i": 2})
        blocked = asyncio.create_task(bus.publish("slow", {"i": 3}))
        await settle()
        assert not blocked.done()
        assert slow.pending == 3
        # A subscriber that does not match is not held back by the slow one.
        await bus.publish("fast")
        await settle()
        assert other.topics() == ["fast"]
        gate.open.set()
        await blocked
    assert [e.payload["i"] for e in gate.events] == [0, 1, 2, 3]


async def test_a_cancelled_publish_is_withdrawn() -> None:
    async with InProcessEventBus() as bus:
        gate = Gate()
        sub = bus.subscribe("slow", gate, max_pending=1)
        await bus.publish("slow", {"i": 0})
        await gate.started.wait()
        await bus.publish("slow", {"i": 1})
        blocked = asyncio.create_task(bus.publish("slow", {"i": 2}))
        await settle()
        blocked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await blocked
        gate.open.set()
    assert [e.payload["i"] for e in gate.events] == [0, 1]
    assert sub.dropped == 1


async def test_a_publish_cancelled_as_it_is_admitted_is_dropped_once() -> None:
    async with InProcessEventBus() as bus:
        gate = Gate()
        sub = bus.subscribe("slow", gate, max_pending=1)
        await bus.publish("slow", {"i": 0})
        await gate.started.wait()
        await bus.publish("slow", {"i": 1})
        blocked = asyncio.create_task(bus.publish("slow", {"i": 2}))
        await settle()
        gate.open.set()  # the worker runs first: it admits before the publisher sees its cancel
        blocked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await blocked
    assert [e.payload["i"] for e in gate.events] == [0, 1]
    assert sub.dropped == 1
    assert sub.delivered == 2


# -- failures -----------------------------------------------------------------------------------


async def test_a_failing_handler_is_isolated_and_reported(
    make_bus: MakeBus, caplog: pytest.LogCaptureFixture
) -> None:
    async def flaky(event: Event) -> None:
        if event.topic == "x" and event.payload["i"] % 3 == 0:
            raise RuntimeError(f"boom {event.payload['i']}")

    caplog.set_level(logging.ERROR, logger="loomctx.session.bus")
    async with make_bus() as bus:
        failing = bus.subscribe("*", flaky, name="flaky")
        steady, watcher = Recorder(), Recorder()
        steady_sub = bus.subscribe("x", steady, name="steady")
        bus.subscribe("*", watcher, name="watcher")
        for i in range(10):
            await bus.publish("x", {"i": i})
    assert [e.payload["i"] for e in steady.events] == list(range(10))
    assert (failing.failed, failing.delivered) == (4, 6)
    assert (steady_sub.failed, steady_sub.delivered) == (0, 10)
    reports = [e for e in watcher.events if e.topic == HANDLER_FAILED]
    assert [r.payload["event_id"] for r in reports] == [
        e.id for e in steady.events if e.payload["i"] % 3 == 0
    ]
    assert reports[0].payload["subscription"] == "flaky"
    assert reports[0].payload["error_type"] == "RuntimeError"
    assert reports[0].payload["error"] == "boom 0"
    assert reports[0].source == "bus"
    assert [f.subscription for f in bus.failures] == ["flaky"] * 4
    name, event, error = bus.failures[0]
    assert (name, event.payload["i"], str(error)) == ("flaky", 0, "boom 0")
    assert sum("flaky" in r.getMessage() for r in caplog.records) == 4
    stats = bus.stats()
    assert (stats.failed, stats.delivered) == (4, 6 + 10 + 14)


async def test_failures_on_bus_events_are_not_republished(make_bus: MakeBus) -> None:
    async def fails(event: Event) -> None:
        raise ValueError(event.topic)

    async def cancels(event: Event) -> None:
        raise asyncio.CancelledError  # a handler's own CancelledError is a failure too

    async with make_bus(failures_kept=2) as bus:
        watcher = Recorder()
        bus.subscribe("x", fails, name="a")
        b = bus.subscribe("bus.*", cancels, name="b")
        bus.subscribe("*", watcher)
        await bus.publish("x")
    assert watcher.topics() == ["x", HANDLER_FAILED]
    assert b.failed == 1
    assert [f.subscription for f in bus.failures] == ["a", "b"]
    assert bus.failures.maxlen == 2


# -- idempotency --------------------------------------------------------------------------------


async def test_event_ids_are_delivered_as_given_so_handlers_can_dedupe(
    make_bus: MakeBus, backend: str
) -> None:
    handled: list[str] = []
    seen: set[str] = set()

    async def idempotent(event: Event) -> None:
        if event.id in seen:
            return
        seen.add(event.id)
        handled.append(event.payload["v"])

    async with make_bus() as bus:
        raw = Recorder()
        bus.subscribe("t", idempotent)
        bus.subscribe("t", raw)
        first = await bus.publish("t", {"v": "a"}, event_id="retry-1")
        await bus.publish("t", {"v": "a"}, event_id="retry-1")  # the publisher retried
        await bus.publish("t", {"v": "b"})
        with pytest.raises(ConfigError, match="event_id"):
            await bus.publish("t", event_id="")
    assert first.id == "retry-1"
    if backend == "memory":
        # In process, each publish is delivered exactly once to each subscription.
        assert [e.id for e in raw.events][:2] == ["retry-1", "retry-1"]
        assert len(raw.events) == 3
    else:
        # Redis dedupes completed deliveries by id per subscription (at-least-once backend).
        assert [e.id for e in raw.events][:1] == ["retry-1"]
        assert len(raw.events) == 2
    assert handled == ["a", "b"]


async def test_publish_checks_payloads(make_bus: MakeBus) -> None:
    async with make_bus() as bus:
        rec = Recorder()
        bus.subscribe("*", rec)
        with pytest.raises(ConfigError, match="`when`"):
            await bus.publish("t", {"when": object()})
        with pytest.raises(ConfigError, match="topic"):
            await bus.publish("t.*")
    assert rec.events == []
    assert bus.stats().published == 0


# -- shutdown -----------------------------------------------------------------------------------


async def test_close_with_drain_delivers_everything(make_bus: MakeBus, backend: str) -> None:
    bus = make_bus(max_pending=500)
    recs = [Recorder(yield_every=1) for _ in range(3)]
    for i, rec in enumerate(recs):
        bus.subscribe("*", rec, name=f"r{i}")
    for i in range(300):
        await bus.publish("t", {"i": i})
    if backend == "memory":
        assert len(recs[0].events) < 300  # most are still queued (Redis consumers keep up)
    await bus.close()
    assert all([e.payload["i"] for e in r.events] == list(range(300)) for r in recs)
    assert bus.stats().dropped == 0
    assert bus_workers() == []
    with pytest.raises(BusClosedError):
        await bus.publish("t")
    with pytest.raises(BusClosedError):
        bus.subscribe("t", Recorder())
    await bus.close()  # idempotent
    assert bus.closed


async def test_close_without_drain_drops_and_counts() -> None:
    bus = InProcessEventBus()
    gate = Gate()
    sub = bus.subscribe("t", gate, name="g")
    for i in range(5):
        await bus.publish("t", {"i": i})
    await gate.started.wait()
    closing = asyncio.create_task(bus.close(drain=False))
    await settle()
    with pytest.raises(BusClosedError):
        await bus.publish("t")
    gate.open.set()  # the running handler finishes; the queued four are dropped
    await closing
    assert [e.payload["i"] for e in gate.events] == [0]
    assert (sub.delivered, sub.dropped) == (1, 4)
    assert bus.stats().subscriptions["g"].dropped == 4
    assert bus_workers() == []


async def test_close_without_drain_releases_waiting_publishers() -> None:
    bus = InProcessEventBus()
    gate = Gate()
    sub = bus.subscribe("t", gate, max_pending=1)
    await bus.publish("t")
    await gate.started.wait()
    await bus.publish("t")
    blocked = asyncio.create_task(bus.publish("t"))
    await settle()
    closing = asyncio.create_task(bus.close(drain=False))
    await settle()
    assert blocked.done()  # released: its event was dropped by the close
    gate.open.set()
    await closing
    await blocked
    assert (sub.delivered, sub.dropped) == (1, 2)


async def test_route_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import loomctx.session.bus.inprocess as bus_module

    monkeypatch.setattr(bus_module, "_ROUTE_CACHE_SIZE", 2)
    async with InProcessEventBus() as bus:
        rec = Recorder()
        bus.subscribe("*", rec)
        for i in range(5):
            await bus.publish(f"t{i}")
        assert len(bus._routes) <= 2
    assert len(rec.events) == 5


async def test_close_timeout_cancels_stuck_handlers() -> None:
    bus = InProcessEventBus()
    gate = Gate()  # never opened
    sub = bus.subscribe("t", gate)
    for i in range(3):
        await bus.publish("t", {"i": i})
    await gate.started.wait()
    await bus.close(timeout=0.05)
    assert (sub.delivered, sub.dropped) == (0, 3)
    assert bus_workers() == []


async def test_close_without_drain_with_a_timeout_cancels_too() -> None:
    bus = InProcessEventBus()
    gate = Gate()
    sub = bus.subscribe("t", gate)
    await bus.publish("t")
    await gate.started.wait()
    await bus.close(drain=False, timeout=0.01)
    assert sub.dropped == 1
    assert bus_workers() == []


async def test_a_cancelled_close_still_stops_everything() -> None:
    bus = InProcessEventBus()
    gate = Gate()
    sub = bus.subscribe("t", gate)
    await bus.publish("t")
    await bus.publish("t")
    await gate.started.wait()
    closing = asyncio.create_task(bus.close())
    await settle()
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    await settle()
    assert bus_workers() == []
    assert sub.dropped == 2
    await bus.close()  # returns at once


async def test_context_manager_error_exit_does_not_drain() -> None:
    gate = Gate()
    bus = InProcessEventBus()
    sub = bus.subscribe("t", gate)

    async def body() -> None:
        async with bus:
            await bus.publish("t")
            await bus.publish("t")
            await gate.started.wait()
            gate.open.set()
            raise KeyError("body failed")

    with pytest.raises(KeyError):
        await body()
    assert sub.dropped == 1
    assert bus_workers() == []


async def test_handlers_may_publish_while_the_bus_drains(make_bus: MakeBus) -> None:
    chain = Recorder()

    async def forward(event: Event) -> None:
        await bus.publish("b", {"from": event.id})

    bus = make_bus()
    bus.subscribe("a", forward)
    bus.subscribe("b", chain)
    await bus.publish("a")
    await bus.close()
    assert chain.topics() == ["b"]


async def test_close_from_a_handler_is_refused(make_bus: MakeBus) -> None:
    async def closer(event: Event) -> None:
        await bus.close()

    async with make_bus() as bus:
        bus.subscribe("t", closer)
        await bus.publish("t")
    assert isinstance(bus.failures[0].error, ConfigError)


# -- handler-originated publishes --------------------------------------------------------------


async def test_a_handler_may_publish_to_its_own_full_topic() -> None:
    seen: list[int] = []

    async def echo(event: Event) -> None:
        n = event.payload["n"]
        seen.append(n)
        if n < 20:
            await bus.publish("loop", {"n": n + 1})

    async with asyncio.timeout(10), InProcessEventBus() as bus:  # a safety net, not a measure
        sub = bus.subscribe("loop", echo, max_pending=1)
        await bus.publish("loop", {"n": 0})
        await bus.publish("loop", {"n": 100})  # fills the mailbox while the chain runs
    assert sorted(seen) == [*range(21), 100]
    assert sub.delivered == 22


async def test_handlers_publishing_to_each_other_do_not_deadlock() -> None:
    got: dict[str, list[int]] = {"a": [], "b": []}

    def make(mine: str, other: str) -> Any:
        async def handler(event: Event) -> None:
            n = event.payload["n"]
            got[mine].append(n)
            if n < 30:
                await bus.publish(other, {"n": n + 1})
                await bus.publish(other, {"n": 1000 + n})

        return handler

    async with asyncio.timeout(10), InProcessEventBus() as bus:
        bus.subscribe("a", make("a", "b"), max_pending=1)
        bus.subscribe("b", make("b", "a"), max_pending=1)
        # A slow sink of everything: the handlers above really wait on it (backpressure).
        sink = bus.subscribe("*", Recorder(yield_every=1), max_pending=1)
        for n in range(3):
            await bus.publish("a", {"n": n * 10})
            await bus.publish("b", {"n": n * 10})
    assert sorted(got["a"] + got["b"])[-1] == 1029
    assert 30 in got["a"] + got["b"]
    assert sink.delivered == len(got["a"]) + len(got["b"])
    assert bus.stats().dropped == 0


async def test_unsubscribe_drains_or_drops() -> None:
    async with InProcessEventBus() as bus:
        kept, dropped = Gate(), Gate()
        keep = bus.subscribe("t", kept, name="keep")
        drop = bus.subscribe("t", dropped, name="drop")
        for i in range(3):
            await bus.publish("t", {"i": i})
        await kept.started.wait()
        await dropped.started.wait()
        kept.open.set()
        await keep.unsubscribe()
        stopping = asyncio.create_task(drop.unsubscribe(drain=False))
        await settle()
        dropped.open.set()  # the running handler finishes; the two queued events are dropped
        await stopping
        await bus.publish("t", {"i": 3})
        assert (keep.delivered, drop.delivered, drop.dropped) == (3, 1, 2)
        again = bus.subscribe("t", Recorder(), name="keep")  # the name is free again
        assert again is not keep
        assert set(bus.stats().subscriptions) == {"keep", "drop"}
        assert bus_workers() == []  # both stopped; the new one starts with its first event


async def test_unsubscribe_from_its_own_handler() -> None:
    got: list[int] = []

    async def once(event: Event) -> None:
        got.append(event.payload["i"])
        await sub.unsubscribe()

    async with InProcessEventBus() as bus:
        sub = bus.subscribe("t", once)
        await bus.publish("t", {"i": 0})
        await bus.publish("t", {"i": 1})  # queued before the unsubscribe: still delivered
        await settle()
        await bus.publish("t", {"i": 2})
    assert got == [0, 1]


async def test_unsubscribe_timeout_cancels_the_worker() -> None:
    async with InProcessEventBus() as bus:
        gate = Gate()
        sub = bus.subscribe("t", gate)
        await bus.publish("t")
        await bus.publish("t")
        await gate.started.wait()
        await sub.unsubscribe(timeout=0.01)
        assert sub.dropped == 2
        assert bus_workers() == []


# -- properties and soak -----------------------------------------------------------------------

TOPICS = ["a", "a.x", "a.y", "a.x.z", "b", "b.x"]
PATTERNS = ["*", "a.*", "a.x", "a.x.*", "b.*", "b", "c.*"]


def _matches(pattern: str, topic: str) -> bool:
    if pattern == "*":
        return True
    if pattern.endswith(".*"):
        return topic.startswith(pattern[:-1])
    return topic == pattern


_PUBLISHES = st.lists(st.tuples(st.sampled_from(TOPICS), st.integers(0, 1)), max_size=25)
_SUBS = st.lists(
    st.tuples(st.sampled_from(PATTERNS), st.integers(1, 3), st.integers(0, 2)),
    min_size=1,
    max_size=4,
)


def _each_subscriber_gets_exactly_its_events_in_order(
    make: Callable[[], Any], publishes: list[tuple[str, int]], subs: list[tuple[str, int, int]]
) -> None:
    async def scenario() -> list[list[Event]]:
        async with make() as bus:
            recorders = []
            for pattern, max_pending, yield_every in subs:
                rec = Recorder(yield_every=yield_every)
                bus.subscribe(pattern, rec, max_pending=max_pending)
                recorders.append(rec)

            # Two concurrent publishers: publisher k publishes, in order, the entries it owns.
            async def publisher(k: int) -> None:
                for seq, (topic, owner) in enumerate(publishes):
                    if owner == k:
                        await bus.publish(topic, {"seq": seq})

            async with asyncio.TaskGroup() as tg:
                tg.create_task(publisher(0))
                tg.create_task(publisher(1))
        assert bus_workers() == []
        return [rec.events for rec in recorders]

    received = asyncio.run(scenario())
    per_topic_orders = []
    for (pattern, _, _), events in zip(subs, received, strict=True):
        seqs = [e.payload["seq"] for e in events]
        # Exactly the matching events, each once ...
        assert sorted(seqs) == [s for s, (t, _) in enumerate(publishes) if _matches(pattern, t)]
        assert all(e.topic == publishes[e.payload["seq"]][0] for e in events)
        # ... one publisher's events of a topic in its publish order ...
        for topic in TOPICS:
            for k in (0, 1):
                mine = [s for s in seqs if publishes[s] == (topic, k)]
                assert mine == sorted(mine)
        per_topic_orders.append({t: [s for s in seqs if publishes[s][0] == t] for t in TOPICS})
    # ... and the same interleaving per topic in every subscriber that gets that topic.
    for topic in TOPICS:
        orders = [o[topic] for o in per_topic_orders if o[topic]]
        assert all(order == orders[0] for order in orders)


@given(publishes=_PUBLISHES, subs=_SUBS)
def test_each_subscriber_gets_exactly_its_events_in_order(
    publishes: list[tuple[str, int]], subs: list[tuple[str, int, int]]
) -> None:
    _each_subscriber_gets_exactly_its_events_in_order(InProcessEventBus, publishes, subs)


# A real server per example: fewer examples than the in-process property (each costs a
# round of Redis streams and groups); the prefix is the test's, cleaned up after it.
@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(publishes=_PUBLISHES, subs=_SUBS)
def test_each_redis_subscriber_gets_exactly_its_events_in_order(
    redis_url: str,
    redis_prefix: str,
    publishes: list[tuple[str, int]],
    subs: list[tuple[str, int, int]],
) -> None:
    from loomctx.session.bus.redis import RedisStreamsBus

    def make() -> RedisStreamsBus:
        # Each example its own prefix under the test's, so that examples cannot see each other.
        return RedisStreamsBus(
            redis_url, prefix=f"{redis_prefix}:{uuid.uuid4().hex[:6]}", block=0.02
        )

    _each_subscriber_gets_exactly_its_events_in_order(make, publishes, subs)


@pytest.mark.slow
async def test_soak_many_publishers_no_loss_no_leaks(make_bus: MakeBus, backend: str) -> None:
    publishers, per_publisher = 200, 50
    topics = [f"soak.t{i}" for i in range(8)]
    patterns = ["*", "soak.*", "soak.t0", "soak.t1", "soak.*"]
    async with asyncio.timeout(120):  # a safety net: Redis takes ~12 s here, in process ~1 s
        bus = make_bus(max_pending=64)
        recs = [Recorder(yield_every=i + 1) for i in range(len(patterns))]
        for pattern, rec in zip(patterns, recs, strict=True):
            bus.subscribe(pattern, rec)

        async def publisher(p: int) -> None:
            for i in range(per_publisher):
                await bus.publish(topics[(p + i) % len(topics)], {"p": p, "i": i})

        async with asyncio.TaskGroup() as tg:
            for p in range(publishers):
                tg.create_task(publisher(p))
        await bus.close()
    total = publishers * per_publisher
    expected = [total, total, total // len(topics), total // len(topics), total]
    assert [len(r.events) for r in recs] == expected
    for rec in recs:
        assert len({e.id for e in rec.events}) == len(rec.events)
        # A publisher's events in its order: across topics in process, per topic on Redis.
        last: dict[tuple[int, str], int] = {}
        for e in rec.events:
            p, i = (e.payload["p"], e.topic if backend == "redis" else ""), e.payload["i"]
            assert i > last.get(p, -1)
            last[p] = i
    stats = bus.stats()
    assert (stats.published, stats.dropped, stats.failed) == (total, 0, 0)
    assert bus_workers() == []

"""What only the Redis bus does: groups shared by workers, redelivery, dead letters, dedupe,
trimming, reconnects, `open_bus` URLs. Real Redis (see conftest.py); every wait is bounded."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from loomctx.errors import BusClosedError, BusLoopError, ConfigError, MissingExtraError
from loomctx.session.bus import Event, InProcessEventBus, open_bus
from loomctx.session.bus.redis import RedisStreamsBus

SAFETY = 20  # seconds: a safety net, not a measure


def bus_of(url: str, prefix: str, **options: Any) -> RedisStreamsBus:
    options.setdefault("block", 0.02)
    return RedisStreamsBus(url, prefix=prefix, **options)


async def until(check: Callable[[], bool]) -> None:
    """Poll `check` (state changes in other processes and in Redis have no event to wait on)."""
    async with asyncio.timeout(SAFETY):
        while not check():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


def sync_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)


async def test_workers_sharing_a_name_get_each_event_once(
    redis_url: str, redis_prefix: str
) -> None:
    got: dict[str, list[int]] = {"a": [], "b": []}

    def worker(label: str) -> Callable[[Event], Any]:
        async def handle(event: Event) -> None:
            await asyncio.sleep(0.002)  # slow enough that both workers take a share
            got[label].append(event.payload["i"])

        return handle

    a, b = bus_of(redis_url, redis_prefix), bus_of(redis_url, redis_prefix)
    a.subscribe("job.*", worker("a"), name="jobs", max_pending=1)
    b.subscribe("job.*", worker("b"), name="jobs", max_pending=1)
    async with a, b:
        await a.publish("job.warmup", {"i": -1})
        await until(lambda: len(got["a"]) + len(got["b"]) == 1)
        for i in range(100):
            await (a if i % 2 else b).publish("job.run", {"i": i})
        await until(lambda: len(got["a"]) + len(got["b"]) == 101)
    assert sorted(got["a"] + got["b"]) == [-1, *range(100)]  # each once between them
    assert got["a"]
    assert got["b"]
    # Both were in one group: the named group outlives its workers, and holds nothing pending.
    info = sync_client(redis_url).xinfo_groups(f"{redis_prefix}:stream:job.run")
    assert [(g["name"], g["pending"]) for g in info] == [("jobs", 0)]


async def test_unnamed_subscriptions_on_two_buses_each_get_every_event(
    redis_url: str, redis_prefix: str
) -> None:
    seen: list[list[str]] = [[], []]
    a, b = bus_of(redis_url, redis_prefix), bus_of(redis_url, redis_prefix)
    a.subscribe("t", lambda e: seen[0].append(e.id))
    b.subscribe("t", lambda e: seen[1].append(e.id))
    async with a, b:
        sent = [(await a.publish("t")).id for _ in range(5)]
        await until(lambda: len(seen[1]) == 5)
    assert seen == [sent, sent]
    # Their groups were theirs alone: deleted when the buses closed.
    assert sync_client(redis_url).xinfo_groups(f"{redis_prefix}:stream:t") == []


async def test_a_dead_consumers_events_are_claimed_by_another(
    redis_url: str, redis_prefix: str
) -> None:
    first = bus_of(redis_url, redis_prefix, claim_idle=0.2)
    gate = asyncio.Event()
    started: list[int] = []

    async def stuck(event: Event) -> None:
        started.append(event.payload["i"])
        await gate.wait()  # never set: this consumer "dies" holding its events

    sub = first.subscribe("w", stuck, name="svc", max_pending=10)
    async with asyncio.timeout(SAFETY):
        for i in range(5):
            await first.publish("w", {"i": i})
        await until(lambda: bool(started))
        await first.close(drain=False, timeout=0.05)  # cancelled mid-handler, nothing acked
    assert sub.delivered == 0
    assert sub.dropped >= 1
    got: list[int] = []
    second = bus_of(redis_url, redis_prefix, claim_idle=0.2)
    second.subscribe("w", lambda e: got.append(e.payload["i"]), name="svc")
    async with second:
        await until(lambda: sorted(got) == list(range(5)))
    assert sorted(got) == list(range(5))


async def test_a_slow_consumer_takes_no_more_than_it_handles_before_claim_idle(
    redis_url: str, redis_prefix: str
) -> None:
    """A consumer whose handler is slow reads few events at a time: the rest stay in the
    stream for the group's other consumer, none waits in its buffer until it is claimed
    (and run a second time)."""
    got: list[tuple[str, int]] = []

    async def slow(event: Event) -> None:
        await asyncio.sleep(0.25)
        got.append(("slow", event.payload["i"]))

    slow_bus = bus_of(redis_url, redis_prefix, claim_idle=0.6, consumer="slow")
    fast_bus = bus_of(redis_url, redis_prefix, claim_idle=0.6, consumer="fast")
    slow_bus.subscribe("w", slow, name="svc")
    async with slow_bus:
        await slow_bus.publish("w", {"i": -1})
        await until(lambda: bool(got))  # the slow consumer is reading
        for i in range(8):
            await slow_bus.publish("w", {"i": i})
        fast_bus.subscribe("w", lambda e: got.append(("fast", e.payload["i"])), name="svc")
        async with fast_bus:
            await until(lambda: len(got) >= 9)
            await asyncio.sleep(1.0)  # a second run of any would have happened by now
    assert sorted(i for _, i in got) == list(range(-1, 8))  # each once between them
    assert any(who == "fast" for who, _ in got)


async def test_a_consumer_leaves_what_another_claimed_from_it_to_that_one(
    redis_url: str, redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A consumer whose process stalled past `claim_idle` (here: a handler that blocks the
    event loop) finds, when it renews its hold, that another consumer claimed the rest of
    its buffer; it leaves them to that one instead of running them a second time."""
    handled: list[int] = []
    stream = f"{redis_prefix}:stream:w"
    thief: list[str] = []

    async def blocking(event: Event) -> None:
        handled.append(event.payload["i"])
        if event.payload["i"] == 0:
            time.sleep(0.5)  # noqa: ASYNC251 - the whole process stalls: nothing renews
            client = sync_client(redis_url)
            try:  # what another worker's XAUTOCLAIM does once the entries are idle enough
                ids = client.xautoclaim(stream, "svc", "thief", 400, "0-0", justid=True)
                thief.extend(str(i) for i in ids)
            finally:
                client.close()

    bus = bus_of(redis_url, redis_prefix, claim_idle=0.4, consumer="stalled")
    bus.subscribe("w", blocking, name="svc", max_pending=10)
    async with bus:
        await bus.publish("w", {"i": -1})  # the consumer reads, and its pace is quick
        await until(lambda: bool(handled))
        # 0-4 land in one transaction: the consumer's blocked read takes them all at once.
        # (Published one by one, a read could take 0 alone on a loaded machine; a handler
        # held open until they were in made the pace slow, so that the next read took one.)
        client = sync_client(redis_url)
        try:
            with client.pipeline(transaction=True) as pipe:
                for i in range(5):
                    event = Event(topic="w", payload={"i": i})
                    pipe.xadd(stream, {"event": json.dumps(event.to_dict())})
                pipe.execute()
        finally:
            client.close()
        await until(lambda: "event(s) to the consumer that claimed them" in caplog.text)
        assert handled == [-1, 0]
        # 0 too (handled, not acknowledged yet), and 1-4, read with it.
        assert len(thief) == 5
        client = sync_client(redis_url)
        try:
            pending = client.xpending_range(stream, "svc", min="-", max="+", count=10)
        finally:
            client.close()
        # 0 is acknowledged (it was handled); 1-4 wait for the consumer that claimed them.
        assert {p["consumer"] for p in pending} == {"thief"}
        assert {str(p["message_id"]) for p in pending} == set(thief[1:])
        # The thief never handles them: after `claim_idle` they are claimed back, once.
        await until(lambda: len(handled) == 6)
        await asyncio.sleep(0.5)
    assert sorted(handled) == [-1, 0, 1, 2, 3, 4]  # each once; a claimed-back one comes last


async def test_a_failed_event_is_retried_then_dead_lettered(
    redis_url: str, redis_prefix: str
) -> None:
    attempts: dict[int, int] = {}

    async def flaky(event: Event) -> None:
        i = event.payload["i"]
        attempts[i] = attempts.get(i, 0) + 1
        if i == 0 and attempts[i] < 2:
            raise RuntimeError("transient")  # succeeds on the second delivery
        if i == 1:
            raise ValueError("always broken")

    bus = bus_of(redis_url, redis_prefix, claim_idle=0.1, max_deliveries=3)
    sub = bus.subscribe("f", flaky, name="flaky")
    async with bus:
        await bus.publish("f", {"i": 0})
        poison = await bus.publish("f", {"i": 1})
        await until(lambda: sub.dead_lettered == 1 and sub.delivered == 1)
        letters = await bus.dead_letters()
    assert attempts == {0: 2, 1: 3}
    assert sub.failed == 4
    [letter] = letters
    assert letter.event == poison
    assert (letter.subscription, letter.deliveries) == ("flaky", 4)
    assert letter.stream == f"{redis_prefix}:stream:f"
    assert letter.error == "ValueError: always broken"
    pending = sync_client(redis_url).xpending(f"{redis_prefix}:stream:f", "flaky")
    assert pending["pending"] == 0


async def test_a_malformed_entry_is_dead_lettered_at_once(
    redis_url: str, redis_prefix: str
) -> None:
    got: list[Event] = []
    bus = bus_of(redis_url, redis_prefix)
    sub = bus.subscribe("m", got.append, name="m")
    async with bus:
        await bus.publish("m", {"ok": 1})
        await until(lambda: len(got) == 1)
        sync_client(redis_url).xadd(f"{redis_prefix}:stream:m", {"event": "{not json"})
        await bus.publish("m", {"ok": 2})
        await until(lambda: len(got) == 2)
        [letter] = await bus.dead_letters()
    assert letter.event is None
    assert (letter.raw, letter.error) == ("{not json", "malformed entry")
    assert sub.dead_lettered == 1


async def test_a_retried_publish_is_handled_once(redis_url: str, redis_prefix: str) -> None:
    got: list[str] = []
    bus = bus_of(redis_url, redis_prefix)
    sub = bus.subscribe("d", lambda e: got.append(e.payload["v"]), name="d")
    async with bus:
        await bus.publish("d", {"v": "a"}, event_id="e-1")
        await until(lambda: got == ["a"])
        await bus.publish("d", {"v": "a"}, event_id="e-1")  # later, after it was handled
        await bus.publish("d", {"v": "b"})
        await until(lambda: len(got) == 2)
    assert got == ["a", "b"]
    assert sub.duplicates == 1
    ttl = sync_client(redis_url).pttl(f"{redis_prefix}:seen:d")
    assert 0 < ttl <= 86_400_000


async def test_streams_are_trimmed_and_trimmed_pending_events_are_counted(
    redis_url: str, redis_prefix: str
) -> None:
    """Event 0 fails at every delivery, so it stays pending until the stream is trimmed past
    it; its redeliveries are never dead-lettered (`max_deliveries`), however long the
    publishing takes: only the trim can take it out of the group's pending list."""
    failed_once = asyncio.Event()

    async def fail_first(event: Event) -> None:
        if event.payload["i"] == 0:
            failed_once.set()
            raise RuntimeError("left pending")

    bus = bus_of(redis_url, redis_prefix, maxlen=10, claim_idle=0.2, max_deliveries=10**9)
    sub = bus.subscribe("big", fail_first, name="big")
    async with bus:
        await bus.publish("big", {"i": 0})
        await until(failed_once.is_set)
        for i in range(1, 1000):
            await bus.publish("big", {"i": i})
        await until(lambda: sub.dropped >= 1)  # XAUTOCLAIM found event 0 trimmed away
    length = sync_client(redis_url).xlen(f"{redis_prefix}:stream:big")
    assert 10 <= length < 1000  # MAXLEN ~: trimmed by whole nodes, never below maxlen


async def test_consumers_reconnect_after_their_connections_are_killed(
    redis_url: str, redis_prefix: str
) -> None:
    got: list[int] = []
    name = f"loomkill{redis_prefix.rsplit(':', 1)[1]}"
    bus = bus_of(f"{redis_url}?client_name={name}", redis_prefix)
    bus.subscribe("r", lambda e: got.append(e.payload["i"]), name="r")
    admin = sync_client(redis_url)
    async with bus:
        await bus.publish("r", {"i": 0})
        await until(lambda: got == [0])
        killed = 0
        for client in admin.client_list():
            if client.get("name") == name:
                killed += admin.client_kill_filter(_id=client["id"])
        assert killed >= 1
        for i in range(1, 4):
            await bus.publish("r", {"i": i})
        await until(lambda: got == [0, 1, 2, 3])


async def test_close_without_drain_leaves_events_pending_for_the_group(
    redis_url: str, redis_prefix: str
) -> None:
    gate = asyncio.Event()
    started = asyncio.Event()

    async def slow(event: Event) -> None:
        started.set()
        await gate.wait()

    first = bus_of(redis_url, redis_prefix, claim_idle=0.2)
    first.subscribe("c", slow, name="svc", max_pending=100)
    for i in range(4):
        await first.publish("c", {"i": i})
    await started.wait()
    closing = asyncio.create_task(first.close(drain=False))
    await asyncio.sleep(0.05)
    with pytest.raises(BusClosedError):
        await first.publish("c")
    gate.set()  # the running handler finishes and is acked; the rest stay pending
    await closing
    got: list[int] = []
    second = bus_of(redis_url, redis_prefix, claim_idle=0.2)
    second.subscribe("c", lambda e: got.append(e.payload["i"]), name="svc")
    async with second:
        await until(lambda: len(got) == 3)
    assert sorted(got) == [1, 2, 3]


async def test_a_payload_travels_as_json(redis_url: str, redis_prefix: str) -> None:
    got: list[Event] = []
    bus = bus_of(redis_url, redis_prefix)
    bus.subscribe("j", got.append)
    async with bus:
        sent = await bus.publish("j", {"文": ["a", 1, 2.5, None, {"k": True}]}, source="s")
        await until(lambda: len(got) == 1)
    assert got == [sent]
    [[_, [(_, fields)]]] = sync_client(redis_url).xread({f"{redis_prefix}:stream:j": "0"})
    assert json.loads(fields["event"])["payload"] == {"文": ["a", 1, 2.5, None, {"k": True}]}


def test_options_are_checked() -> None:
    for bad in (
        {"prefix": ""},
        {"prefix": "a b"},
        {"maxlen": 0},
        {"claim_idle": 0},
        {"max_deliveries": True},
        {"dedupe_ttl": -1},
        {"block": "1"},
        {"consumer": ""},
        {"max_connections": 0},
    ):
        with pytest.raises(ConfigError):
            RedisStreamsBus(**bad)
    with pytest.raises(ConfigError, match="url"):
        RedisStreamsBus("")


async def test_open_bus_picks_the_backend_from_the_url(redis_url: str, redis_prefix: str) -> None:
    for url in (None, "", "memory://"):
        bus = open_bus(url)
        assert isinstance(bus, InProcessEventBus)
        await bus.close()
    bus = open_bus(f"{redis_url}?prefix={redis_prefix}&claim_idle=7&max_deliveries=2")
    assert isinstance(bus, RedisStreamsBus)
    assert (bus.prefix, bus.claim_idle, bus.max_deliveries) == (redis_prefix, 7.0, 2)
    got: list[str] = []
    bus.subscribe("u", lambda e: got.append(e.topic))
    async with bus:
        await bus.publish("u")
    assert got == ["u"]
    with pytest.raises(ConfigError, match="unknown event bus URL"):
        open_bus("kafka://broker:9092")
    with pytest.raises(ConfigError, match="claim_idle"):
        open_bus("redis://127.0.0.1:6379/0?claim_idle=soon")
    with pytest.raises(ConfigError, match="string"):
        open_bus(3)  # type: ignore[arg-type]


def test_open_bus_names_the_extra_when_redis_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "loomctx.session.bus.redis")
    monkeypatch.setitem(sys.modules, "redis.asyncio", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'loomctx\[redis\]'"):
        open_bus("redis://127.0.0.1:6379/0")


async def test_unsubscribe_stops_and_an_unnamed_group_is_deleted(
    redis_url: str, redis_prefix: str
) -> None:
    got: list[int] = []
    once: list[int] = []
    bus = bus_of(redis_url, redis_prefix)
    sub = bus.subscribe("u", lambda e: got.append(e.payload["i"]))

    async def first_only(event: Event) -> None:
        once.append(event.payload["i"])
        await own.unsubscribe()  # from its own handler: returns at once

    own = bus.subscribe("u", first_only, name="own")
    assert "own" in repr(own)
    assert "RedisStreamsBus" in repr(bus)
    async with bus:
        await bus.publish("u", {"i": 0})
        await until(lambda: got == [0] and once == [0])
        await sub.unsubscribe()
        await bus.publish("u", {"i": 1})
        await asyncio.sleep(0.1)
        assert bus.stats().subscriptions.keys() == {sub.name, "own"}
    assert got == [0]
    assert once == [0]
    assert (sub.delivered, sub.pending, sub.duplicates) == (1, 0, 0)
    groups = {g["name"] for g in sync_client(redis_url).xinfo_groups(f"{redis_prefix}:stream:u")}
    assert groups == {"own"}  # the unnamed group went with its subscription


def test_the_bus_follows_a_new_event_loop_and_refuses_a_second_open_one(
    redis_url: str, redis_prefix: str
) -> None:
    bus = bus_of(redis_url, redis_prefix, claim_idle=0.2)
    got: list[int] = []
    bus.subscribe("l", lambda e: got.append(e.payload["i"]), name="l")

    async def first() -> None:
        await bus.publish("l", {"i": 0})
        await until(lambda: got == [0])

        # Another loop, while this one is open with consumers on it: refused at once.
        def other_thread() -> None:
            async def use() -> None:
                await bus.publish("l")

            asyncio.run(use())

        with pytest.raises(BusLoopError):
            await asyncio.to_thread(other_thread)
        # Leave this loop without closing the bus (a test framework's loop per test).
        for sub in bus._subs.values():
            sub._stop(drain=False)
        await bus._join(list(bus._subs.values()), None)
        for sub in bus._subs.values():
            sub._stopping = False
        await bus._redis.aclose()  # type: ignore[union-attr]

    async def second() -> None:
        async with bus:
            await bus.publish("l", {"i": 1})
            await until(lambda: got == [0, 1])

    asyncio.run(first())
    asyncio.run(second())
    assert got == [0, 1]

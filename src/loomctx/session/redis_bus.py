"""`RedisStreamsBus`: the `EventBus` of many processes, on Redis Streams (extra ``redis``).

Workers on several machines share one Redis; each runs a `RedisStreamsBus` on it. The protocol
of `loomctx.session.bus_base` holds (JSON payloads, patterns, per-topic order, isolated and
reported failures); what Redis adds, and where it differs from `InProcessEventBus`:

**Keys** (all under `prefix`, default ``loom``; one Redis can serve many deployments):

- ``{prefix}:stream:{topic}``: a stream per topic, one entry per event (field ``event``: the
  JSON of `Event.to_dict()`).
- ``{prefix}:topics``: a set of every topic published, how ``task.*`` and ``*`` find streams.
- ``{prefix}:group:{name}``: a hash; ``since`` is the stream id the group starts from.
- ``{prefix}:seen:{name}``: a sorted set of event ids the subscription handled (score: when).
- ``{prefix}:dead``: the dead-letter stream (events that failed `max_deliveries` times, or
  were malformed).

- **A subscription is a consumer group**, named by the subscription's `name`, on every stream
  its pattern matches. Subscriptions with the same explicit name on several buses (the same
  service in N workers) are one group: each event goes to *one* of them. That is how
  promotion runs once per event, not once per worker. An unnamed subscription gets a name of
  its own (handler, number and this bus's `consumer`), so it sees every event, and its group,
  dedupe set and group hash are deleted when it unsubscribes or the bus closes; a named
  group outlives its workers (that is what lets another worker take over).
- **Patterns over streams.** An exact topic reads its one stream (created with the group). A
  wildcard reads every registered topic it matches: `publish` adds the topic to the registry
  set (in the same MULTI as the XADD), subscribers re-read the registry every `refresh`
  seconds and at once when this bus registers a topic. A group on a newly found stream starts
  at the group's ``since`` (when the group was first subscribed, by the subscriber's clock),
  so an event published after subscribing is delivered even if its topic is found later.
- **At least once.** A consumer reads with XREADGROUP (up to `max_pending` at a time, which
  bounds what it holds locally, and no more than its handler, timed as it runs, gets through
  in a quarter of `claim_idle`: what waits locally is pending in Redis and would otherwise be
  claimed and run again by another consumer; when handling still takes longer, it renews its
  hold on the rest with XCLAIM, and leaves to the other consumer what that one claimed
  meanwhile) and XACKs an event after its handler returned.
  The acks (and the dedupe ids) travel with the consumer's next read, in one round trip, at
  most 64 waiting, and before each claim: a crash may redeliver up to that many handled
  events, which handlers then see again. An event whose handler raised, or whose consumer
  died, stays pending in the group; every consumer runs
  XAUTOCLAIM every few seconds and takes over what has been pending longer than `claim_idle`
  seconds (a SIGKILLed worker's events go to a live one). So a handler may see an event
  again: after it failed, after a crash mid-handling, or if it ran longer than `claim_idle`.
- **Dead letters.** An event delivered more than `max_deliveries` times (its handler failed
  each time, or its consumers kept dying) is copied to ``{prefix}:dead`` with the
  subscription, stream, entry id, delivery count and the last error this bus saw, and acked.
  `dead_letters()` reads them. A malformed entry (not JSON of an event) goes there at once.
- **Idempotent by event id.** After a handler succeeds, the event id goes into the
  subscription's dedupe set (with the XACK). Before an event that may repeat is handled, its id
  is looked up there: an entry published with a given `event_id`, one that `publish` wrote
  again after a dropped connection (both marked ``check`` in the entry), and every redelivery
  (XAUTOCLAIM). A publisher that retries with the same `event_id`, or a redelivery of an event
  whose handler completed but whose ack was lost, is acked without running the handler again
  (counted in `duplicates`). A fresh id the bus made (uuid4) is not looked up: it cannot have
  been handled. Ids are kept `dedupe_ttl` seconds (default one day): the set is trimmed by
  score and expires when idle. Not covered: a handler interrupted mid-way runs again, and two
  consumers given two copies of one id at the same instant may both run; a handler whose
  effect must happen once must itself be idempotent (the session handlers are).
- **Bounded streams.** XADD trims each stream with ``MAXLEN ~ maxlen`` (default 100,000). An
  entry trimmed before every group read it is lost to the groups that had not: size `maxlen`
  above what the slowest group may lag. An entry trimmed while *pending* is reported by
  XAUTOCLAIM and counted in `dropped` (logged).
- **Reconnect with backoff.** Commands retry on connection errors (redis-py's `Retry`,
  exponential backoff with jitter); a consumer whose Redis is gone logs and retries forever,
  backing off from 50 ms to 2 s, and resumes where its group left off. `publish` raises
  redis-py's `ConnectionError` when Redis stays unreachable: the event was not accepted.
- **No backpressure.** `publish` returns when Redis has the event; it never waits for slow
  subscribers (the stream is the buffer, bounded by `maxlen`). `max_pending` bounds what a
  consumer holds in memory, not the publisher.
- **Order.** Per topic, a group reads its stream in order; one consumer handles in that order.
  With several consumers in a group, each sees its share in order, but two workers may run
  neighbouring events of one topic at the same time. A redelivered event comes after newer ones.
- **Handler publishes** never deadlock (publish does not wait); there is no wait-for graph.
- **Shutdown.** `close(drain=True)` refuses publishes from outside (`BusClosedError`), then
  keeps its consumers reading until a read that started after this bus's last publish found
  nothing and no handler is running (so events published by handlers while draining are
  delivered too), then stops them. Events other processes keep publishing are left to the
  groups' other consumers. `close(drain=False)` and `unsubscribe(drain=False)` stop after the
  running handler; what the consumer had read but not handled is counted in `dropped` and stays
  *pending* in Redis, where another consumer of the group claims it after `claim_idle` (for a
  named group, nothing is lost). `timeout` bounds the close: on expiry the consumers are
  cancelled (their events stay pending). Unnamed groups are deleted on close.
- **Counters** (`delivered`, `failed`, `dropped`, `stats()`) are this bus's own, not the
  group's across workers; `failures` keeps this bus's handler failures.
- **One event loop at a time**, as in process: the client's connections belong to the loop
  they were made on. Used from a new loop after the first closed, the bus makes a new client
  and restarts its consumers there (pending events are claimed as usual); from a second loop
  while the first is open with consumers on it, `BusLoopError`.
- **Clocks.** A group's ``since`` is the subscriber's clock in milliseconds, compared with
  Redis' stream ids (Redis' clock): keep the machines' clocks in sync (NTP), as for any
  distributed system; a skew of *s* seconds may deliver events up to *s* seconds older than
  the subscription, or miss events published in the *s* seconds after it, on topics first
  found later.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import random
import socket
import time
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Literal, Self
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from loomctx.errors import (
    BusClosedError,
    BusLoopError,
    ConfigError,
    MessageFormatError,
    MissingExtraError,
)
from loomctx.session.bus_base import (
    HANDLER_FAILED,
    LOG,
    BusStats,
    CountedSubscription,
    Event,
    Handler,
    HandlerFailure,
    check_capacity,
    check_subscription,
    failure_event,
    new_id,
    pattern_matches,
)

try:
    import redis.asyncio as aioredis
    from redis.backoff import ExponentialWithJitterBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import ResponseError
    from redis.exceptions import TimeoutError as RedisTimeoutError
    from redis.retry import Retry
except ImportError as exc:  # pragma: no cover - the dev extra installs redis
    raise MissingExtraError(feature="`RedisStreamsBus`", extra="redis", module="redis") from exc

__all__ = ["DeadLetter", "RedisStreamsBus", "RedisSubscription"]

# Errors after which a consumer backs off and tries again (Redis restarting, a network blip).
_TRANSIENT: Final = (RedisConnectionError, RedisTimeoutError, ConnectionError, OSError)
_BACKOFF_MIN: Final = 0.05
_BACKOFF_MAX: Final = 2.0
_TRIM_EVERY: Final = 1000  # acks between trims of a dedupe set
_PUBLISH_ATTEMPTS: Final = 8  # about 6 s of backoff before `publish` gives up
_ACK_BATCH: Final = 64
_FIRST_BATCH: Final = 16  # events taken before the handler's pace is known
# An entry field marking an event whose id may have been handled before (see `_handle_buffer`).
_CHECK: Final = "check"  # handled events acknowledged together, at most
# URL query parameters that are the bus's own options, not redis-py's.
_OPTIONS: Final = {
    "prefix": str,
    "maxlen": int,
    "claim_idle": float,
    "max_deliveries": int,
    "dedupe_ttl": float,
    "max_pending": int,
    "block": float,
    "refresh": float,
    "max_connections": int,
}

# The subscription whose handler is running in this context: a publish from a handler is
# allowed while the bus drains.
_ORIGIN: ContextVar[RedisSubscription | None] = ContextVar("loom_redis_origin", default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter:
    """An event a subscription gave up on, as kept in the ``{prefix}:dead`` stream.

    `event` is None when the entry was malformed; `raw` is what the stream held.
    """

    id: str
    subscription: str
    stream: str
    entry_id: str
    deliveries: int
    error: str
    event: Event | None
    raw: str


def _positive(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"`{what}` must be a number > 0, got {value!r}.")
    return float(value)


def _prefix(value: object) -> str:
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise ConfigError(f"`prefix` must be a non-empty string without spaces, got {value!r}.")
    return value


class RedisSubscription(CountedSubscription):
    """A subscription of `RedisStreamsBus`: a consumer group and the consumer that reads it.

    Its `name` is the consumer group's name in Redis. Its counters are this bus's own: `failed`
    counts each delivery on which the handler raised, and `dropped` the events read but not
    handled here (left pending for another consumer) or trimmed from the stream while
    pending."""

    def __init__(
        self,
        *,
        bus: RedisStreamsBus,
        name: str,
        pattern: str,
        handler: Handler,
        capacity: int,
        ephemeral: bool,
    ) -> None:
        super().__init__(name=name, pattern=pattern)
        self._bus = bus
        self._handler = handler
        self._capacity = capacity
        self.ephemeral = ephemeral
        """Whether the group is this subscription's alone (unnamed), deleted when it ends."""
        self._since = f"{int(time.time() * 1000)}-0"
        self._streams: dict[str, str] = {}  # stream key -> topic, for streams with our group
        self._buffer: deque[tuple[str, str, dict[str, str]]] = deque()
        self._errors: dict[str, str] = {}  # entry id -> last error, for dead letters
        self._worker: asyncio.Task[None] | None = None
        self._stopping = False
        self._drain_buffer = True
        self._handling = False
        self._ready = False  # `since` fetched and groups made
        self._topics_seen = -1  # the bus's topic version when the registry was last read
        self._next_refresh = 0.0
        self._next_claim = 0.0
        self._quiet_epoch = -1  # the bus epoch at the start of the last read that found nothing
        self._acks = 0
        self._acks_due: list[tuple[str, str, str | None]] = []  # stream, entry, event id
        self._duplicates = 0
        self._dead = 0
        # Seconds an event waits locally and is handled in, a moving average (0: none yet).
        self._per_event = 0.0
        self._read_at = 0.0  # when what is in the buffer was read (or its hold renewed)

    @property
    def duplicates(self) -> int:
        """Deliveries skipped because the event id was already handled (see `dedupe_ttl`)."""
        return self._duplicates

    @property
    def dead_lettered(self) -> int:
        """Events this consumer moved to the dead-letter stream."""
        return self._dead

    @property
    def pending(self) -> int:
        """Events read from Redis and not yet started."""
        return len(self._buffer)

    def matches(self, topic: str) -> bool:
        """Whether an event on `topic` goes to this subscription."""
        return pattern_matches(self._pattern, topic)

    async def unsubscribe(
        self,
        *,
        drain: bool = True,
        timeout: float | None = None,  # noqa: ASYNC109 - expiry drops and cancels, see module doc
    ) -> None:
        """Stop reading; handle what was already read unless `drain` is false (the rest stays
        pending in the group). From its own handler it returns at once. An unnamed
        subscription's group is deleted."""
        bus = self._bus
        bus._bind()
        bus._retire(self)
        self._stop(drain=drain)
        if _ORIGIN.get() is self:
            return
        await bus._join([self], timeout)
        await bus._forget([self])

    # -- internals ----------------------------------------------------------------------

    def _start(self) -> None:
        self._worker = asyncio.get_running_loop().create_task(
            self._run(), name=f"loom-bus-worker:{self._name}"
        )

    def _stop(self, *, drain: bool) -> None:
        self._stopping = True
        self._drain_buffer = drain

    def _quiet(self, epoch: int) -> bool:
        """Nothing to do as of `epoch`: idle, and a read after it found nothing."""
        done = self._worker is None or self._worker.done()
        return done or (not self._handling and not self._buffer and self._quiet_epoch >= epoch)

    async def _run(self) -> None:
        _ORIGIN.set(self)
        delay = _BACKOFF_MIN
        try:
            while not self._stopping:
                try:
                    await self._step()
                    delay = _BACKOFF_MIN
                except _TRANSIENT as exc:
                    LOG.warning(
                        "redis bus: subscription %r lost Redis (%s); retrying in %.2fs",
                        self._name,
                        exc,
                        delay,
                    )
                    await asyncio.sleep(delay * (0.5 + random.random()))
                    delay = min(delay * 2, _BACKOFF_MAX)
        finally:
            # What was read and not handled stays pending in Redis for another consumer.
            self._dropped += len(self._buffer)
            self._buffer.clear()
            if self._acks_due and self._bus._redis is not None:
                try:
                    await asyncio.shield(self._flush(self._bus._redis))
                except (*_TRANSIENT, ResponseError) as exc:  # they are redelivered, then deduped
                    LOG.warning(
                        "redis bus: %r could not acknowledge on stopping: %s", self._name, exc
                    )

    async def _step(self) -> None:
        bus = self._bus
        client = bus._client()
        epoch = bus._epoch
        loop = asyncio.get_running_loop()
        now = loop.time()
        if not self._ready:
            await self._prepare(client)
        if self._topics_seen != bus._topics_version or now >= self._next_refresh:
            await self._refresh(client)
        if now >= self._next_claim:
            self._next_claim = now + bus.claim_interval
            # What this consumer handled is acked first: unacked, it would look idle and be
            # claimed, by this consumer too, and handled again.
            await self._flush(client)
            await self._claim(client)
            if self._stopping:
                return
        if not self._streams:
            await asyncio.sleep(bus._read_block())
            self._quiet_epoch = epoch
            return
        due, self._acks_due = self._acks_due, []
        try:
            # The acks of what was handled travel with the next read: one round trip.
            async with client.pipeline(transaction=False) as pipe:
                self._ack_ops(pipe, due)
                pipe.xreadgroup(
                    self._name,
                    bus.consumer,
                    dict.fromkeys(self._streams, ">"),
                    count=self._batch(),
                    block=max(1, int(bus._read_block() * 1000)),
                )
                replies: Any = await pipe.execute()
            reply = replies[-1]
            self._read_at = time.monotonic()
        except BaseException as exc:
            self._acks_due = due + self._acks_due
            if not isinstance(exc, ResponseError) or not (
                "NOGROUP" in str(exc) or "UNBLOCKED" in str(exc)
            ):
                raise
            # A stream or group was deleted under us (a trim to nothing, an admin): remake.
            LOG.warning("redis bus: group %r vanished; recreating it", self._name)
            self._streams.clear()
            self._topics_seen = -1
            return
        for key, entries in reply or ():
            for entry_id, fields in entries:
                self._buffer.append((key, entry_id, fields))
        if not self._buffer:
            self._quiet_epoch = epoch
            return
        await self._handle_buffer(client)

    async def _prepare(self, client: aioredis.Redis) -> None:
        """Fix the group's start: the first subscriber's ``since`` wins."""
        key = self._bus._key("group", self._name)
        await client.hsetnx(key, "since", self._since)
        since = await client.hget(key, "since")
        if since:
            self._since = str(since)
        self._ready = True

    async def _refresh(self, client: aioredis.Redis) -> None:
        """Join the group on every stream the pattern matches (new topics included)."""
        bus = self._bus
        self._topics_seen = bus._topics_version
        self._next_refresh = asyncio.get_running_loop().time() + bus.refresh
        if "*" in self._pattern:
            members = await client.smembers(bus._key("topics"))
            topics = sorted(str(t) for t in members if self.matches(str(t)))
        else:
            topics = [self._pattern]
        for topic in topics:
            key = bus._stream(topic)
            if key in self._streams:
                continue
            try:
                await client.xgroup_create(key, self._name, id=self._since, mkstream=True)
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
            self._streams[key] = topic

    async def _claim(self, client: aioredis.Redis) -> None:
        """Take over what has been pending longer than `claim_idle` (a dead consumer's, or a
        failed handler's), dead-lettering what was delivered too often."""
        bus = self._bus
        idle = int(bus.claim_idle * 1000)
        for key in list(self._streams):
            start = "0-0"
            while not self._stopping:
                reply = await client.xautoclaim(
                    key, self._name, bus.consumer, idle, start, count=self._batch()
                )
                start, claimed = str(reply[0]), reply[1]
                self._read_at = time.monotonic()
                deleted = reply[2] if len(reply) > 2 else []
                if deleted:
                    self._dropped += len(deleted)
                    LOG.warning(
                        "redis bus: %d pending event(s) of %r were trimmed from %r before "
                        "they were handled; raise `maxlen`",
                        len(deleted),
                        self._name,
                        key,
                    )
                entries = [(str(i), f) for i, f in claimed if f is not None]
                if entries:
                    counts = await self._deliveries(client, key, [i for i, _ in entries])
                    for entry_id, fields in entries:
                        if counts.get(entry_id, 1) > bus.max_deliveries:
                            await self._dead_letter(
                                client, key, entry_id, fields, counts[entry_id], None
                            )
                        else:
                            self._buffer.append((key, entry_id, {**fields, _CHECK: "1"}))
                    await self._handle_buffer(client)
                if start == "0-0":
                    break

    def _batch(self) -> int:
        """How many events to take at a time: up to `max_pending`, but no more than the
        handler gets through in a quarter of `claim_idle`. An event waiting in the buffer is
        pending in Redis and ages there: left waiting past `claim_idle`, another consumer
        would claim it and run it a second time."""
        if self._per_event <= 0:
            return min(self._capacity, _FIRST_BATCH)
        fits = int(self._bus.claim_idle / 4 / self._per_event)
        return max(1, min(self._capacity, fits))

    async def _deliveries(
        self, client: aioredis.Redis, key: str, entry_ids: list[str]
    ) -> dict[str, int]:
        async with client.pipeline(transaction=False) as pipe:
            for entry_id in entry_ids:
                pipe.xpending_range(key, self._name, min=entry_id, max=entry_id, count=1)
            replies = await pipe.execute()
        counts: dict[str, int] = {}
        for reply in replies:
            for item in reply:
                counts[str(item["message_id"])] = int(item["times_delivered"])
        return counts

    async def _handle_buffer(self, client: aioredis.Redis) -> None:
        """Handle what was read, in order. Acks wait for the next read (or `_ACK_BATCH`)."""
        acks = self._acks_due
        began, count = time.monotonic(), len(self._buffer)
        try:
            await self._handle_each(client, acks)
        finally:
            # Wall time per event, other work of the process included: what the buffer ages by.
            took = (time.monotonic() - began) / max(1, count)
            self._per_event = took if self._per_event <= 0 else 0.7 * self._per_event + 0.3 * took

    async def _handle_each(
        self, client: aioredis.Redis, acks: list[tuple[str, str, str | None]]
    ) -> None:
        while self._buffer:
            if self._stopping and not self._drain_buffer:
                return
            if self._held_long():
                await self._renew(client)
                acks = self._acks_due
                continue
            batch = list(self._buffer)
            events: list[Event | None] = []
            for _, _, fields in batch:
                try:
                    events.append(Event.from_dict(json.loads(fields["event"])))
                except (KeyError, ValueError, TypeError, MessageFormatError):
                    events.append(None)
            # Only what may repeat is looked up: a given or retried id, or a redelivery. A
            # fresh id the bus made itself (uuid4) cannot have been handled before.
            ids = [
                e.id
                for e, (_, _, f) in zip(events, batch, strict=True)
                if e is not None and f.get(_CHECK)
            ]
            seen = set()
            if ids:
                scores = await client.zmscore(self._bus._key("seen", self._name), ids)
                seen = {i for i, s in zip(ids, scores, strict=True) if s is not None}
            for (key, entry_id, fields), event in zip(batch, events, strict=True):
                if self._stopping and not self._drain_buffer:
                    return
                if self._held_long():
                    break  # renew the hold on the rest first
                self._buffer.popleft()
                if event is None:
                    await self._dead_letter(client, key, entry_id, fields, 1, "malformed entry")
                elif event.id in seen:
                    # Handled before: a retried publish, or an ack lost in a crash.
                    self._duplicates += 1
                    acks.append((key, entry_id, None))
                elif (
                    event.topic == HANDLER_FAILED
                    and event.payload.get("subscription") == self._name
                ):
                    acks.append((key, entry_id, None))  # for the *other* subscriptions
                elif await self._deliver(entry_id, event):
                    seen.add(event.id)
                    acks.append((key, entry_id, event.id))
                if len(acks) >= _ACK_BATCH:
                    await self._flush(client)
                    acks = self._acks_due

    def _held_long(self) -> bool:
        return time.monotonic() - self._read_at > self._bus.claim_idle / 4

    async def _renew(self, client: aioredis.Redis) -> None:
        """Acknowledge what was handled, and renew this consumer's hold on what still waits
        in the buffer (its idle time in Redis restarts), dropping the entries another
        consumer has claimed since: they are that consumer's to handle now.

        XCLAIM with a minimum idle time of (time held - claim_idle / 2) succeeds on an entry
        still delivered to this consumer (idle for about the time held) and fails on one
        another consumer claimed, which it could only do claim_idle after this one read it
        (so it has been idle for at most the time held - claim_idle). ``JUSTID``: the
        delivery count is left as it was."""
        await self._flush(client)
        held = time.monotonic() - self._read_at
        min_idle = max(0, int((held - self._bus.claim_idle / 2) * 1000))
        by_stream: dict[str, list[Any]] = {}  # entry ids (redis-py's stub wants a union)
        for key, entry_id, _ in self._buffer:
            by_stream.setdefault(key, []).append(entry_id)
        async with client.pipeline(transaction=False) as pipe:
            for key, entry_ids in by_stream.items():
                pipe.xclaim(key, self._name, self._bus.consumer, min_idle, entry_ids, justid=True)
            replies = await pipe.execute()
        self._read_at = time.monotonic()
        kept = {
            (key, str(entry_id))
            for key, ids in zip(by_stream, replies, strict=True)
            for entry_id in ids
        }
        before = len(self._buffer)
        self._buffer = deque(e for e in self._buffer if (e[0], e[1]) in kept)
        if len(self._buffer) < before:
            LOG.warning(
                "redis bus: %r left %d event(s) to the consumer that claimed them; "
                "raise `claim_idle` above the time a read's events take to handle",
                self._name,
                before - len(self._buffer),
            )

    async def _deliver(self, entry_id: str, event: Event) -> bool:
        """Run the handler on `event`: True if it returned, False if it raised."""
        self._handling = True
        try:
            result = self._handler(event)
            if inspect.isawaitable(result):  # an async handler; a plain function is done
                await result
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                self._dropped += 1  # left pending: another consumer claims it
                raise
            await self._failure(entry_id, event, exc)
            return False
        except Exception as exc:
            await self._failure(entry_id, event, exc)
            return False
        finally:
            self._handling = False
        self._delivered += 1
        self._errors.pop(entry_id, None)
        return True

    async def _failure(self, entry_id: str, event: Event, exc: BaseException) -> None:
        self._failed += 1
        if len(self._errors) >= 1000:
            self._errors.pop(next(iter(self._errors)))
        self._errors[entry_id] = f"{type(exc).__qualname__}: {exc}"
        await self._bus._report(self, event, exc)

    async def _flush(self, client: aioredis.Redis) -> None:
        """Send the acks due now, in one MULTI."""
        due, self._acks_due = self._acks_due, []
        if not due:
            return
        try:
            async with client.pipeline(transaction=True) as pipe:
                self._ack_ops(pipe, due)
                await pipe.execute()
        except BaseException:
            self._acks_due = due + self._acks_due
            raise

    def _ack_ops(self, pipe: Any, acks: list[tuple[str, str, str | None]]) -> None:
        """Queue on `pipe`: XACK the entries, and remember the handled event ids."""
        if not acks:
            return
        bus = self._bus
        seen = bus._key("seen", self._name)
        now = time.time()
        handled = {event_id: now for _, _, event_id in acks if event_id is not None}
        by_stream: dict[str, list[str]] = {}
        for key, entry_id, _ in acks:
            by_stream.setdefault(key, []).append(entry_id)
        if handled:
            pipe.zadd(seen, handled)
            pipe.pexpire(seen, int(bus.dedupe_ttl * 1000))
        for key, entry_ids in by_stream.items():
            pipe.xack(key, self._name, *entry_ids)
        self._acks += len(acks)
        if self._acks >= _TRIM_EVERY:
            self._acks = 0
            pipe.zremrangebyscore(seen, "-inf", now - bus.dedupe_ttl)

    async def _dead_letter(
        self,
        client: aioredis.Redis,
        key: str,
        entry_id: str,
        fields: Mapping[str, str],
        deliveries: int,
        error: str | None,
    ) -> None:
        bus = self._bus
        reason = error or self._errors.pop(entry_id, "delivered too often (consumers died?)")
        LOG.error(
            "redis bus: subscription %r gives up on entry %s of %r after %d deliveries: %s",
            self._name,
            entry_id,
            key,
            deliveries,
            reason,
        )
        async with client.pipeline(transaction=True) as pipe:
            pipe.xadd(
                bus._key("dead"),
                {
                    "event": str(fields.get("event", json.dumps(dict(fields)))),
                    "subscription": self._name,
                    "stream": key,
                    "entry_id": entry_id,
                    "deliveries": str(deliveries),
                    "error": reason,
                },
                maxlen=bus.maxlen,
                approximate=True,
            )
            pipe.xack(key, self._name, entry_id)
            await pipe.execute()
        self._dead += 1


class RedisStreamsBus:
    """The `EventBus` on Redis Streams: a stream per topic, a consumer group per subscription.

    `url` is a redis-py URL (``redis://host:6379/0``, ``rediss://...``, ``unix://...``), or
    pass a `redis.asyncio.Redis` as `client` (the bus then does not close it). See the module
    docstring for the keys and every guarantee. Options: `prefix` of every key; `maxlen` of each
    topic stream (approximate trimming); `claim_idle` seconds an event may stay pending before
    another consumer claims it; `max_deliveries` before an event is dead-lettered;
    `dedupe_ttl` seconds a handled event id is remembered; `max_pending` events a consumer
    reads at a time; `block` seconds a read waits for news (also how fast a stop is seen);
    `refresh` seconds between reads of the topic registry; `consumer`, this bus's consumer
    name in every group (default: host, pid and a random suffix); `max_connections` the
    client's pool (each consumer holds one while it reads; publishers wait for one).
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        client: aioredis.Redis | None = None,
        prefix: str = "loom",
        maxlen: int = 100_000,
        claim_idle: float = 30.0,
        max_deliveries: int = 5,
        dedupe_ttl: float = 86_400.0,
        max_pending: int = 100,
        block: float = 0.1,
        refresh: float = 1.0,
        failures_kept: int = 100,
        consumer: str | None = None,
        max_connections: int = 64,
    ) -> None:
        if not isinstance(url, str) or not url:
            raise ConfigError(f"`url` must be a redis:// URL, got {url!r}.")
        self.url = url
        self.prefix = _prefix(prefix)
        self.maxlen = check_capacity(maxlen, "maxlen")
        self.claim_idle = _positive(claim_idle, "claim_idle")
        self.max_deliveries = check_capacity(max_deliveries, "max_deliveries")
        self.dedupe_ttl = _positive(dedupe_ttl, "dedupe_ttl")
        self.block = _positive(block, "block")
        self.refresh = _positive(refresh, "refresh")
        self.claim_interval = min(5.0, self.claim_idle / 2)
        """Seconds between a consumer's XAUTOCLAIM passes."""
        self._max_pending = check_capacity(max_pending, "max_pending")
        self.max_connections = check_capacity(max_connections, "max_connections")
        token = uuid.uuid4().hex[:8]
        if consumer is not None and (not isinstance(consumer, str) or not consumer):
            raise ConfigError(f"`consumer` must be a non-empty string, got {consumer!r}.")
        self.consumer = consumer or f"{socket.gethostname()}:{os.getpid()}:{token}"
        """This bus's consumer name in every group."""
        self.failures: deque[HandlerFailure] = deque(
            maxlen=check_capacity(failures_kept, "failures_kept")
        )
        """The most recent handler failures on this bus, oldest first."""
        self._given_client = client
        self._redis: aioredis.Redis | None = client
        self._subs: dict[str, RedisSubscription] = {}
        self._retired: dict[str, RedisSubscription] = {}
        self._registered: set[str] = set()  # topics this bus put in the registry
        self._topics_version = 0
        self._epoch = 0  # publishes by this bus that returned
        self._state: Literal["open", "closing", "closed"] = "open"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = asyncio.Event()
        self._draining = False
        self._published = 0
        self._names = 0

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisStreamsBus:
        """A bus for `url`, whose query may carry the bus's own options (``prefix``,
        ``maxlen``, ``claim_idle``, ``max_deliveries``, ``dedupe_ttl``, ``max_pending``,
        ``block``, ``refresh``); the rest of the query goes to redis-py."""
        parts = urlsplit(url)
        kept: list[tuple[str, str]] = []
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            kind = _OPTIONS.get(key)
            if kind is None:
                kept.append((key, value))
                continue
            try:
                options.setdefault(key, kind(value))
            except ValueError:
                raise ConfigError(
                    f"the bus URL's `{key}` must be a {kind.__name__}, got {value!r}."
                ) from None
        return cls(urlunsplit(parts._replace(query=urlencode(kept))), **options)

    def __repr__(self) -> str:
        return f"RedisStreamsBus(prefix={self.prefix!r}, consumer={self.consumer!r})"

    async def __aenter__(self) -> Self:
        self._bind()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close(drain=exc_type is None)

    @property
    def closed(self) -> bool:
        """Whether `close()` has been called."""
        return self._state != "open"

    def subscribe(
        self,
        pattern: str,
        handler: Handler,
        *,
        name: str | None = None,
        max_pending: int | None = None,
    ) -> RedisSubscription:
        """Call `handler` with every event whose topic matches `pattern` (published after
        this call), one at a time; `name` is the consumer group (shared by every bus that
        subscribes with it). Needs no running event loop: reading starts on the bus's loop.
        """
        if self._state != "open":
            raise BusClosedError("the bus is closed; `subscribe` on a new bus.")
        ephemeral = name is None
        name, capacity = check_subscription(
            pattern,
            handler,
            name=name,
            max_pending=max_pending,
            default_pending=self._max_pending,
            taken=self._subs,
            unnamed=self._unnamed,
        )
        sub = RedisSubscription(
            bus=self,
            name=name,
            pattern=pattern,
            handler=handler,
            capacity=capacity,
            ephemeral=ephemeral,
        )
        self._subs[name] = sub
        self._retired.pop(name, None)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None  # reading starts when the bus is first used on a loop
        if loop is not None:
            self._bind()
            if self._loop is loop and sub._worker is None:
                sub._start()
        return sub

    async def publish(
        self,
        topic: str,
        payload: Mapping[str, Any] | None = None,
        *,
        source: str = "",
        event_id: str | None = None,
    ) -> Event:
        """Add an event to its topic's stream (XADD, trimmed to ~`maxlen`) and return it
        once Redis has it. `event_id` is delivered as given, and handled once per
        subscription within `dedupe_ttl`. Raises `ConfigError` for a bad topic or payload,
        `BusClosedError` once the bus is closing (except from its handlers while it drains).
        """
        origin = _ORIGIN.get()
        from_handler = origin is not None and origin._bus is self
        if self._state == "closed" or (self._state == "closing" and not from_handler):
            raise BusClosedError(f"the bus is closed; cannot publish on {topic!r}.")
        self._bind()
        event = Event(
            id=new_id() if event_id is None else event_id,
            topic=topic,
            payload={} if payload is None else payload,
            source=source,
        )
        await self._add(event, given=event_id is not None)
        return event

    async def close(
        self,
        *,
        drain: bool = True,
        timeout: float | None = None,  # noqa: ASYNC109 - expiry drops and cancels, see module doc
    ) -> None:
        """Stop accepting publishes, deliver what was published here (if `drain`), stop every
        consumer, delete unnamed groups, close the client the bus made. Idempotent. Must not
        be awaited from a handler of this bus: `ConfigError`."""
        origin = _ORIGIN.get()
        if origin is not None and origin._bus is self:
            raise ConfigError(
                "`close()` was awaited from a handler of the same bus, which would wait for "
                "itself; close the bus from outside its handlers."
            )
        self._bind()
        if self._state != "open":
            await self._closed.wait()
            return
        self._state = "closing"
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        subs: list[RedisSubscription] = []
        try:
            if drain:
                try:
                    async with asyncio.timeout_at(deadline):
                        await self._quiesce()
                except TimeoutError:
                    LOG.warning("redis bus: drain timed out after %ss; stopping", timeout)
            self._state = "closed"
            subs = list(self._subs.values())
            for sub in subs:
                self._retire(sub)
                sub._stop(drain=False)
            remaining = None if deadline is None else max(0.0, deadline - loop.time())
            await self._join(subs, remaining)
            await self._forget(subs)  # the retired ones were tidied when they unsubscribed
        except asyncio.CancelledError:
            self._state = "closed"
            for sub in [*self._subs.values(), *self._retired.values()]:
                self._retire(sub)
                sub._stop(drain=False)
                if sub._worker is not None:
                    sub._worker.cancel()
            raise
        finally:
            self._draining = False
            self._closed.set()
            if self._given_client is None and self._redis is not None:
                redis, self._redis = self._redis, None
                await redis.aclose()

    def stats(self) -> BusStats:
        """This bus's counters: events it published, and per subscription their fate here."""
        subs = {**self._retired, **self._subs}
        return BusStats(
            published=self._published,
            subscriptions={name: sub._stats() for name, sub in sorted(subs.items())},
        )

    async def dead_letters(self, *, limit: int = 100) -> list[DeadLetter]:
        """The oldest `limit` dead letters under this bus's prefix (see the module docstring).
        They stay in the stream; delete them with XDEL or XTRIM once dealt with."""
        check_capacity(limit, "limit")
        self._bind()
        entries: Any = await self._client().xrange(self._key("dead"), count=limit)
        out = []
        for entry_id, fields in entries:
            raw = str(fields.get("event", ""))
            try:
                event: Event | None = Event.from_dict(json.loads(raw))
            except (ValueError, TypeError, MessageFormatError):
                event = None
            out.append(
                DeadLetter(
                    id=str(entry_id),
                    subscription=str(fields.get("subscription", "")),
                    stream=str(fields.get("stream", "")),
                    entry_id=str(fields.get("entry_id", "")),
                    deliveries=int(fields.get("deliveries", 0)),
                    error=str(fields.get("error", "")),
                    event=event,
                    raw=raw,
                )
            )
        return out

    # -- internals ---------------------------------------------------------------------

    def _key(self, kind: str, name: str | None = None) -> str:
        return f"{self.prefix}:{kind}" if name is None else f"{self.prefix}:{kind}:{name}"

    def _stream(self, topic: str) -> str:
        return self._key("stream", topic)

    def _read_block(self) -> float:
        # While draining, reads come back quickly so that quiescence is seen soon.
        return min(self.block, 0.01) if self._draining else self.block

    def _client(self) -> aioredis.Redis:
        if self._redis is None:
            # A blocking pool: past `max_connections`, a publish waits for a connection (a
            # plain pool raises "Too many connections", which the retries would spin on).
            pool = aioredis.BlockingConnectionPool.from_url(
                self.url,
                max_connections=self.max_connections,
                timeout=None,
                decode_responses=True,
                retry=Retry(ExponentialWithJitterBackoff(cap=1.0, base=0.05), 6),
                retry_on_error=[RedisConnectionError, RedisTimeoutError],
            )
            self._redis = aioredis.Redis.from_pool(pool)
        return self._redis

    def _bind(self) -> None:
        """Run on the calling loop: bind to it, or move to it from a closed one; start the
        consumers not running yet. `BusLoopError` while the old loop is open and busy."""
        loop = asyncio.get_running_loop()
        old = self._loop
        if old is not loop:
            subs = [*self._subs.values(), *self._retired.values()]
            if old is not None and not old.is_closed():
                busy = [s.name for s in subs if s._worker is not None and not s._worker.done()]
                if busy:
                    raise BusLoopError(
                        f"this event bus runs on another event loop, which is still open, with "
                        f"the consumers of {len(busy)} subscription(s) ({busy[0]!r}, ...) on it; "
                        "close the bus there (`await bus.close()`) or close that loop first, or "
                        "give each loop (each thread) a bus of its own"
                    )
            self._loop = loop
            if old is not None:
                # The old loop's connections and tasks are gone with it.
                if self._given_client is None:
                    self._redis = None
                closed = asyncio.Event()
                if self._closed.is_set():
                    closed.set()
                self._closed = closed
                for sub in subs:
                    sub._dropped += len(sub._buffer)
                    sub._buffer.clear()
                    sub._worker = None
                    sub._handling = False
        if self._state != "closed":
            for sub in self._subs.values():
                if sub._worker is None:
                    sub._start()

    def _retire(self, sub: RedisSubscription) -> None:
        if self._subs.get(sub.name) is sub:
            del self._subs[sub.name]
            self._retired[sub.name] = sub

    async def _add(self, event: Event, *, given: bool = False) -> None:
        data = json.dumps(event.to_dict(), ensure_ascii=False, separators=(",", ":"))
        new_topic = event.topic not in self._registered
        delay = _BACKOFF_MIN
        for attempt in range(_PUBLISH_ATTEMPTS):
            try:
                fields: dict[Any, Any] = {"event": data}
                if given or attempt:
                    fields[_CHECK] = "1"
                stream = self._stream(event.topic)
                if new_topic:  # registered with its first event, atomically
                    async with self._client().pipeline(transaction=True) as pipe:
                        pipe.sadd(self._key("topics"), event.topic)
                        pipe.xadd(stream, fields, maxlen=self.maxlen, approximate=True)
                        await pipe.execute()
                else:
                    await self._client().xadd(stream, fields, maxlen=self.maxlen, approximate=True)
                break
            except _TRANSIENT:
                # A connection dropped (Redis restarting, a killed client): try again. If the
                # first attempt did land, the copy has the same event id and is deduped.
                if attempt == _PUBLISH_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, _BACKOFF_MAX)
        if new_topic:
            self._registered.add(event.topic)
            self._topics_version += 1
        self._published += 1
        self._epoch += 1

    async def _quiesce(self) -> None:
        """Wait until every live consumer found nothing after this bus's last publish."""
        self._draining = True
        while True:
            epoch = self._epoch
            if all(sub._quiet(epoch) for sub in self._subs.values()):
                return
            await asyncio.sleep(0.005)

    def _unnamed(self, label: str) -> str:
        self._names += 1
        return f"{label}#{self._names}@{self.consumer}"

    async def _report(self, sub: RedisSubscription, event: Event, exc: BaseException) -> None:
        failure = failure_event(self.failures, sub, event, exc, closed=self._state == "closed")
        if failure is not None:
            await self._add(failure)

    async def _join(self, subs: Iterable[RedisSubscription], grace: float | None) -> None:
        """Wait for the consumers of `subs` to stop; after `grace` s, cancel them."""
        current = asyncio.current_task()
        workers = {
            sub._worker: sub
            for sub in subs
            if sub._worker is not None and sub._worker is not current
        }
        if not workers:
            return
        _, late = await asyncio.wait(workers, timeout=grace)
        if late:
            LOG.warning(
                "redis bus: %d consumer(s) still busy at the timeout; cancelling", len(late)
            )
            for worker in late:
                worker.cancel()
            await asyncio.wait(late)
        for worker in workers:
            if not worker.cancelled() and worker.exception() is not None:
                LOG.error("redis bus: consumer crashed", exc_info=worker.exception())

    async def _forget(self, subs: Iterable[RedisSubscription]) -> None:
        """Delete unnamed subscriptions' groups and keys; leave named groups (they are the
        service's, shared with other workers), removing this consumer if it holds nothing."""
        if self._redis is None and self._state == "closed":
            return  # the close already did this, and its client is gone
        client = self._client()
        for sub in subs:
            try:
                if sub.ephemeral:
                    async with client.pipeline(transaction=False) as pipe:
                        for key in sub._streams:
                            pipe.xgroup_destroy(key, sub.name)
                        pipe.delete(self._key("group", sub.name), self._key("seen", sub.name))
                        await pipe.execute(raise_on_error=False)
                    sub._streams.clear()
                    continue
                for key in sub._streams:
                    pending = await client.xpending_range(
                        key, sub.name, min="-", max="+", count=1, consumername=self.consumer
                    )
                    if not pending:
                        await client.xgroup_delconsumer(key, sub.name, self.consumer)
            except (*_TRANSIENT, ResponseError) as exc:
                LOG.warning("redis bus: could not tidy subscription %r: %s", sub.name, exc)

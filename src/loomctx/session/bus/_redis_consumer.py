"""`RedisSubscription`: one consumer of a consumer group, as `RedisStreamsBus` runs it.

The guarantees (redelivery, claiming, dedupe, dead letters) are described in
`loomctx.session.bus.redis`; this module is how a consumer keeps them: it reads its group
on every stream its pattern matches, hands events to its handler one at a time, acknowledges
them in batches, claims what another consumer left idle, and dead-letters an event delivered
`max_deliveries` times. It reaches its bus through `ConsumerBus` (the bus's keys, client and
settings), so that it needs nothing above it.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import random
import time
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, Final, Protocol

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from loomctx.errors import MessageFormatError
from loomctx.session.bus._lifecycle import ORIGIN, WorkerSubscription
from loomctx.session.bus.base import HANDLER_FAILED, LOG, Event, Handler, pattern_matches

__all__ = ["BACKOFF_MAX", "BACKOFF_MIN", "CHECK", "TRANSIENT", "ConsumerBus", "RedisSubscription"]

# Errors after which a consumer backs off and tries again (Redis restarting, a network blip).
TRANSIENT: Final = (RedisConnectionError, RedisTimeoutError, ConnectionError, OSError)
BACKOFF_MIN: Final = 0.05
BACKOFF_MAX: Final = 2.0
_TRIM_EVERY: Final = 1000  # acks between trims of a dedupe set
_ACK_BATCH: Final = 64
_FIRST_BATCH: Final = 16  # events taken before the handler's pace is known
# An entry field marking an event whose id may have been handled before (see `_handle_buffer`).
CHECK: Final = "check"  # handled events acknowledged together, at most


class ConsumerBus(Protocol):
    """What a consumer needs of its bus (`RedisStreamsBus` is one)."""

    consumer: str
    claim_idle: float
    claim_interval: float
    dedupe_ttl: float
    max_deliveries: int
    maxlen: int
    refresh: float
    _redis: aioredis.Redis | None
    _epoch: int
    _topics_version: int

    def _bind(self) -> None: ...

    def _client(self) -> aioredis.Redis: ...

    def _key(self, kind: str, name: str | None = None) -> str: ...

    def _stream(self, topic: str) -> str: ...

    def _read_block(self) -> float: ...

    def _retire(self, sub: RedisSubscription) -> None: ...

    async def _join(self, subs: Iterable[RedisSubscription], grace: float | None) -> None: ...

    async def _forget(self, subs: Iterable[RedisSubscription]) -> None: ...

    async def _report(self, sub: RedisSubscription, event: Event, exc: BaseException) -> None: ...


class RedisSubscription(WorkerSubscription):
    """A subscription of `RedisStreamsBus`: a consumer group and the consumer that reads it.

    Its `name` is the consumer group's name in Redis. Its counters are this bus's own: `failed`
    counts each delivery on which the handler raised, and `dropped` the events read but not
    handled here (left pending for another consumer) or trimmed from the stream while
    pending."""

    def __init__(
        self,
        *,
        bus: ConsumerBus,
        name: str,
        pattern: str,
        handler: Handler,
        capacity: int,
        ephemeral: bool,
    ) -> None:
        super().__init__(bus=bus, name=name, pattern=pattern)
        self._bus = bus
        self._handler = handler
        self._capacity = capacity
        self.ephemeral = ephemeral
        """Whether the group is this subscription's alone (unnamed), deleted when it ends."""
        self._since = f"{int(time.time() * 1000)}-0"
        self._streams: dict[str, str] = {}  # stream key -> topic, for streams with our group
        self._buffer: deque[tuple[str, str, dict[str, str]]] = deque()
        self._errors: dict[str, str] = {}  # entry id -> last error, for dead letters
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
        if ORIGIN.get() is self:
            return
        await bus._join([self], timeout)
        await bus._forget([self])

    # -- internals ----------------------------------------------------------------------

    def _stop(self, *, drain: bool) -> None:
        self._stopping = True
        self._drain_buffer = drain

    def _quiet(self, epoch: int) -> bool:
        """Nothing to do as of `epoch`: idle, and a read after it found nothing."""
        done = self._worker is None or self._worker.done()
        return done or (not self._handling and not self._buffer and self._quiet_epoch >= epoch)

    async def _run(self) -> None:
        ORIGIN.set(self)
        delay = BACKOFF_MIN
        try:
            while not self._stopping:
                try:
                    await self._step()
                    delay = BACKOFF_MIN
                except TRANSIENT as exc:
                    LOG.warning(
                        "redis bus: subscription %r lost Redis (%s); retrying in %.2fs",
                        self._name,
                        exc,
                        delay,
                    )
                    await asyncio.sleep(delay * (0.5 + random.random()))
                    delay = min(delay * 2, BACKOFF_MAX)
        finally:
            # What was read and not handled stays pending in Redis for another consumer.
            self._dropped += len(self._buffer)
            self._buffer.clear()
            if self._acks_due and self._bus._redis is not None:
                try:
                    await asyncio.shield(self._flush(self._bus._redis))
                except (*TRANSIENT, ResponseError) as exc:  # they are redelivered, then deduped
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
                            self._buffer.append((key, entry_id, {**fields, CHECK: "1"}))
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
                if e is not None and f.get(CHECK)
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

"""`RedisStreamsBus`: the `EventBus` of many processes, on Redis Streams (extra ``redis``).

Workers on several machines share one Redis; each runs a `RedisStreamsBus` on it. The protocol
of `loomctx.session.bus.base` holds (JSON payloads, patterns, per-topic order, isolated and
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
import json
import os
import random
import socket
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Self
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from loomctx.errors import (
    BusLoopError,
    ConfigError,
    MessageFormatError,
    MissingExtraError,
    check_int,
)
from loomctx.session.bus.base import (
    LOG,
    Event,
    Handler,
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

from loomctx.session.bus._lifecycle import BusLifecycle
from loomctx.session.bus._redis_consumer import (
    BACKOFF_MAX,
    BACKOFF_MIN,
    CHECK,
    TRANSIENT,
    RedisSubscription,
)

__all__ = ["DeadLetter", "RedisStreamsBus", "RedisSubscription"]

_PUBLISH_ATTEMPTS: Final = 8  # about 6 s of backoff before `publish` gives up
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


class RedisStreamsBus(BusLifecycle[RedisSubscription]):
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
    Beyond what every bus's `close` does, this one deletes unnamed subscriptions' groups
    (named groups are the service's, shared with other workers) and closes the client it made.
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
        self.maxlen = check_int(maxlen, "`maxlen`", minimum=1)
        self.claim_idle = _positive(claim_idle, "claim_idle")
        self.max_deliveries = check_int(max_deliveries, "`max_deliveries`", minimum=1)
        self.dedupe_ttl = _positive(dedupe_ttl, "dedupe_ttl")
        self.block = _positive(block, "block")
        self.refresh = _positive(refresh, "refresh")
        self.claim_interval = min(5.0, self.claim_idle / 2)
        """Seconds between a consumer's XAUTOCLAIM passes."""
        self._max_pending = check_int(max_pending, "`max_pending`", minimum=1)
        self.max_connections = check_int(max_connections, "`max_connections`", minimum=1)
        token = uuid.uuid4().hex[:8]
        if consumer is not None and (not isinstance(consumer, str) or not consumer):
            raise ConfigError(f"`consumer` must be a non-empty string, got {consumer!r}.")
        self.consumer = consumer or f"{socket.gethostname()}:{os.getpid()}:{token}"
        """This bus's consumer name in every group."""
        super().__init__(failures_kept=failures_kept)
        self._given_client = client
        self._redis: aioredis.Redis | None = client
        self._registered: set[str] = set()  # topics this bus put in the registry
        self._topics_version = 0
        self._epoch = 0  # publishes by this bus that returned
        self._draining = False

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
        ephemeral = name is None
        sub = self._admit(
            pattern,
            handler,
            name=name,
            max_pending=max_pending,
            make=lambda name, capacity: RedisSubscription(
                bus=self,
                name=name,
                pattern=pattern,
                handler=handler,
                capacity=capacity,
                ephemeral=ephemeral,
            ),
        )
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
        event = self._new_event(
            topic,
            payload,
            source=source,
            event_id=event_id,
            from_handler=self._origin() is not None,
        )
        await self._add(event, given=event_id is not None)
        return event

    async def dead_letters(self, *, limit: int = 100) -> list[DeadLetter]:
        """The oldest `limit` dead letters under this bus's prefix (see the module docstring).
        They stay in the stream; delete them with XDEL or XTRIM once dealt with."""
        check_int(limit, "`limit`", minimum=1)
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

    _label = "redis bus"
    _workers = "consumer"
    _on_drain_timeout = "stopping"

    def _halt(self, sub: RedisSubscription, *, drop: bool) -> None:
        sub._stop(drain=False)  # what it read and did not handle stays pending in the group

    async def _stopped(self, subs: list[RedisSubscription]) -> None:
        await self._forget(subs)  # the retired ones were tidied when they unsubscribed

    async def _release(self) -> None:
        self._draining = False
        if self._given_client is None and self._redis is not None:
            redis, self._redis = self._redis, None
            await redis.aclose()

    async def _send_failure(self, sub: RedisSubscription, failure: Event) -> None:
        await self._add(failure)

    def _name_suffix(self) -> str:
        return f"@{self.consumer}"

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

    async def _add(self, event: Event, *, given: bool = False) -> None:
        data = json.dumps(event.to_dict(), ensure_ascii=False, separators=(",", ":"))
        new_topic = event.topic not in self._registered
        delay = BACKOFF_MIN
        for attempt in range(_PUBLISH_ATTEMPTS):
            try:
                fields: dict[Any, Any] = {"event": data}
                if given or attempt:
                    fields[CHECK] = "1"
                stream = self._stream(event.topic)
                if new_topic:  # registered with its first event, atomically
                    async with self._client().pipeline(transaction=True) as pipe:
                        pipe.sadd(self._key("topics"), event.topic)
                        pipe.xadd(stream, fields, maxlen=self.maxlen, approximate=True)
                        await pipe.execute()
                else:
                    await self._client().xadd(stream, fields, maxlen=self.maxlen, approximate=True)
                break
            except TRANSIENT:
                # A connection dropped (Redis restarting, a killed client): try again. If the
                # first attempt did land, the copy has the same event id and is deduped.
                if attempt == _PUBLISH_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, BACKOFF_MAX)
        if new_topic:
            self._registered.add(event.topic)
            self._topics_version += 1
        self._published += 1
        self._epoch += 1

    async def _drain(self) -> None:
        """Wait until every live consumer found nothing after this bus's last publish."""
        self._draining = True
        while True:
            epoch = self._epoch
            if all(sub._quiet(epoch) for sub in self._subs.values()):
                return
            await asyncio.sleep(0.005)

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
            except (*TRANSIENT, ResponseError) as exc:
                LOG.warning("redis bus: could not tidy subscription %r: %s", sub.name, exc)

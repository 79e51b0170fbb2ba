"""The event bus protocol and its values: `Event`, `EventBus`, `Subscription`, stats.

Every backend implements `EventBus` beside this module: `InProcessEventBus`
(`loomctx.session.bus.inprocess`, asyncio, one process) and `RedisStreamsBus`
(`loomctx.session.bus.redis`, Redis Streams, many processes); `open_bus(url)` in
`loomctx.session.bus` picks one from a URL. What the protocol promises, whatever the backend:

- **Events are values with ids.** `Event.id` is unique per publish unless the publisher passes
  `event_id`; a backend with at-least-once delivery (Redis consumer groups) may deliver an event
  twice, so handlers that must be idempotent dedupe on `event.id`. The in-process bus delivers
  each published event exactly once to each matching subscription; the Redis bus dedupes
  completed deliveries by id per subscription (see its docstring).
- **Payloads are JSON.** A payload is checked when the event is built (`ConfigError` naming the
  offending key) and stored read-only (dicts become read-only mappings, lists become tuples), so
  a handler sees exactly what a serialising backend would give it and cannot change what other
  handlers see. `Event.to_dict()` gives plain dicts and lists back.
- **Patterns** are an exact topic (`"task.added"`), a prefix wildcard (`"task.*"`: every topic
  below `task.`, at any depth, not `task` itself) or `"*"` (every topic).
- **Order per topic per subscription**: the events of one topic reach a subscription in publish
  order. (In process the order is even total per subscription.)
- **Subscription names** are unique on a bus. A durable backend uses the name as the consumer
  group: subscriptions with the same name on several buses (workers) share the events between
  them, each event going to one of them. An unnamed subscription gets a name of its own.
- **Failures are isolated and reported**: an exception in a handler never stops delivery or
  reaches other subscribers; it is counted (`Subscription.failed`), kept (`HandlerFailure`),
  logged on ``loomctx.session.bus`` and published as ``bus.handler_failed`` to every *other*
  matching subscription (not for failures on ``bus.*`` events, so failures cannot cascade).

What differs between backends (backpressure, redelivery, shutdown) is in each backend's
module docstring.
"""

from __future__ import annotations

import logging
import math
import re
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Container, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol, runtime_checkable

from loomctx.errors import ConfigError, MessageFormatError, check_int

__all__ = [
    "HANDLER_FAILED",
    "BusStats",
    "CountedSubscription",
    "Event",
    "EventBus",
    "Handler",
    "HandlerFailure",
    "Subscription",
    "SubscriptionStats",
    "check_pattern",
    "check_subscription",
    "check_topic",
    "failure_event",
    "new_id",
    "pattern_matches",
]

LOG = logging.getLogger("loomctx.session.bus")
"""The one logger of every bus backend (``loomctx.session.bus``)."""

HANDLER_FAILED = "bus.handler_failed"
"""The topic on which the bus reports a handler failure to the other subscribers."""

Handler = Callable[["Event"], Awaitable[None] | None]
"""An event handler: an async callable taking the `Event` (a plain function is called on the
event loop and must not block; see the module docstring)."""

# A topic is dot-separated segments; `*` is reserved for patterns.
_TOPIC = re.compile(r"[^\s.*]+(?:\.[^\s.*]+)*")


def new_id() -> str:
    return uuid.uuid4().hex


def check_topic(topic: object) -> str:
    """`topic` if it is a valid topic, else a `ConfigError` saying what a topic is."""
    if not isinstance(topic, str) or not _TOPIC.fullmatch(topic):
        raise ConfigError(
            f"`topic` must be dot-separated non-empty segments without spaces or `*`, "
            f"such as 'task.added'; got {topic!r}."
        )
    return topic


def check_pattern(pattern: object) -> str:
    """`pattern` if it is an exact topic, ``prefix.*`` or ``*``, else a `ConfigError`."""
    if not isinstance(pattern, str) or not (
        pattern == "*" or _TOPIC.fullmatch(pattern.removesuffix(".*"))
    ):
        raise ConfigError(
            f"`pattern` must be a topic ('task.added'), a prefix wildcard ('task.*') "
            f"or '*'; got {pattern!r}."
        )
    return pattern


def pattern_matches(pattern: str, topic: str) -> bool:
    """Whether an event on `topic` goes to a subscription on `pattern`."""
    if pattern == "*":
        return True
    if pattern.endswith(".*"):
        return topic.startswith(pattern[:-1])
    return topic == pattern


def _freeze(value: Any, path: str, active: set[int]) -> Any:
    """`value` checked to be JSON and made read-only; `path` names it in errors."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        raise ConfigError(
            f"payload key `{path}` holds {value!r}, which JSON cannot represent; "
            "use a finite number, a string or None."
        )
    if isinstance(value, Mapping | list | tuple):
        # A payload that contains itself would recurse forever and cannot be serialised.
        if id(value) in active:
            raise ConfigError(f"payload key `{path}` contains itself; payloads must be trees.")
        active.add(id(value))
        try:
            if isinstance(value, Mapping):
                out: dict[str, Any] = {}
                for key, item in value.items():
                    if not isinstance(key, str):
                        raise ConfigError(
                            f"payload key `{path}` has the key {key!r} of type "
                            f"`{type(key).__name__}`; JSON object keys must be strings."
                        )
                    out[key] = _freeze(item, f"{path}.{key}", active)
                return MappingProxyType(out)
            return tuple(_freeze(item, f"{path}[{i}]", active) for i, item in enumerate(value))
        finally:
            active.discard(id(value))
    raise ConfigError(
        f"payload key `{path}` holds {value!r} of type `{type(value).__name__}`, which is not "
        "JSON-serialisable; use str, int, float, bool, None, lists and dicts with string keys."
    )


def _freeze_payload(payload: object) -> Mapping[str, Any]:
    if not isinstance(payload, Mapping):
        raise ConfigError(
            f"`payload` must be a mapping with string keys, got `{type(payload).__name__}`."
        )
    active: set[int] = {id(payload)}
    out: dict[str, Any] = {}
    for key, item in payload.items():
        if not isinstance(key, str):
            raise ConfigError(
                f"payload has the key {key!r} of type `{type(key).__name__}`; "
                "JSON object keys must be strings."
            )
        out[key] = _freeze(item, key, active)
    return MappingProxyType(out)


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _thaw(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_thaw(item) for item in value]
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """One published event: a topic, a JSON payload, and an id handlers can dedupe on.

    `payload` is validated and stored read-only when the event is built (see the module
    docstring); it does not take part in hashing, so events can be kept in sets.
    """

    id: str = field(default_factory=new_id)
    topic: str
    payload: Mapping[str, Any] = field(default_factory=dict, hash=False)
    source: str = ""
    created_at: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        check_topic(self.topic)
        if not isinstance(self.id, str) or not self.id:
            raise ConfigError(f"`event_id` must be a non-empty string, got {self.id!r}.")
        if not isinstance(self.source, str):
            raise ConfigError(f"`source` must be a string, got {self.source!r}.")
        object.__setattr__(self, "payload", _freeze_payload(self.payload))

    def to_dict(self) -> dict[str, Any]:
        """The event as plain JSON-ready data (dicts and lists), for serialising backends."""
        return {
            "id": self.id,
            "topic": self.topic,
            "payload": _thaw(self.payload),
            "source": self.source,
            "created_at": self.created_at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Event:
        """The event that `to_dict()` produced; `MessageFormatError` if `data` is malformed."""
        if not isinstance(data, Mapping):
            raise MessageFormatError(f"an event must be a mapping, got `{type(data).__name__}`.")
        missing = [key for key in ("id", "topic", "payload", "created_at") if key not in data]
        if missing:
            names = ", ".join(f"`{key}`" for key in missing)
            raise MessageFormatError(f"event data lacks {names}: {dict(data)!r}.")
        created_at = data["created_at"]
        if isinstance(created_at, bool) or not isinstance(created_at, int | float):
            raise MessageFormatError(f"`created_at` must be a number, got {created_at!r}.")
        try:
            return cls(
                id=data["id"],
                topic=data["topic"],
                payload=data["payload"],
                source=data.get("source", ""),
                created_at=float(created_at),
            )
        except ConfigError as exc:
            raise MessageFormatError(f"malformed event data: {exc}") from exc


class HandlerFailure(NamedTuple):
    """A handler failure kept in a bus's `failures`."""

    subscription: str
    event: Event
    error: BaseException


def failure_event(
    failures: deque[HandlerFailure],
    sub: CountedSubscription,
    event: Event,
    exc: BaseException,
    *,
    closed: bool,
) -> Event | None:
    """Keep and log a handler failure; the ``bus.handler_failed`` event to publish about it,
    or None when it must not be published (a failure on a ``bus.*`` event, which could
    cascade, or on a closed bus)."""
    failures.append(HandlerFailure(sub.name, event, exc))
    LOG.error(
        "event bus: handler of subscription %r failed on event %s (%r)",
        sub.name,
        event.id,
        event.topic,
        exc_info=exc,
    )
    if event.topic.startswith("bus.") or closed:
        return None
    try:
        message = str(exc)
    except Exception:  # pragma: no cover - an exception whose __str__ raises
        message = ""
    return Event(
        topic=HANDLER_FAILED,
        source="bus",
        payload={
            "subscription": sub.name,
            "pattern": sub.pattern,
            "event_id": event.id,
            "event_topic": event.topic,
            "error_type": type(exc).__qualname__,
            "error": message,
        },
    )


def check_subscription(
    pattern: object,
    handler: object,
    *,
    name: object,
    max_pending: object,
    default_pending: int,
    taken: Container[str],
    unnamed: Callable[[str], str],
) -> tuple[str, int]:
    """`subscribe`'s arguments checked alike on every backend: the subscription's name (a
    given one, or `unnamed(label of the handler)`) and its mailbox capacity; `ConfigError`
    naming what is wrong otherwise."""
    check_pattern(pattern)
    if not callable(handler):
        raise ConfigError(
            f"`handler` must be a callable taking the event (an `async def` function, or a "
            f"plain function that does not block), got {handler!r}."
        )
    capacity = check_int(
        default_pending if max_pending is None else max_pending, "`max_pending`", minimum=1
    )
    if name is None:
        chosen = unnamed(getattr(handler, "__qualname__", type(handler).__name__))
    elif isinstance(name, str) and name:
        chosen = name
    else:
        raise ConfigError(f"`name` must be a non-empty string, got {name!r}.")
    if chosen in taken:
        raise ConfigError(f"a subscription named {chosen!r} already exists on this bus.")
    return chosen, capacity


@runtime_checkable
class Subscription(Protocol):
    """A handler registered on a bus for a topic pattern, with its delivery counters."""

    @property
    def name(self) -> str:
        """Unique on its bus; a durable backend uses it as the consumer group."""
        ...

    @property
    def pattern(self) -> str:
        """The topic pattern: an exact topic, `prefix.*` or `*`."""
        ...

    @property
    def delivered(self) -> int:
        """Events the handler completed without raising."""
        ...

    @property
    def failed(self) -> int:
        """Events on which the handler raised."""
        ...

    async def unsubscribe(
        self,
        *,
        drain: bool = True,
        timeout: float | None = None,  # noqa: ASYNC109 - expiry drops and cancels, see module doc
    ) -> None:
        """Stop receiving events; deliver what is already queued unless `drain` is false."""
        ...


class CountedSubscription:
    """What every backend's subscription keeps alike: its name, pattern and counters, and
    the `SubscriptionStats` of them (a backend adds `pending` and the delivery itself)."""

    def __init__(self, *, name: str, pattern: str) -> None:
        self._name = name
        self._pattern = pattern
        self._delivered = 0
        self._failed = 0
        self._dropped = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self._name!r}, pattern={self._pattern!r})"

    @property
    def name(self) -> str:
        """Unique on its bus."""
        return self._name

    @property
    def pattern(self) -> str:
        """The topic pattern: an exact topic, `prefix.*` or `*`."""
        return self._pattern

    @property
    def delivered(self) -> int:
        """Events the handler completed without raising."""
        return self._delivered

    @property
    def failed(self) -> int:
        """Events on which the handler raised."""
        return self._failed

    @property
    def dropped(self) -> int:
        """Events accepted for this subscription but never handled here."""
        return self._dropped

    @property
    def pending(self) -> int:
        """Events waiting to be handled (the backend says how it counts them)."""
        raise NotImplementedError

    def _stats(self) -> SubscriptionStats:
        return SubscriptionStats(
            name=self._name,
            pattern=self._pattern,
            delivered=self._delivered,
            failed=self._failed,
            dropped=self._dropped,
            pending=self.pending,
        )


@runtime_checkable
class EventBus(Protocol):
    """Publish/subscribe of `Event`s by topic; see the module docstring for the guarantees."""

    async def publish(
        self,
        topic: str,
        payload: Mapping[str, Any] | None = None,
        *,
        source: str = "",
        event_id: str | None = None,
    ) -> Event:
        """Publish an event on `topic` and return it; may wait for room (backpressure)."""
        ...

    def subscribe(
        self,
        pattern: str,
        handler: Handler,
        *,
        name: str | None = None,
        max_pending: int | None = None,
    ) -> Subscription:
        """Call `handler` with every event whose topic matches `pattern`."""
        ...

    async def close(
        self,
        *,
        drain: bool = True,
        timeout: float | None = None,  # noqa: ASYNC109 - expiry drops and cancels, see module doc
    ) -> None:
        """Stop accepting publishes, deliver what was accepted (if `drain`), stop delivery."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionStats:
    """Counters of one subscription at the time a bus's `stats()` was called."""

    name: str
    pattern: str
    delivered: int
    failed: int
    dropped: int
    pending: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BusStats:
    """Counters of a bus: events published and, per subscription name, their fate.

    `published` counts every event dispatched, including the bus's own `bus.handler_failed`.
    """

    published: int
    subscriptions: Mapping[str, SubscriptionStats]

    @property
    def delivered(self) -> int:
        """Deliveries completed, over all subscriptions."""
        return sum(s.delivered for s in self.subscriptions.values())

    @property
    def failed(self) -> int:
        """Handler failures, over all subscriptions."""
        return sum(s.failed for s in self.subscriptions.values())

    @property
    def dropped(self) -> int:
        """Deliveries dropped (shutdown without drain, timeouts, cancelled publishes)."""
        return sum(s.dropped for s in self.subscriptions.values())

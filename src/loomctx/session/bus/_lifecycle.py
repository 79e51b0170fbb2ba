"""The lifecycle every bus backend shares: subscriptions with a worker, naming, close, stats.

A backend (`InProcessEventBus`, `RedisStreamsBus`) is a `BusLifecycle` over its own
`WorkerSubscription`s. The base keeps the live and retired subscriptions, the handler
failures, the open / closing / closed state and the loop the bus runs on, and implements
what is the same on both: `async with`, `close` (refuse new publishes, drain within the
timeout, stop and join every worker, cancel those still busy), `stats`, taking a new
subscription (`_admit`) and a new event (`_new_event`), unnamed subscriptions' names and
failure reports. A backend says how it drains (`_drain`), stops a
subscription (`_halt`), binds to a loop (`_bind`) and sends a failure event
(`_send_failure`).

The subscription whose worker runs in the current context is `ORIGIN` (tasks a handler
starts inherit it): how a bus tells a publish from its own handler from an outside one.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from types import TracebackType
from typing import Any, ClassVar, Generic, Literal, Self, TypeVar

from loomctx.errors import BusClosedError, ConfigError, check_int
from loomctx.session.bus.base import (
    LOG,
    BusStats,
    CountedSubscription,
    Event,
    HandlerFailure,
    check_subscription,
    failure_event,
    new_id,
)

__all__ = ["ORIGIN", "BusLifecycle", "WorkerSubscription"]


class WorkerSubscription(CountedSubscription):
    """A subscription whose events one worker task handles, on the loop of its `bus`."""

    def __init__(self, *, bus: object, name: str, pattern: str) -> None:
        super().__init__(name=name, pattern=pattern)
        self._owner = bus
        self._worker: asyncio.Task[None] | None = None

    def _start(self) -> None:
        self._worker = asyncio.get_running_loop().create_task(
            self._run(), name=f"loom-bus-worker:{self._name}"
        )

    @abstractmethod
    async def _run(self) -> None:
        """The worker: handle events until stopped (it sets `ORIGIN` to this subscription)."""


ORIGIN: ContextVar[WorkerSubscription | None] = ContextVar("loom_bus_origin", default=None)
"""The subscription whose handler runs in this context, if any."""

S = TypeVar("S", bound=WorkerSubscription)


class BusLifecycle(ABC, Generic[S]):
    """The state and the lifecycle of a bus; see the module docstring."""

    _label: ClassVar[str]  # in log lines: "event bus", "redis bus"
    _workers: ClassVar[str]  # what a worker is called in log lines: "worker", "consumer"
    _on_drain_timeout: ClassVar[str]  # what close does when the drain times out
    _max_pending: int  # a subscription's mailbox unless `subscribe` says (set by the backend)

    def __init__(self, *, failures_kept: int) -> None:
        self.failures: deque[HandlerFailure] = deque(
            maxlen=check_int(failures_kept, "`failures_kept`", minimum=1)
        )
        """The most recent handler failures on this bus, oldest first."""
        self._subs: dict[str, S] = {}
        self._retired: dict[str, S] = {}
        self._state: Literal["open", "closing", "closed"] = "open"
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the bus runs on
        self._closed = asyncio.Event()
        self._published = 0
        self._names = 0

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # After an error in the body, do not wait on handlers that may depend on what failed.
        await self.close(drain=exc_type is None)

    @property
    def closed(self) -> bool:
        """Whether `close()` has been called."""
        return self._state != "open"

    async def close(
        self,
        *,
        drain: bool = True,
        timeout: float | None = None,  # noqa: ASYNC109 - expiry drops and cancels, see module doc
    ) -> None:
        """Stop accepting publishes, deliver (or drop) what was accepted, stop every worker.

        Idempotent: a second call waits for the first to finish. Must not be awaited from a
        handler of this bus (it would wait for itself): `ConfigError`. `timeout` bounds the
        whole close: on expiry what is left is dropped and the workers are cancelled.
        """
        if self._origin() is not None:
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
        try:
            drained = False
            if drain:
                try:
                    async with asyncio.timeout_at(deadline):
                        await self._drain()
                    drained = True
                except TimeoutError:
                    LOG.warning(
                        "%s: drain timed out after %ss; %s",
                        self._label,
                        timeout,
                        self._on_drain_timeout,
                    )
            self._state = "closed"
            subs = list(self._subs.values())
            for sub in subs:
                self._retire(sub)
                self._halt(sub, drop=not drained)
            remaining = None if deadline is None else max(0.0, deadline - loop.time())
            await self._join(subs, remaining)
            await self._stopped(subs)
        except asyncio.CancelledError:
            # Cancelled mid-close: stop everything without waiting, then let it propagate.
            self._state = "closed"
            for sub in [*self._subs.values(), *self._retired.values()]:
                self._retire(sub)
                self._halt(sub, drop=True)
                if sub._worker is not None:
                    sub._worker.cancel()
            raise
        finally:
            self._closed.set()
            await self._release()

    def stats(self) -> BusStats:
        """Counters: events this bus published, and per subscription (live or retired) their
        fate here."""
        subs = {**self._retired, **self._subs}
        return BusStats(
            published=self._published,
            subscriptions={name: sub._stats() for name, sub in sorted(subs.items())},
        )

    # -- what each backend does its own way ------------------------------------------------

    @abstractmethod
    def _bind(self) -> None:
        """Run on the calling event loop (bind to it, or move to it from a closed one)."""

    @abstractmethod
    async def _drain(self) -> None:
        """Return once everything accepted so far has been handled."""

    @abstractmethod
    def _halt(self, sub: S, *, drop: bool) -> None:
        """Tell `sub`'s worker to stop (dropping what it holds if `drop`)."""

    @abstractmethod
    async def _send_failure(self, sub: S, failure: Event) -> None:
        """Publish a ``bus.handler_failed`` event about a failure of `sub`'s handler."""

    def _abandon(self, sub: S) -> None:
        """Before `sub`'s worker is cancelled at a timeout: drop what it still holds."""

    async def _stopped(self, subs: list[S]) -> None:
        """After `close` stopped the workers of `subs`: tidy what they leave behind."""

    async def _release(self) -> None:
        """At the end of `close`: release what the bus holds (a client it made)."""

    def _name_suffix(self) -> str:
        return ""

    # -- shared internals ------------------------------------------------------------------

    def _admit(
        self,
        pattern: str,
        handler: object,
        *,
        name: str | None,
        max_pending: int | None,
        make: Callable[[str, int], S],
    ) -> S:
        """A new live subscription: `subscribe`'s arguments checked (`check_subscription`),
        made by ``make(name, capacity)``. `BusClosedError` once the bus is closing."""
        if self._state != "open":
            raise BusClosedError("the bus is closed; `subscribe` on a new bus.")
        name, capacity = check_subscription(
            pattern,
            handler,
            name=name,
            max_pending=max_pending,
            default_pending=self._max_pending,
            taken=self._subs,
            unnamed=self._unnamed,
        )
        sub = make(name, capacity)
        self._subs[name] = sub
        self._retired.pop(name, None)
        self._routes_changed()
        return sub

    def _new_event(
        self,
        topic: str,
        payload: Mapping[str, Any] | None,
        *,
        source: str,
        event_id: str | None,
        from_handler: bool,
    ) -> Event:
        """The event to publish (checked: `ConfigError` for a bad topic or payload), once the
        bus takes it: while open, or while closing from one of its own handlers (else
        `BusClosedError`); the bus is bound to the running loop."""
        if self._state == "closed" or (self._state == "closing" and not from_handler):
            raise BusClosedError(f"the bus is closed; cannot publish on {topic!r}.")
        self._bind()
        return Event(
            id=new_id() if event_id is None else event_id,
            topic=topic,
            payload={} if payload is None else payload,
            source=source,
        )

    def _origin(self) -> S | None:
        """The subscription of this bus whose handler is running here, if any."""
        sub = ORIGIN.get()
        if sub is not None and sub._owner is self:
            return sub  # type: ignore[return-value]  # a subscription of this bus is an S
        return None

    def _retire(self, sub: S) -> None:
        if self._subs.get(sub.name) is sub:
            del self._subs[sub.name]
            self._retired[sub.name] = sub
            self._routes_changed()

    def _routes_changed(self) -> None:
        """The live subscriptions changed (a backend may cache routes)."""

    def _unnamed(self, label: str) -> str:
        self._names += 1
        return f"{label}#{self._names}{self._name_suffix()}"

    async def _report(self, sub: S, event: Event, exc: BaseException) -> None:
        failure = failure_event(self.failures, sub, event, exc, closed=self._state == "closed")
        if failure is not None:
            await self._send_failure(sub, failure)

    async def _join(self, subs: Iterable[S], grace: float | None) -> None:
        """Wait for the workers of `subs` to stop; after `grace` s, drop what they hold and
        cancel them."""
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
                "%s: %d %s(s) still busy at the timeout; cancelling",
                self._label,
                len(late),
                self._workers,
            )
            for worker in late:
                self._abandon(workers[worker])
                worker.cancel()
            await asyncio.wait(late)
        for worker in workers:
            if not worker.cancelled() and worker.exception() is not None:  # pragma: no cover
                LOG.error("%s: %s crashed", self._label, self._workers, exc_info=worker.exception())

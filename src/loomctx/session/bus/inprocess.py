"""`InProcessEventBus`: the asyncio `EventBus` of one process (protocol: `bus.base`).

How `InProcessEventBus` works, and why:

- One bounded mailbox and one worker task per subscription; the worker runs the handler on one
  event at a time. The bus owns every worker (a long-lived service cannot scope them in a
  `TaskGroup`, because subscriptions come and go over its life); `close()` awaits them all, and
  `async with InProcessEventBus() as bus:` gives the structured scope.
- **Backpressure**: `publish` places the event in every matching mailbox *in one synchronous
  step* (so concurrent publishers cannot interleave differently in different subscriptions),
  queueing it in FIFO order behind the mailbox when the mailbox is full, and then awaits until
  every matching mailbox has admitted it. A slow subscriber therefore slows exactly the publishers
  of topics it matches, and memory stays bounded by `max_pending` per subscription plus one event
  per suspended `publish` call. If `publish` is cancelled while waiting, the event is withdrawn
  from the subscriptions that have not admitted it yet (counted as dropped), so timeouts around
  `publish` shed load.
- **Publishes from handlers never deadlock.** A handler that publishes while a target mailbox is
  full would normally wait for that target's worker; if the target's worker is (transitively)
  waiting on the publishing subscription's worker, or is that worker itself, waiting would
  deadlock. The bus keeps the wait-for graph between workers and, exactly in that case, queues the
  event without waiting (still in order, beyond `max_pending`); otherwise the handler waits like
  any publisher, so backpressure propagates along handler pipelines.
- **Failures are isolated and reported**: an exception in a handler never stops its worker or
  reaches other subscribers. It is counted (`Subscription.failed`), kept in `bus.failures` (the
  last `failures_kept`, as `HandlerFailure` tuples), logged on ``loomctx.session.bus``, and
  published as a `"bus.handler_failed"` event to every *other* matching subscription. Failures
  of handlers on `bus.*` events are counted, kept and logged but not published, so failures
  cannot cascade.
- **Handlers** are async functions (or any callable returning an awaitable). A plain function is
  accepted too and called on the event loop, in order like any handler, with its failures
  isolated the same way; it must not block (do slow work in an `async def` handler, with
  `asyncio.to_thread`).
- **One event loop at a time.** Workers, futures and waits belong to the loop they were made on.
  The bus binds to the loop it is first used from (`publish`, `close`, `unsubscribe`); used from
  another loop after that one has closed (a second `asyncio.run`, a test framework's loop per
  test), it moves there: what the old loop's teardown left queued is delivered by new workers,
  and what was lost with the old loop (an event a handler was running when the loop closed, a
  publisher that was waiting there) is counted as dropped. Used from another loop while the
  first is still open with workers on it (two threads, say), it raises `BusLoopError` at once
  instead of hanging: the bus is not thread-safe, and those workers cannot be moved.
- **Shutdown**: `close(drain=True)` refuses new publishes from outside (`BusClosedError`) and
  delivers everything accepted, including what handlers publish while draining (the consequences
  of accepted events); `close(drain=False)` drops what is queued (counted in `dropped`) and lets
  running handlers finish. `timeout` bounds the whole close: on expiry what is left is dropped and
  workers are cancelled. (`timeout` is a parameter rather than the caller's `asyncio.timeout`
  because expiry is not an abandonment: close still drops, cancels and awaits, then returns.)
"""

from __future__ import annotations

import asyncio
import inspect
from collections import Counter, deque
from collections.abc import Mapping
from typing import Any

from loomctx.errors import BusLoopError, check_int
from loomctx.session.bus._lifecycle import ORIGIN, BusLifecycle, WorkerSubscription
from loomctx.session.bus.base import (
    Event,
    Handler,
)

__all__ = ["InProcessEventBus", "InProcessSubscription"]

# Topics are few in practice, but may embed ids (`session.<id>.ended`): bound the route cache.
_ROUTE_CACHE_SIZE = 4096


class _Pending:
    """An event waiting for room in a full mailbox; `future` is None when nobody waits on it."""

    __slots__ = ("event", "future")

    def __init__(self, event: Event, future: asyncio.Future[None] | None) -> None:
        self.event = event
        self.future = future


class InProcessSubscription(WorkerSubscription):
    """A subscription of `InProcessEventBus`: a bounded mailbox and the worker that drains it."""

    def __init__(
        self, *, bus: InProcessEventBus, name: str, pattern: str, handler: Handler, capacity: int
    ) -> None:
        super().__init__(bus=bus, name=name, pattern=pattern)
        self._bus = bus
        self._prefix = "" if pattern == "*" else pattern[:-1] if pattern.endswith(".*") else None
        self._handler = handler
        self._capacity = capacity
        self._items: deque[Event] = deque()
        self._waiting: deque[_Pending] = deque()
        self._getter: asyncio.Future[None] | None = None
        self._handling = False  # the worker is running the handler on an event
        self._stopping = False
        # Mailboxes this worker's handler is waiting to publish into: the wait-for graph.
        self._blocked_on: Counter[InProcessSubscription] = Counter()

    @property
    def pending(self) -> int:
        """Events queued and not yet started, including those beyond `max_pending`."""
        return len(self._items) + len(self._waiting)

    def matches(self, topic: str) -> bool:
        """Whether an event on `topic` goes to this subscription."""
        if self._prefix is None:
            return topic == self._pattern
        return topic.startswith(self._prefix)

    async def unsubscribe(
        self,
        *,
        drain: bool = True,
        timeout: float | None = None,  # noqa: ASYNC109 - expiry drops and cancels, see module doc
    ) -> None:
        """Stop receiving events; deliver what is already queued unless `drain` is false.

        Called from this subscription's own handler, it returns at once and the worker stops
        after the queue is handled (or dropped).
        """
        self._bus._bind()
        self._bus._retire(self)
        if not drain:
            self._drop_all()
        self._stop()
        await self._bus._join([self], timeout)

    def _has_room(self) -> bool:
        return not self._waiting and len(self._items) < self._capacity

    def _offer(self, event: Event, *, wait: bool) -> _Pending | None:
        """Queue `event`: None if admitted, else its place in line (with a future if `wait`)."""
        self._bus._started(1)
        if self._worker is None:
            self._start()
        if self._has_room():
            self._items.append(event)
            self._wake()
            return None
        future = asyncio.get_running_loop().create_future() if wait else None
        pending = _Pending(event, future)
        self._waiting.append(pending)
        return pending

    def _rehome(self) -> None:
        """Forget what belonged to the event loop the bus ran on before, now closed, and start
        a worker on the running loop for what is still queued."""
        worker = self._worker
        if worker is not None and not worker.done():
            # Its loop closed without cancelling it (`asyncio.run` would have): it never runs
            # again. Keep it referenced, so that collecting it cannot run its `finally` blocks
            # against the state the new worker uses.
            self._bus._abandoned.append(worker)
            if self._handling:  # the event it was running is lost with the loop
                self._dropped += 1
                self._bus._finished(1)
        self._worker = None
        self._getter = None
        self._handling = False
        self._blocked_on.clear()
        # A publisher waiting for room was a task of the old loop: it is gone, as if cancelled.
        orphans = [pending for pending in self._waiting if pending.future is not None]
        for pending in orphans:
            self._waiting.remove(pending)
        self._dropped += len(orphans)
        self._bus._finished(len(orphans))
        if self._items or self._waiting:
            self._start()

    def _admit(self) -> None:
        while self._waiting and len(self._items) < self._capacity:
            pending = self._waiting.popleft()
            if pending.future is not None:
                if pending.future.cancelled():
                    self._dropped += 1
                    self._bus._finished(1)
                    continue
                pending.future.set_result(None)
            self._items.append(pending.event)

    def _withdraw(self, pending: _Pending) -> None:
        try:
            self._waiting.remove(pending)
        except ValueError:  # already admitted, or dropped
            return
        self._dropped += 1
        self._bus._finished(1)

    def _drop_all(self) -> None:
        n = len(self._items) + len(self._waiting)
        self._items.clear()
        for pending in self._waiting:
            if pending.future is not None and not pending.future.done():
                pending.future.set_result(None)
        self._waiting.clear()
        self._dropped += n
        self._bus._finished(n)

    def _wake(self) -> None:
        if self._getter is not None and not self._getter.done():
            self._getter.set_result(None)

    def _stop(self) -> None:
        self._stopping = True
        self._wake()

    async def _next(self) -> Event | None:
        while not self._items:
            if self._stopping:
                return None
            self._getter = asyncio.get_running_loop().create_future()
            try:
                await self._getter
            finally:
                self._getter = None
        event = self._items.popleft()
        self._admit()
        return event

    async def _run(self) -> None:
        ORIGIN.set(self)
        while (event := await self._next()) is not None:
            self._handling = True
            try:
                await self._deliver(event)
            finally:
                self._handling = False
                self._bus._finished(1)

    async def _deliver(self, event: Event) -> None:
        try:
            result = self._handler(event)
            if inspect.isawaitable(result):  # an async handler; a plain function is done
                await result
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                self._dropped += 1
                raise
            # The handler itself raised CancelledError (e.g. it awaited a cancelled future):
            # a failure of the handler, not a shutdown of the worker.
            self._failed += 1
            await self._bus._report(self, event, exc)
        except Exception as exc:
            self._failed += 1
            await self._bus._report(self, event, exc)
        else:
            self._delivered += 1


class InProcessEventBus(BusLifecycle[InProcessSubscription]):
    """The asyncio `EventBus`: bounded mailboxes, one worker per subscription, in one process.

    `max_pending` is the default mailbox size of a subscription (`subscribe(max_pending=...)`
    overrides it); `failures_kept` bounds `failures`. See the module docstring for backpressure,
    handler-originated publishes, failure reporting and shutdown.
    """

    def __init__(self, *, max_pending: int = 1000, failures_kept: int = 100) -> None:
        self._max_pending = check_int(max_pending, "`max_pending`", minimum=1)
        super().__init__(failures_kept=failures_kept)
        self._routes: dict[str, tuple[InProcessSubscription, ...]] = {}
        self._abandoned: list[asyncio.Task[None]] = []  # workers of closed loops, see _rehome
        self._idle = asyncio.Event()
        self._idle.set()
        self._unfinished = 0

    def subscribe(
        self,
        pattern: str,
        handler: Handler,
        *,
        name: str | None = None,
        max_pending: int | None = None,
    ) -> InProcessSubscription:
        """Call `handler` with every event whose topic matches `pattern`, one at a time, in order.

        `name` must be unique among the live subscriptions (default: the handler's name and a
        number); `max_pending` overrides the bus's mailbox size for this subscription. The worker
        starts with the first event, so subscribing needs no running event loop. `handler` is
        an async callable; a plain function is called on the event loop and must not block.
        """
        return self._admit(
            pattern,
            handler,
            name=name,
            max_pending=max_pending,
            make=lambda name, capacity: InProcessSubscription(
                bus=self, name=name, pattern=pattern, handler=handler, capacity=capacity
            ),
        )

    async def publish(
        self,
        topic: str,
        payload: Mapping[str, Any] | None = None,
        *,
        source: str = "",
        event_id: str | None = None,
    ) -> Event:
        """Publish an event and return it once every matching subscription has admitted it.

        `event_id` (default: a fresh uuid4 hex) is delivered as given, so a publisher that
        retries with the same id lets handlers dedupe. Raises `ConfigError` for a bad topic or
        a payload that is not JSON, `BusClosedError` once the bus is closing (except for
        publishes from handlers while it drains), `BusLoopError` from a second event loop
        while the first is open (see the module docstring).
        """
        origin = self._origin()
        event = self._new_event(
            topic, payload, source=source, event_id=event_id, from_handler=origin is not None
        )
        await self._dispatch(event, origin=origin, exclude=None)
        return event

    # -- internals -------------------------------------------------------------------------

    _label = "event bus"
    _workers = "worker"
    _on_drain_timeout = "dropping the rest"

    async def _drain(self) -> None:
        # Handlers may publish while the bus drains; idle means none is running.
        while self._unfinished:
            await self._idle.wait()

    def _halt(self, sub: InProcessSubscription, *, drop: bool) -> None:
        if drop:
            sub._drop_all()
        sub._stop()

    def _abandon(self, sub: InProcessSubscription) -> None:
        sub._drop_all()

    async def _send_failure(self, sub: InProcessSubscription, failure: Event) -> None:
        await self._dispatch(failure, origin=sub, exclude=sub)

    def _bind(self) -> None:
        """Run on the calling event loop: bind to it, or move to it from a closed one (see the
        module docstring); `BusLoopError` while the loop the bus runs on is still open."""
        loop = asyncio.get_running_loop()
        old = self._loop
        if old is loop:
            return
        subs = [*self._subs.values(), *self._retired.values()]
        if old is not None and not old.is_closed():
            busy = [sub.name for sub in subs if sub._worker is not None and not sub._worker.done()]
            if busy:
                raise BusLoopError(
                    f"this event bus runs on another event loop, which is still open, with the "
                    f"workers of {len(busy)} subscription(s) ({busy[0]!r}, ...) on it; an asyncio "
                    "bus serves one loop at a time and is not thread-safe: close the bus there "
                    "(`await bus.close()`) or close that loop first, or give each loop (each "
                    "thread) a bus of its own"
                )
        self._loop = loop
        if old is None:
            return
        # asyncio.Event binds to the loop that first waits on it: make new ones, same state.
        closed, idle = asyncio.Event(), asyncio.Event()
        if self._closed.is_set():
            closed.set()
        if self._idle.is_set():
            idle.set()
        self._closed, self._idle = closed, idle
        for sub in subs:
            sub._rehome()

    def _route(self, topic: str) -> tuple[InProcessSubscription, ...]:
        subs = self._routes.get(topic)
        if subs is None:
            if len(self._routes) >= _ROUTE_CACHE_SIZE:
                self._routes.clear()
            subs = tuple(sub for sub in self._subs.values() if sub.matches(topic))
            self._routes[topic] = subs
        return subs

    def _routes_changed(self) -> None:
        self._routes.clear()

    def _started(self, n: int) -> None:
        self._unfinished += n
        self._idle.clear()

    def _finished(self, n: int) -> None:
        self._unfinished -= n
        if not self._unfinished:
            self._idle.set()

    @staticmethod
    def _waits_on(start: InProcessSubscription, goal: InProcessSubscription) -> bool:
        """Whether `start`'s worker is, or transitively waits on, `goal`'s worker."""
        stack = [start]
        seen: set[InProcessSubscription] = set()
        while stack:
            sub = stack.pop()
            if sub is goal:
                return True
            if sub not in seen:
                seen.add(sub)
                stack.extend(t for t, n in sub._blocked_on.items() if n > 0)
        return False

    async def _dispatch(
        self,
        event: Event,
        *,
        origin: InProcessSubscription | None,
        exclude: InProcessSubscription | None,
    ) -> None:
        self._published += 1
        # Every matching mailbox gets its place in line now, with no await in between: that is
        # what makes the order the same in every subscription.
        waits: list[tuple[InProcessSubscription, _Pending]] = []
        for sub in self._route(event.topic):
            if sub is exclude:
                continue
            # A handler must not wait on a worker that waits on it: that would deadlock.
            wait = origin is None or sub._has_room() or not self._waits_on(sub, origin)
            pending = sub._offer(event, wait=wait)
            if pending is not None and pending.future is not None:
                waits.append((sub, pending))
        if not waits:
            return
        targets = [sub for sub, _ in waits]
        if origin is not None:
            origin._blocked_on.update(targets)
        try:
            for _, pending in waits:
                assert pending.future is not None
                await pending.future
        except asyncio.CancelledError:
            for sub, pending in waits:
                assert pending.future is not None
                if pending.future.cancelled() or not pending.future.done():
                    sub._withdraw(pending)
            raise
        finally:
            if origin is not None:
                origin._blocked_on.subtract(targets)

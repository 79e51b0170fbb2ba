"""`ContextController`: many sessions of one agent, aggregated and distributed (seed 003).

The controller creates, finds and ends `Session`s, all in one `MemoryStore` and on one
`EventBus`. It owns the agent-level memory (`memory`): its L3 holds summaries of the
sessions' important (L2) Tasks, fed whenever an aggregate window needs them across
sessions; its archive (L4) is written by the `L4Persister`, a bus subscriber.

Memory scopes and the promotion triggers of seed 003, as wired here:

| move | trigger | where |
|---|---|---|
| L1 -> L2 | a Task with importance > 0.6 | ``task.added`` subscriber -> `Session.promote_tasks` |
| L2 -> L3 | a window across sessions | `aggregate_context` -> agent `memory` L3 |
| L3 -> L4 | a session ends, or the timer | ``memory.persist`` -> `L4Persister` -> agent archive |

(When Tasks arrive faster than the L1 -> L2 subscriber runs, `Session.add_task` promotes
inline before an add would push an important, unpromoted Task out of L1.)

**Many workers.** Several processes may each run a controller of the same agent on one store
and one shared bus (`RedisStreamsBus`, see `open_bus`). The two triggers subscribe under names
that are the same in every worker, ``promote:{tenant}/{agent}`` and ``l4:{tenant}/{agent}``,
so on a bus with consumer groups each ``task.added`` and ``memory.persist`` event is handled
by *one* worker, not by every worker: the promoting worker reopens the session from the store
if it has not loaded it, and the tiers are read through from the store (`LoomMemory` catches
up when another worker wrote). Both handlers are idempotent, as at-least-once delivery needs.

Isolation (DESIGN.md invariant 6): each session reads exactly its own namespace, and no
namespace of the layout lies below another (`loomctx.session._layout`), so a Task reaches
another session's window only through `distribute_task`, `broadcast` or
`distribute_filtered`. The agent-level memory is read by nobody's session window, and reads
no session: the sessions' Tasks reach it only by persistence (L4) and aggregation (L3).

Methods that publish on the bus are coroutines: `create_session`, `end_session`,
`distribute_task`, `broadcast`, `distribute_filtered`, `aggregate_context`, `persist`,
`start`, `close`. `get_session` and `session_ids` only read the store. Use the controller
as ``async with ContextController(store) as controller:`` (or call `start` and `close`):
`start` requests the archiving that a crash interrupted and starts the persistence timer.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Self

from loomctx.context.block import BuildContext
from loomctx.context.orchestrator import ContextWindow
from loomctx.errors import ConfigError
from loomctx.memory.core import LoomMemory
from loomctx.memory.task import MemoryTier, Task
from loomctx.session import topics
from loomctx.session._layout import (
    DEFAULT_AGENT,
    DEFAULT_TENANT,
    SESSION_KIND,
    SessionLayout,
    check_id,
)
from loomctx.session.aggregate import SessionView, SplitStrategy, aggregate
from loomctx.session.bus import Event, EventBus, InProcessEventBus, Subscription
from loomctx.session.options import SessionOptions
from loomctx.session.persist import L4Persister
from loomctx.session.session import Session, SessionState
from loomctx.stores.base import Get, MemoryStore, Put, Record, Scan
from loomctx.tokens import TiktokenCounter, TokenCounter

__all__ = ["ContextController"]


class ContextController:
    """Sessions of one agent (`agent_id`, within `tenant_id`) in `store`, events on `bus`.

    Without a `store`, sessions live in an in-memory SQLite database (nothing survives the
    process); without a `bus`, the controller makes an `InProcessEventBus` and closes it in
    `close`. `persist_interval` (seconds) starts the L3 -> L4 timer: every interval, the
    sessions that recorded Tasks since are archived. `counter` counts every window's tokens
    (default: a `TiktokenCounter` with room in its cache for many sessions' texts).
    """

    def __init__(
        self,
        store: MemoryStore | None = None,
        bus: EventBus | None = None,
        *,
        agent_id: str = DEFAULT_AGENT,
        tenant_id: str = DEFAULT_TENANT,
        counter: TokenCounter | None = None,
        persist_interval: float | None = None,
    ) -> None:
        self.layout = SessionLayout(tenant_id, agent_id)
        if persist_interval is not None and not (
            isinstance(persist_interval, int | float) and persist_interval > 0
        ):
            raise ConfigError(
                f"`persist_interval` must be a number of seconds > 0 (or None for no timer), "
                f"got {persist_interval!r}"
            )
        self.persist_interval = persist_interval
        self._owns_store = store is None
        if store is None:
            from loomctx.stores.sqlite import SQLiteStore

            store = SQLiteStore(":memory:")
        self._owns_bus = bus is None
        self.store: MemoryStore = store
        self.bus: EventBus = InProcessEventBus() if bus is None else bus
        # One counter serves every session's windows: its count cache is shared by them all.
        self.counter = counter or TiktokenCounter()
        self.memory = LoomMemory(
            agent_id, store=store, namespace=self.layout.agent, counter=self.counter, embedder=None
        )
        """The agent-level memory: L3 fed by aggregation, the L4 archive by persistence."""
        self.persister = L4Persister(
            store=store, archive=self.memory, layout=self.layout, bus=self.bus
        )
        """The L4 persistence subscriber (on ``memory.persist``)."""
        label = f"{tenant_id}/{agent_id}"
        self._subscriptions: list[Subscription] = [
            self.bus.subscribe(topics.MEMORY_PERSIST, self.persister, name=f"l4:{label}"),
            self.bus.subscribe(topics.TASK_ADDED, self._promote, name=f"promote:{label}"),
        ]
        self._sessions: dict[str, Session] = {}
        self._timer: asyncio.Task[None] | None = None
        self._state = "new"

    def __repr__(self) -> str:
        return (
            f"ContextController(agent={self.layout.agent_id!r}, "
            f"loaded_sessions={len(self._sessions)}, state={self._state!r})"
        )

    # --- lifecycle of the controller ------------------------------------------------------

    async def start(self) -> None:
        """Request the archiving of ended sessions whose archiving a crash interrupted, and
        start the persistence timer (if `persist_interval`). Idempotent."""
        self._require_open()
        if self._state == "started":
            return
        self._state = "started"
        for session_id in self.persister.unfinished():
            await self._request_persist(session_id, "session_ended")
        if self.persist_interval is not None:
            self._timer = asyncio.create_task(self._tick(self.persist_interval))

    async def close(self) -> None:
        """Stop the timer, let the controller's subscribers finish what is queued, close the
        bus and store if the controller made them. Idempotent."""
        if self._state == "closed":
            return
        self._state = "closed"
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
        for sub in self._subscriptions:
            await sub.unsubscribe()
        if self._owns_bus:
            await self.bus.close()
        for session in self._sessions.values():
            session.memory.close()
        self.memory.close()
        if self._owns_store:
            self.store.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # --- sessions -------------------------------------------------------------------------

    async def create_session(self, session_id: str | None = None, **options: object) -> Session:
        """A new ACTIVE session (coroutine), stored before ``session.created`` is published.

        `options` are those of `SessionOptions` (an unknown one is a `ConfigError` naming
        the accepted ones); `session_id` defaults to a fresh uuid4 hex.
        """
        self._require_open()
        session_id = uuid.uuid4().hex if session_id is None else check_id(session_id, "session_id")
        settings = SessionOptions.from_options(options)
        if session_id in self._sessions or self._stored(session_id) is not None:
            raise ConfigError(
                f"session {session_id!r} already exists; reopen it with `get_session` or "
                "choose another `session_id`"
            )
        session = Session(
            session_id,
            options=settings,
            store=self.store,
            bus=self.bus,
            layout=self.layout,
            counter=self.counter,
        )
        self.store.batch([Put(record=session._record())])
        self._sessions[session_id] = session
        await self.bus.publish(
            topics.SESSION_CREATED,
            {"session_id": session_id, "state": session.state.value},
            source="controller",
        )
        return session

    def get_session(self, session_id: str) -> Session:
        """The session `session_id`, reopened from the store if this process has not loaded
        it yet (same state, tiers, queue and options; add its `sources` again).

        A session loaded earlier is the same object, with its state (and, while paused, its
        queue) read again from the store: another worker may have paused, resumed or ended
        it. Get it per request, rather than keeping it across requests, when sessions move
        between workers."""
        self._require_open()
        record = self._stored(check_id(session_id, "session_id"))
        session = self._sessions.get(session_id)
        if session is not None:
            if record is not None:
                session._sync(record)
            return session
        if record is None:
            raise ConfigError(
                f"no session {session_id!r} for agent {self.layout.agent_id!r}; create it "
                "with `create_session`, or list the existing ones with `session_ids()`"
            )
        data = record.data
        session = Session(
            session_id,
            options=SessionOptions.from_dict(data["options"]),
            store=self.store,
            bus=self.bus,
            layout=self.layout,
            counter=self.counter,
            state=SessionState(data["state"]),
            created_at=float(data["created_at"]),
        )
        self._sessions[session_id] = session
        return session

    def session_ids(self, state: SessionState | str | None = None) -> list[str]:
        """The ids of every stored session (in `state`, if given), in order of creation."""
        self._require_open()
        where = {} if state is None else {"state": SessionState(state).value}
        records: list[Record] = self.store.batch(
            [Scan(prefix=self.layout.sessions, kind=SESSION_KIND, where=where, exact=True)]
        )[0]
        records.sort(key=lambda r: (r.data["created_at"], r.data["session_id"]))
        return [r.data["session_id"] for r in records]

    async def end_session(self, session_id: str) -> None:
        """End the session (coroutine); see `Session.end`."""
        await self.get_session(session_id).end()

    # --- distribution ---------------------------------------------------------------------

    async def distribute_task(self, task: Task, session_ids: Iterable[str]) -> list[str]:
        """Add `task` to each session of `session_ids` (coroutine); returns their ids.

        Every id is checked first (it exists and has not ended), so a bad id adds the task
        nowhere. Paused sessions queue it. When this returns, it is stored everywhere.
        """
        if not isinstance(task, Task):
            raise ConfigError(f"`distribute_task` takes a Task, got {type(task).__name__}")
        if isinstance(session_ids, str):
            raise ConfigError(
                f"`session_ids` must be a list of session ids, got the string {session_ids!r}; "
                "wrap one id in a list"
            )
        sessions = [self.get_session(sid) for sid in dict.fromkeys(session_ids)]
        self._require_not_ended(sessions, "distribute a Task to")
        for session in sessions:
            await session.add_task(task)
        return [s.id for s in sessions]

    async def broadcast(self, task: Task) -> list[str]:
        """Add `task` to every session that has not ended (coroutine); returns their ids."""
        return await self.distribute_filtered(task, lambda session: True)

    async def distribute_filtered(
        self, task: Task, predicate: Callable[[Session], bool]
    ) -> list[str]:
        """Add `task` to every session not ended for which `predicate(session)` is true
        (coroutine); returns their ids. Sessions of the store are reopened to be asked."""
        if not callable(predicate):
            raise ConfigError(f"`predicate` must be a function Session -> bool, got {predicate!r}")
        chosen = [
            sid
            for sid in self.session_ids()
            if (s := self.get_session(sid)).state is not SessionState.ENDED and predicate(s)
        ]
        return await self.distribute_task(task, chosen)

    # --- aggregation ----------------------------------------------------------------------

    async def aggregate_context(
        self,
        session_ids: Sequence[str],
        query: str,
        budget: int,
        *,
        strategy: SplitStrategy = "equal",
    ) -> ContextWindow:
        """One window of at most `budget` tokens for `query` from several sessions
        (coroutine): each builds its window for the query, then they are merged,
        deduplicated, split by `strategy` (``"equal"``, ``"priority"``, ``"relevance"``),
        ranked and trimmed (see `loomctx.session.aggregate`).

        Their L2 Tasks are summarized into the agent-level L3 (``task.promoted``), and
        ``context.assembled`` is published with each session's share.
        """
        if isinstance(session_ids, str):
            raise ConfigError(
                f"`session_ids` must be a list of session ids, got the string {session_ids!r}"
            )
        sessions = [self.get_session(sid) for sid in dict.fromkeys(session_ids)]
        if not sessions:
            raise ConfigError("`session_ids` is empty; name at least one session to aggregate")
        self._require_not_ended(sessions, "aggregate")
        async with asyncio.TaskGroup() as group:
            builds = [group.create_task(s.view_context(query)) for s in sessions]
        views = [
            SessionView(
                session_id=s.id,
                priority=s.priority,
                window=b.result(),
                source_priorities={src.name: src.priority for src in s.orchestrator.sources},
            )
            for s, b in zip(sessions, builds, strict=True)
        ]
        ctx = BuildContext(
            session_id="aggregate", agent_id=self.layout.agent_id, tenant_id=self.layout.tenant_id
        )
        window, shares = await aggregate(
            views, query, budget, strategy=strategy, counter=self.counter, ctx=ctx
        )
        await self._summarize_into_l3(sessions)
        await self.bus.publish(
            topics.CONTEXT_ASSEMBLED,
            {
                "session_ids": [s.id for s in sessions],
                "query": query,
                "strategy": strategy,
                "shares": shares,
                "report": window.report.summary(),
            },
            source="controller",
        )
        return window

    async def _summarize_into_l3(self, sessions: Sequence[Session]) -> None:
        """Seed 003's L2 -> L3: the sessions' L2 Tasks not yet in the agent's L3."""
        in_l3 = {s.task_id for s in self.memory.get_l3_summaries()}
        for session in sessions:
            fresh = [t for t in session.memory.get_l2_tasks() if t.task_id not in in_l3]
            if not fresh:
                continue
            self.memory.add_tasks(fresh, tier=MemoryTier.L3)
            in_l3.update(t.task_id for t in fresh)
            await self.bus.publish(
                topics.TASK_PROMOTED,
                {
                    "session_id": session.id,
                    "task_ids": [t.task_id for t in fresh],
                    "from_tier": MemoryTier.L2.value,
                    "to_tier": MemoryTier.L3.value,
                },
                source="controller",
            )

    # --- persistence and promotion triggers -----------------------------------------------

    async def persist(self, session_ids: Iterable[str] | None = None) -> list[str]:
        """Request L4 persistence (coroutine) of `session_ids`, or of every loaded session
        that recorded Tasks since its last request; returns the ids requested."""
        return await self._persist_due(session_ids, "requested")

    async def _persist_due(self, session_ids: Iterable[str] | None, reason: str) -> list[str]:
        if session_ids is None:
            chosen = [s for s in self._sessions.values() if s.needs_persist]
        else:
            chosen = [self.get_session(sid) for sid in dict.fromkeys(session_ids)]
        for session in chosen:
            session.needs_persist = False
            await self._request_persist(session.id, reason)
        return [s.id for s in chosen]

    async def _request_persist(self, session_id: str, reason: str) -> None:
        await self.bus.publish(
            topics.MEMORY_PERSIST, {"session_id": session_id, "reason": reason}, source="controller"
        )

    async def _tick(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            await self._persist_due(None, "timer")

    async def _promote(self, event: Event) -> None:
        """The importance trigger: promote a session that holds an important Task not yet in
        L2 (once for all the Tasks that arrived before this event is handled).

        It runs in whichever worker's controller the bus hands the event to (one per event
        with a shared bus, see the module docstring), so it reopens the session from the store
        if this process has not loaded it, and judges from the store: its stored state, and
        its tiers (which `LoomMemory` re-reads when another worker changed them).
        """
        session_id = event.payload.get("session_id")
        if self._state == "closed" or not isinstance(session_id, str):
            return
        stored = self._stored_or_none(session_id)
        if stored is None or stored.data["state"] != SessionState.ACTIVE.value:
            return  # another agent's session on a shared bus, or no longer active
        session = self.get_session(session_id)
        if session.state is SessionState.ACTIVE and session.refresh_promotion_need():
            await session.promote_tasks()

    # --- internals ------------------------------------------------------------------------

    def _stored(self, session_id: str) -> Record | None:
        found: Record | None = self.store.batch(
            [Get(namespace=self.layout.sessions, key=self.layout.session_key(session_id))]
        )[0]
        return found

    def _stored_or_none(self, session_id: str) -> Record | None:
        try:
            return self._stored(check_id(session_id, "session_id"))
        except ConfigError:
            return None  # not an id of ours

    def _require_open(self) -> None:
        if self._state == "closed":
            raise ConfigError("the ContextController is closed; open a new one on the store")

    @staticmethod
    def _require_not_ended(sessions: Sequence[Session], what: str) -> None:
        ended = [s.id for s in sessions if s.state is SessionState.ENDED]
        if ended:
            raise ConfigError(
                f"cannot {what} ended session(s) {', '.join(map(repr, ended))}: an ended "
                "session takes no Tasks and builds no windows; leave them out"
            )

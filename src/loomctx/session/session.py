"""`Session`: one conversation's Task flow, lifecycle, memory and context window (seed 003).

A session owns a `LoomMemory` (L1 recent, L2 important, L3 summaries, L4 archive, in its
own store namespace) and a `ContextOrchestrator` that builds its windows by the one window
recipe (`loomctx.context.recipe`), as an `Agent` and the proxy do: the system prompt, the
conversation as history, L2 and retrieval over the archive as the dynamic tail, the extra
sources of its options (a knowledge base, tools), and the user's turn.

A conversation's call is `turn(prompt)`: it records the user's turn as a Task, then builds
the window for it, as an `Agent`'s run and the proxy do, so that the three send the same
window for the same conversation; `reply(text)` records the model's answer. `build_context`
builds a window for a query without recording it (the query is the user's turn of that
window only), and `view_context` a one-off view (what `ContextController.aggregate_context`
merges).

Lifecycle::

    ACTIVE --pause()--> PAUSED --resume()--> ACTIVE
    ACTIVE --end()----> ENDED <---end()----- PAUSED

Any other transition is a `ConfigError` naming the state and the allowed calls. A Task added
to a PAUSED session is *queued*: stored at once (so it is acknowledged like any other) and
recorded into memory, in order, when the session resumes or ends; a paused session's window
is built from what it held when it was paused. A Task added to an ENDED session, or a window
asked of one, is a `ConfigError`: its content has been archived at the agent level.

Every state change is stored before the call returns and before its event is published, so
a session reopened by a new process (`ContextController.get_session`) has the same state,
tiers, queue and options. Use a session from one event loop; its methods do their store
writes without awaiting in between, so concurrent calls cannot interleave inside one.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from enum import StrEnum
from typing import Any, Final

from loomctx.context.block import BuildContext, ContextSource
from loomctx.context.budget import BudgetManager
from loomctx.context.orchestrator import ContextWindow, LayoutState
from loomctx.context.recipe import (
    WindowSettings,
    memory_sources,
    window_orchestrator,
    window_sources,
)
from loomctx.context.sources import TurnSource
from loomctx.errors import ConfigError
from loomctx.memory.core import LoomMemory, same_view
from loomctx.memory.task import (
    ASSISTANT_MESSAGE,
    USER_MESSAGE,
    MemoryTier,
    Task,
    importance_of,
    message_task,
)
from loomctx.messages import check_text
from loomctx.session import topics
from loomctx.session._layout import QUEUED_KIND, SESSION_KIND, SessionLayout
from loomctx.session.bus import EventBus
from loomctx.session.options import SessionOptions
from loomctx.stores.base import Delete, MemoryStore, Op, Put, Record, Scan
from loomctx.tokens import TokenCounter

__all__ = ["Session", "SessionState"]

_VIEW: Final = WindowSettings(cache_policy=replace(WindowSettings().cache_policy, fill_first=True))
"""A one-off view's window: history fills its room on the first (and only) build."""


class SessionState(StrEnum):
    """Where a session is in its life."""

    ACTIVE = "active"
    PAUSED = "paused"
    ENDED = "ended"


# The lifecycle: from each state, the calls allowed and where they lead.
_NEXT: Final[dict[SessionState, dict[str, SessionState]]] = {
    SessionState.ACTIVE: {"pause": SessionState.PAUSED, "end": SessionState.ENDED},
    SessionState.PAUSED: {"resume": SessionState.ACTIVE, "end": SessionState.ENDED},
    SessionState.ENDED: {},
}


class Session:
    """One session: its Tasks, lifecycle, memory and context window.

    Sessions are made and reopened by `ContextController` (`create_session`,
    `get_session`), which gives them their store namespace and bus; see the module
    docstring for the lifecycle. Coroutines (they write to the store and publish on the
    bus): `turn`, `reply`, `add_task`, `build_context`, `view_context`, `promote_tasks`,
    `pause`, `resume`, `end`.

    `budget_manager` (default: the option `budget_manager`, else `BudgetManager()`) splits
    each window's budget; `budget_manager` is also an attribute, to set on a reopened
    session (`ContextController.get_session`), whose options do not keep it. With an
    `AdaptiveBudgetManager`, pass the task's progress to `turn` or `build_context` (``ctx=
    BuildContext(progress=0.4)``) or its phase; without either, the phase follows the
    ``turn_index`` of the context given.
    """

    def __init__(
        self,
        session_id: str,
        *,
        options: SessionOptions,
        store: MemoryStore,
        bus: EventBus,
        layout: SessionLayout,
        counter: TokenCounter,
        state: SessionState = SessionState.ACTIVE,
        created_at: float | None = None,
        budget_manager: BudgetManager | None = None,
    ) -> None:
        self.id: Final = session_id
        """The session's id, unique within its agent."""
        self.options: Final = options
        """The options it was created with."""
        self.created_at: Final = time.time() if created_at is None else created_at
        """When it was created (seconds since the epoch)."""
        self._state = SessionState(state)
        self._store = store
        self._bus = bus
        self._layout = layout
        self.memory: Final = LoomMemory(
            session_id,
            store=store,
            namespace=layout.memory(session_id),
            counter=counter,
            # Lexical, as before the shipped embedder became LoomMemory's default: a
            # controller may hold thousands of sessions, each would run an embedding thread.
            embedder=None,
            tiers=options.tiers,
        )
        """Its tiered memory, in its own namespace of the store."""
        self.orchestrator: Final = window_orchestrator(
            window_sources(
                options.system_prompt,
                memory=memory_sources(self.memory),
                extra=options.sources,
                # A session's exchange is recorded as Tasks (history), so its run's exchange
                # stays empty; it is there so that the budget splits as the recipe's does.
                turn=TurnSource(),
            ),
            counter=counter,
            window=options.model_context_window,
            output_reserve_ratio=options.output_reserve_ratio,
            max_output_tokens=options.max_output_tokens,
            budget_manager=budget_manager or options.budget_manager,
        )
        """What builds its windows (the one window recipe, `loomctx.context.recipe`);
        `add_source` adds to it."""
        self._queue = self._stored_queue()
        self.needs_promotion = False
        """Whether L1 holds a Task above the promotion threshold that is not in L2 yet."""
        self.refresh_promotion_need()
        self.needs_persist = False
        """Whether Tasks arrived since L4 persistence was last requested for it."""

    @property
    def budget_manager(self) -> BudgetManager:
        """What splits the budget of its windows (settable)."""
        return self.orchestrator.budget_manager

    @budget_manager.setter
    def budget_manager(self, manager: BudgetManager) -> None:
        if not isinstance(manager, BudgetManager):
            raise ConfigError(
                f"`budget_manager` must be a BudgetManager, got {type(manager).__name__}"
            )
        self.orchestrator.budget_manager = manager

    def __repr__(self) -> str:
        return f"Session({self.id!r}, state={self._state.value!r}, memory={self.memory!r})"

    @property
    def state(self) -> SessionState:
        """ACTIVE, PAUSED or ENDED."""
        return self._state

    @property
    def priority(self) -> float:
        """Its weight when an aggregate window splits by priority (option `priority`)."""
        return self.options.priority

    @property
    def metadata(self) -> dict[str, Any]:
        """Its option `metadata` (a copy)."""
        return dict(self.options.metadata)

    @property
    def queued(self) -> tuple[Task, ...]:
        """Tasks accepted while paused, to be recorded when it resumes or ends."""
        return tuple(self._queue)

    def add_source(self, source: ContextSource) -> None:
        """Add a context source to its windows (after the built-in ones, before the user's
        turn in the layout's priority; the layout itself is fixed by section)."""
        self.orchestrator.add_source(source)

    # --- Tasks ---------------------------------------------------------------------------

    async def add_task(self, task: Task) -> None:
        """Record `task` (coroutine): in memory if ACTIVE, in the queue if PAUSED.

        The task is in the store when this returns (an embedded store commits before
        `batch` returns), then ``task.added`` or ``task.queued`` is published.
        """
        if not isinstance(task, Task):
            raise ConfigError(f"`add_task` takes a Task, got {type(task).__name__}")
        self._require_open("add a Task to")
        if self._state is SessionState.PAUSED:
            self._store.batch([Put(record=self._queued_record(task))])
            self._queue = [t for t in self._queue if t.task_id != task.task_id] + [task]
            await self._publish(topics.TASK_QUEUED, task_id=task.task_id)
            return
        # The bus trigger promotes soon after; if Tasks arrive faster, promote here before
        # this add pushes an important, unpromoted Task out of L1 (it would miss L2).
        promoted = self._promote() if self.needs_promotion and self._l1_full() else []
        self.memory.add_task(task)
        await self._announce_promoted(promoted)
        await self._announce([task])

    def refresh_promotion_need(self) -> bool:
        """Work `needs_promotion` out from the tiers as stored (another worker may have added
        or promoted Tasks since this object last looked), and return it."""
        l2 = {t.task_id for t in self.memory.get_l2_tasks()}
        self.needs_promotion = any(
            importance_of(t) > self.memory.promote_threshold and t.task_id not in l2
            for t in self.memory.get_l1_tasks(self.memory.max_l1_size)
        )
        return self.needs_promotion

    async def promote_tasks(self) -> list[str]:
        """Move L1 Tasks with importance above 0.6 into L2 (coroutine; seed 003's L1 -> L2)
        and publish ``task.promoted``. Returns the ids promoted, most important first."""
        self._require_open("promote the Tasks of")
        promoted = self._promote()
        await self._announce_promoted(promoted)
        return promoted

    async def turn(self, prompt: str, *, ctx: BuildContext | None = None) -> ContextWindow:
        """Record `prompt` as the user's turn, then build the window for it (coroutine): a
        call of the conversation, as an `Agent`'s run and the proxy make theirs, so that the
        three send the same window for the same conversation.

        The turn is a Task (``user_message``, from ``"user"`` to the session's agent) added
        as `add_task` adds one (queued while PAUSED); it carries a run id (``ctx.metadata
        ["run_id"]`` if given, else a new one), and the build leaves that run's Tasks out of
        history and retrieval: the prompt is the window's user turn, once. Record the
        model's answer with `reply`. Publishes what `add_task` and `build_context` do."""
        if not isinstance(prompt, str) or not prompt.strip():
            raise ConfigError(
                f"`turn` takes the user's prompt, a non-blank string, got {prompt!r:.60}"
            )
        check_text(prompt, "`prompt`")
        self._require_open("take a turn in")
        ctx = ctx or BuildContext()
        run_id = str(ctx.metadata.get("run_id") or uuid.uuid4().hex)
        await self.add_task(self._message(USER_MESSAGE, prompt, run_id))
        return await self.build_context(
            prompt, ctx=replace(ctx, metadata={**ctx.metadata, "run_id": run_id})
        )

    async def reply(self, text: str) -> Task:
        """Record `text`, the model's answer to the last `turn`, as the session agent's
        message (coroutine; added as `add_task` adds a Task), and return its Task."""
        if not isinstance(text, str):
            raise ConfigError(f"`reply` takes the model's answer as a string, got {text!r:.60}")
        check_text(text, "`text`")
        task = self._message(ASSISTANT_MESSAGE, text, None)
        await self.add_task(task)
        return task

    def _message(self, action: str, content: str, run_id: str | None) -> Task:
        """A user's message to the session's agent, or the agent's reply to the user."""
        agent = self._layout.agent_id
        metadata = {"agent": agent} if run_id is None else {"run_id": run_id, "agent": agent}
        return message_task(action, content, agent=agent, metadata=metadata)

    async def view_context(self, query: str) -> ContextWindow:
        """The window for `query` as a one-off view (coroutine; what `aggregate_context`
        merges): built from the same sources, its history filling its room, and without
        moving where the session's own windows keep their history (a view is not a call of
        the conversation, so there is no cache to keep for it)."""
        self._require_open("build a view for")
        one_off = window_orchestrator(
            self.orchestrator.sources,
            counter=self.orchestrator.token_counter,
            window=self.orchestrator.model_context_window,
            max_output_tokens=self.orchestrator.output_reserve,
            budget_manager=self.orchestrator.budget_manager,
            settings=_VIEW,
            state=LayoutState(),
        )
        ctx = BuildContext(
            session_id=self.id, agent_id=self._layout.agent_id, tenant_id=self._layout.tenant_id
        )
        with same_view():
            window = await one_off.build(query, ctx=ctx)
        await self._assembled(query, window)
        return window

    async def build_context(self, query: str, *, ctx: BuildContext | None = None) -> ContextWindow:
        """The window for `query` (coroutine): system prompt once, extra sources, memory,
        the query last, as the user's turn. The query is not recorded (`turn` records it,
        then builds): retrieval searches the memory as it is. Publishes
        ``context.assembled`` with the report's summary."""
        self._require_open("build a window for")
        ctx = replace(
            ctx or BuildContext(),
            session_id=self.id,
            agent_id=self._layout.agent_id,
            tenant_id=self._layout.tenant_id,
        )
        with same_view():  # one read of the store's version for the whole build
            window = await self.orchestrator.build(query, ctx=ctx)
        await self._assembled(query, window)
        return window

    async def _assembled(self, query: str, window: ContextWindow) -> None:
        """Publish ``context.assembled`` with the window's report summary."""
        await self._bus.publish(
            topics.CONTEXT_ASSEMBLED,
            {
                "session_ids": [self.id],
                "query": query,
                "strategy": None,
                "report": window.report.summary(),
            },
            source=self._source,
        )

    # --- lifecycle -----------------------------------------------------------------------

    async def pause(self) -> None:
        """ACTIVE -> PAUSED (coroutine): later Tasks are queued until `resume`."""
        self._move("pause")
        await self._publish(topics.SESSION_PAUSED, state=self._state.value)

    async def resume(self) -> None:
        """PAUSED -> ACTIVE (coroutine): the queued Tasks are recorded, in order, first."""
        applied, promoted = self._drain_queue("resume")
        await self._publish(topics.SESSION_RESUMED, state=self._state.value)
        await self._announce(applied)
        await self._announce_promoted(promoted)

    async def end(self) -> None:
        """ACTIVE or PAUSED -> ENDED (coroutine): records any queued Tasks, promotes, stores
        the state, then publishes ``session.ended`` and ``memory.persist``: the
        `L4Persister` archives the session's content at the agent level."""
        applied, promoted = self._drain_queue("end")
        await self._publish(topics.SESSION_ENDED, state=self._state.value)
        await self._announce(applied)
        await self._announce_promoted(promoted)
        await self._publish(topics.MEMORY_PERSIST, reason="session_ended")

    # --- internals -----------------------------------------------------------------------

    @property
    def _source(self) -> str:
        return f"session:{self.id}"

    def _require_open(self, what: str) -> None:
        if self._state is SessionState.ENDED:
            raise ConfigError(
                f"cannot {what} session {self.id!r}: it has ended and its content is archived "
                "in the controller's agent memory; create a new session to continue"
            )

    def _next(self, call: str) -> SessionState:
        """The state `call` leads to from the current one; `ConfigError` if not allowed."""
        allowed = _NEXT[self._state]
        if call not in allowed:
            calls = " or ".join(f"`{c}()`" for c in allowed) or "none (ended is final)"
            raise ConfigError(
                f"cannot `{call}()` session {self.id!r}: it is {self._state.value}, and from "
                f"{self._state.value} the allowed calls are {calls}"
            )
        return allowed[call]

    def _move(self, call: str, ops: Sequence[Op] = ()) -> None:
        """Store the state `call` leads to (with `ops`, in one batch), then take it."""
        to = self._next(call)
        self._store.batch([*ops, Put(record=self._record(to))])
        self._state = to

    def _drain_queue(self, call: str) -> tuple[list[Task], list[str]]:
        """Record the queued Tasks into memory, promoting as they go, then make the move
        `call` and forget the queue; returns the Tasks recorded and the ids promoted.

        No more than L1 holds at a time, each batch followed by a promotion, so no important
        Task leaves L1 before it had its chance at L2. Recording comes before the move: a
        crash in between leaves the queue to be recorded again, which updates the same Tasks
        in place (recording is idempotent by task id)."""
        self._next(call)
        applied, self._queue = self._queue, []
        promoted = self._promote()
        size = self.memory.max_l1_size
        for start in range(0, len(applied), size):
            self.memory.add_tasks(applied[start : start + size])
            promoted += self._promote()
        queue = self._layout.queue(self.id)
        self._move(call, [Delete(namespace=queue, key=t.task_id) for t in applied])
        return applied, promoted

    def _promote(self) -> list[str]:
        """`LoomMemory.promote_tasks`, and the ids it moved into L2."""
        before = {t.task_id for t in self.memory.get_l2_tasks()}
        self.memory.promote_tasks()
        self.needs_promotion = False
        return [t.task_id for t in self.memory.get_l2_tasks() if t.task_id not in before]

    def _l1_full(self) -> bool:
        return len(self.memory.get_l1_tasks(self.memory.max_l1_size)) >= self.memory.max_l1_size

    async def _announce(self, tasks: Sequence[Task]) -> None:
        """Publish ``task.added`` for Tasks now in memory; mark what the triggers act on."""
        for task in tasks:
            importance = importance_of(task)
            self.needs_persist = True
            if importance > self.memory.promote_threshold and self._state is SessionState.ACTIVE:
                self.needs_promotion = True
            await self._publish(topics.TASK_ADDED, task_id=task.task_id, importance=importance)

    async def _announce_promoted(self, task_ids: list[str]) -> None:
        if task_ids:
            await self._publish(
                topics.TASK_PROMOTED,
                task_ids=task_ids,
                from_tier=MemoryTier.L1.value,
                to_tier=MemoryTier.L2.value,
            )

    async def _publish(self, topic: str, **payload: Any) -> None:
        await self._bus.publish(topic, {"session_id": self.id, **payload}, source=self._source)

    def _record(self, state: SessionState | None = None) -> Record:
        """The store record of this session (in `state`, default its own)."""
        return Record(
            namespace=self._layout.sessions,
            key=self._layout.session_key(self.id),
            kind=SESSION_KIND,
            data={
                "session_id": self.id,
                "state": (state or self._state).value,
                "options": self.options.to_dict(),
                "created_at": self.created_at,
            },
        )

    def _stored_queue(self) -> list[Task]:
        found: list[Record] = self._store.batch(
            [Scan(prefix=self._layout.queue(self.id), kind=QUEUED_KIND, exact=True)]
        )[0]
        return [Task.from_dict(r.data["task"]) for r in found]

    def _sync(self, record: Record) -> None:
        """Take the state as stored in `record` (another worker may have paused, resumed or
        ended the session since this object loaded it), and, while PAUSED, the queue as
        stored (other workers queue Tasks too)."""
        state = SessionState(record.data["state"])
        if state is self._state and state is not SessionState.PAUSED:
            return
        self._state = state
        self._queue = self._stored_queue() if state is SessionState.PAUSED else []

    def _queued_record(self, task: Task) -> Record:
        return Record(
            namespace=self._layout.queue(self.id),
            key=task.task_id,
            kind=QUEUED_KIND,
            data={"task": task.to_dict()},
        )

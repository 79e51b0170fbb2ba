"""`ContextBuilder` and `ExecutionContext` (seed 004, sections 6.3-6.4).

Instead of handing a task the whole history (O(n)), the builder hands it the relevant part:
recent tasks from L1, the working set from L2, and tasks found in L4 for the current task,
deduplicated across tiers, in a bounded `ExecutionContext`.

| strategy | recent (L1) | working (L2) | relevant (L4 search) |
|---|---|---|---|
| minimal | - | - | - |
| balanced (default) | 5 | all | 3 |
| comprehensive | 10 | all | 5 |
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from loomctx.errors import ConfigError
from loomctx.memory.core import LoomMemory
from loomctx.memory.task import Task, task_text

__all__ = ["ContextBuilder", "ExecutionContext", "Strategy"]

Strategy = Literal["minimal", "balanced", "comprehensive"]
_SHAPES: Final[Mapping[str, tuple[int, bool, int]]] = {
    "minimal": (0, False, 0),
    "balanced": (5, True, 3),
    "comprehensive": (10, True, 5),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionContext:
    """What a task runs with: itself, the relevant history, and where it sits.

    `task_history` is deduplicated and ordered oldest first; `parent_context` carries what a
    parent agent passed down to a sub-agent (fractal tasks), read-only. An agent's sub-agent
    finds there the parent's ``agent``, ``run_id``, ``task_id`` (the parent's Task for the
    delegating call), ``request``, the delegated ``task`` and its ``depth``.
    """

    current_task: Task | None = None
    task_history: tuple[Task, ...] = ()
    memory: LoomMemory | None = field(default=None, compare=False)
    session_id: str = "default"
    agent_card: Mapping[str, Any] | None = None
    parent_context: Mapping[str, Any] | None = None
    strategy: Strategy = "balanced"
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        depth = (self.parent_context or {}).get("depth", 1)
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ConfigError(
                f"`parent_context['depth']` must be an int >= 1 (how many delegations below "
                f"the top-level task this one runs), got {depth!r}"
            )

    @property
    def depth(self) -> int:
        """How many delegations below a top-level task this one runs: 0 without a parent,
        else `parent_context["depth"]` (1 if the parent did not say)."""
        if self.parent_context is None:
            return 0
        return int(self.parent_context.get("depth", 1))

    def history_text(self) -> str:
        """The history as one line per task, for prompts."""
        return "\n".join(f"- {task_text(t)}" for t in self.task_history)


class ContextBuilder:
    """Fluent builder of an `ExecutionContext` from a `LoomMemory`.

    >>> ctx = ContextBuilder(memory).with_current_task(task).with_strategy("balanced").build()
    """

    def __init__(self, memory: LoomMemory | None = None) -> None:
        self._ctx = ExecutionContext(memory=memory)

    def with_memory(self, memory: LoomMemory) -> ContextBuilder:
        """Use `memory` for the history."""
        self._ctx = replace(self._ctx, memory=memory)
        return self

    def with_current_task(self, task: Task) -> ContextBuilder:
        """The task the context is built for (its action is the search query)."""
        self._ctx = replace(self._ctx, current_task=task)
        return self

    def with_strategy(self, strategy: Strategy) -> ContextBuilder:
        """minimal, balanced or comprehensive (see the module docstring)."""
        if strategy not in _SHAPES:
            raise ConfigError(
                f"unknown context strategy {strategy!r}; use one of {', '.join(_SHAPES)}"
            )
        self._ctx = replace(self._ctx, strategy=strategy)
        return self

    def with_session(self, session_id: str) -> ContextBuilder:
        """The session the task belongs to."""
        self._ctx = replace(self._ctx, session_id=session_id)
        return self

    def with_agent_card(self, card: Mapping[str, Any]) -> ContextBuilder:
        """What the executing agent can do."""
        self._ctx = replace(self._ctx, agent_card=card)
        return self

    def with_parent_context(self, parent: Mapping[str, Any]) -> ContextBuilder:
        """What a parent agent passes down to a sub-agent."""
        self._ctx = replace(self._ctx, parent_context=parent)
        return self

    def with_metadata(self, **metadata: Any) -> ContextBuilder:
        """Extra fields for the context's `metadata`."""
        self._ctx = replace(self._ctx, metadata={**self._ctx.metadata, **metadata})
        return self

    def build(self) -> ExecutionContext:
        """The context, with the history its strategy asks for, deduplicated."""
        ctx = self._ctx
        task = ctx.current_task
        # A task may ask for its own strategy (seed 004's `context_strategy` metadata).
        strategy = task.metadata.get("context_strategy", ctx.strategy) if task else ctx.strategy
        if strategy not in _SHAPES:
            raise ConfigError(
                f"task {task.task_id if task else ''!r} asks for context strategy {strategy!r}; "
                f"use one of {', '.join(_SHAPES)}"
            )
        recent_n, working, relevant_n = _SHAPES[strategy]
        if ctx.memory is None or task is None or strategy == "minimal":
            return replace(ctx, strategy=strategy, task_history=())
        memory = ctx.memory
        groups: list[Sequence[Task]] = [memory.get_l1_tasks(limit=recent_n)]
        if working:
            groups.append(memory.get_l2_tasks())
        query = " ".join([task.action, *(str(v) for v in task.parameters.values())])
        groups.append(memory.search_tasks(query, limit=relevant_n))
        return replace(ctx, strategy=strategy, task_history=_deduplicate(groups, task))


def _deduplicate(groups: Sequence[Sequence[Task]], current: Task) -> tuple[Task, ...]:
    """Each task once (the first tier that has it wins), without the current task, oldest
    first."""
    seen = {current.task_id}
    out: list[Task] = []
    for group in groups:
        for t in group:
            if t.task_id not in seen:
                seen.add(t.task_id)
                out.append(t)
    return tuple(sorted(out, key=lambda t: t.created_at))

"""Sub-agents (fractal tasks, seeds 003 and 004): an agent run inside a parent's tool call.

``child.as_tool(name=..., description=...)`` is a `Tool` taking a ``task`` (and optional
``context`` notes); a tool of your own can do the same with ``await child.run(task,
parent=ctx)``. Either way the child's run is a sub-agent run of the parent's call:

- its window starts clean: none of the child's earlier history, but the parent's relevant
  context, read-only (`InheritedSource` over the parent's memory), and the shared pool;
- every Task it records carries ``parent_task_id``: the parent's Task for the delegating
  call, whose id the parent fixes before the tool runs;
- its `ExecutionContext` (what its tools receive as ``ToolContext.execution``) has a
  ``parent_context`` naming the parent's agent, run, Task, request, the task and the depth;
- its events carry ``parent_run_id`` and appear in the parent's stream as they happen;
- its final reply is the tool result; a child that fails gives an error result instead, and
  the parent's run goes on.

Runaway recursion is stopped by depth: a run may sit at most `AgentLoop.max_depth` delegations
below a top-level run. Deeper, ``stream(parent=...)`` raises `ConfigError` before the run
starts, which `as_tool` turns into an error result the parent's model reads, like any
failed tool call. A child that shares its parent's memory is refused the same way: it would
write into the memory it is meant to read only.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Protocol

from loomctx.agent.events import AgentEvent, RunCompleted
from loomctx.agent.tools import Tool, ToolContext
from loomctx.errors import ConfigError, ToolError
from loomctx.memory.context_builder import ExecutionContext
from loomctx.memory.core import LoomMemory
from loomctx.memory.task import Task


class Delegate(Protocol):
    """What `delegation_tool` runs: an agent's name and its `stream` (an `Agent` is one).
    Named here, not imported, so that this module stays below the agent that uses it."""

    @property
    def name(self) -> str: ...

    def stream(
        self, prompt: str, *, parent: ToolContext | None = None
    ) -> AsyncGenerator[AgentEvent, None]: ...


__all__ = ["Delegate", "Lineage", "delegation_tool", "finish", "run_context"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Lineage:
    """Where a sub-agent run sits: who delegated it, from which call and run, how deep."""

    parent_agent: str
    parent_run_id: str
    parent_task_id: str
    request: str
    """The parent run's own request (its user turn)."""
    depth: int
    memory: LoomMemory
    """The parent's memory: the child reads it (`InheritedSource`) and never writes it."""

    @classmethod
    def of(cls, call: ToolContext, *, agent: str, memory: LoomMemory, max_depth: int) -> Lineage:
        """The lineage of a run of `agent` (with `memory`) for the tool call `call`."""
        execution = call.execution
        meta: Mapping[str, Any] = execution.metadata if execution is not None else {}
        if (
            execution is None
            or execution.current_task is None
            or execution.memory is None
            or not {"agent", "run_id", "request"} <= meta.keys()
        ):
            raise ConfigError(
                f"`parent` of agent `{agent}` must be the `ToolContext` of a call made by an "
                "`Agent` run (its `execution` is missing or incomplete); pass the context your "
                "tool received, or run the agent without `parent`"
            )
        depth = execution.depth + 1
        if depth > max_depth:
            raise ConfigError(
                f"agent `{agent}` was asked to run {depth} delegations deep, beyond its "
                f"`max_depth` of {max_depth}; agents are probably delegating in a loop: do "
                "this task without delegating it (or raise `max_depth`)"
            )
        if execution.memory is memory:
            raise ConfigError(
                f"agent `{agent}` would run as a sub-agent of `{meta['agent']}` with the same "
                "memory, and write into the memory it may only read; give the sub-agent a "
                "memory of its own (another `Agent`, or `memory=LoomMemory(...)`)"
            )
        return cls(
            parent_agent=str(meta["agent"]),
            parent_run_id=str(meta["run_id"]),
            parent_task_id=execution.current_task.task_id,
            request=str(meta["request"]),
            depth=depth,
            memory=execution.memory,
        )

    def parent_context(self, task: str) -> dict[str, Any]:
        """What the child's `ExecutionContext.parent_context` holds for delegated `task`."""
        return {
            "agent": self.parent_agent,
            "run_id": self.parent_run_id,
            "task_id": self.parent_task_id,
            "request": self.request,
            "task": task,
            "depth": self.depth,
        }


def run_context(
    *,
    agent: str,
    tools: Sequence[Tool],
    memory: LoomMemory,
    run_id: str,
    request: Task,
    lineage: Lineage | None,
) -> ExecutionContext:
    """The `ExecutionContext` of a run of `agent` for its user-turn Task `request`; each
    tool call gets a copy whose `current_task` is the call's Task. `Lineage.of` reads back
    the metadata keys set here."""
    prompt = str(request.parameters.get("content", ""))
    return ExecutionContext(
        current_task=request,
        memory=memory,
        session_id=memory.node_id,
        agent_card={"name": agent, "tools": [t.name for t in tools]},
        parent_context=lineage.parent_context(prompt) if lineage is not None else None,
        strategy="minimal",
        metadata={"agent": agent, "run_id": run_id, "request": prompt},
    )


async def finish(events: AsyncGenerator[AgentEvent, None]) -> RunCompleted:
    """Drain a run's `events` (closing them whatever happens) and return the run's own
    `RunCompleted`; sub-agents' events in the stream are passed over."""
    own = ""
    done: RunCompleted | None = None
    async with aclosing(events):
        async for event in events:
            own = own or event.run_id  # the first event is the run's own `RunStarted`
            if isinstance(event, RunCompleted) and event.run_id == own:
                done = event
    assert done is not None, "a run's stream ends with its `RunCompleted` or raises"
    return done


def delegation_tool(
    agent: Delegate, *, name: str | None, description: str | None, timeout: float | None
) -> Tool:
    """The tool behind `Agent.as_tool`: runs `agent` as a sub-agent of the calling run."""
    label = name if name is not None else agent.name

    async def delegate(task: str, ctx: ToolContext, context: str = "") -> str:
        """Delegate a task to a sub-agent and return its answer.

        Args:
            task: The task, stated completely: the sub-agent does not see your conversation.
            context: Facts or constraints from your conversation the sub-agent needs.
        """
        prompt = f"{task}\n\nContext:\n{context}" if context.strip() else task
        done = await finish(agent.stream(prompt, parent=ctx))
        if not done.output:
            raise ToolError(
                f"sub-agent `{agent.name}` ended without an answer after {done.turns} "
                f"turn(s) (stopped: {done.stopped}); split the task, or do it yourself"
            )
        return done.output

    return Tool.from_function(
        delegate,
        name=label,
        description=description
        if description is not None
        else f"Delegate a task to the `{agent.name}` agent and get its answer back.",
        timeout=timeout,
    )

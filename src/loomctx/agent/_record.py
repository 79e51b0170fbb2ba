"""What an agent run records in memory, as Tasks: the user's turn, each reply, each tool call
with its result.

Memory only ever holds whole units: a reply and the Tasks of all its tool calls are written
together, once every result is in (`tool_unit`), so that a run interrupted mid-turn leaves
nothing of that turn and the next run starts from a consistent history. Each reply and call
carries the model call that made it (`TURN_INDEX`), from which an agent made again on the
same memory counts on (`turns_recorded`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from loomctx.agent.subagent import Lineage
from loomctx.agent.tools import ToolResult
from loomctx.memory.core import LoomMemory
from loomctx.memory.task import ASSISTANT_MESSAGE, USER_MESSAGE, Task, TaskStatus, message_task
from loomctx.messages import Message, ToolCall

__all__ = [
    "TURN_INDEX",
    "Run",
    "call_task",
    "record",
    "run_message_task",
    "tool_unit",
    "turns_recorded",
]

TURN_INDEX = "turn_index"
"""The metadata key of a reply's or tool call's Task: the model call that made it, counted
over the agent's conversation (`BuildContext.turn_index`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """A run's id, and where it sits when it is a sub-agent's."""

    id: str
    lineage: Lineage | None

    @property
    def parent_run_id(self) -> str | None:
        return self.lineage.parent_run_id if self.lineage is not None else None

    @property
    def parent_task_id(self) -> str | None:
        return self.lineage.parent_task_id if self.lineage is not None else None

    @property
    def asker(self) -> str:
        """Who the run answers: the user, or the delegating agent."""
        return self.lineage.parent_agent if self.lineage is not None else "user"


def run_message_task(action: str, content: str, run: Run, *, agent: str, turn_index: int) -> Task:
    """A user message (from `run.asker` to `agent`) or a reply (from `agent` to it); a reply
    carries `turn_index`, the model call that made it."""
    metadata: dict[str, object] = {"run_id": run.id, "agent": agent}
    if action != USER_MESSAGE:
        metadata[TURN_INDEX] = turn_index
    return message_task(
        action,
        content,
        agent=agent,
        asker=run.asker,
        metadata=metadata,
        parent_task_id=run.parent_task_id,
    )


def call_task(call: ToolCall, run: Run, *, agent: str, turn_index: int) -> Task:
    """The Task of a tool call, running: its id is fixed before the tool runs, so that a
    sub-agent's Tasks can point at it."""
    return Task(
        source_agent=agent,
        target_agent=call.name,
        action=call.name,
        parameters=dict(call.arguments),
        status=TaskStatus.RUNNING,
        metadata={
            "run_id": run.id,
            "agent": agent,
            "tool_call_id": call.id,
            TURN_INDEX: turn_index,
        },
        parent_task_id=run.parent_task_id,
    )


def tool_unit(
    reply: Message,
    results: Sequence[ToolResult],
    pending: Mapping[str, Task],
    run: Run,
    *,
    agent: str,
    turn_index: int,
) -> list[Task]:
    """The reply (when it has text) and all its calls' Tasks (`pending`), completed or
    failed with their results: one unit, written at once."""
    tasks = (
        [
            run_message_task(
                ASSISTANT_MESSAGE, reply.content, run, agent=agent, turn_index=turn_index
            )
        ]
        if reply.content
        else []
    )
    by_id = {r.call_id: r for r in results}
    for call in reply.tool_calls:
        result = by_id[call.id]
        tasks.append(
            pending[call.id].evolve(
                status=TaskStatus.FAILED if result.is_error else TaskStatus.COMPLETED,
                result=None if result.is_error else result.content,
                error=result.content if result.is_error else None,
            )
        )
    return tasks


def record(tasks: list[Task], memories: Sequence[LoomMemory | None]) -> None:
    """Write `tasks` into each memory (the agent's, and a shared pool) and promote them."""
    for memory in memories:
        if memory is not None:
            memory.add_tasks(tasks)
            memory.promote_tasks()


def turns_recorded(memory: LoomMemory, agent: str) -> int:
    """The model calls agent `agent` made in `memory`'s conversation: one more than the
    newest `TURN_INDEX` its replies and tool calls carry in L1 (0 for none)."""
    latest = -1
    for task in memory.get_l1_tasks(limit=memory.max_l1_size):
        index = task.metadata.get(TURN_INDEX)
        if task.metadata.get("agent") == agent and isinstance(index, int):
            latest = max(latest, index)
    return latest + 1

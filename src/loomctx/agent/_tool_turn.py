"""One tool turn of an agent run: the reply's calls run in a task of their own, so that the
run can pass on the events its sub-agents emit meanwhile.

Calls whose arguments the provider refused as invalid JSON are not run: each gets an error
result saying why, in the words of `parse_arguments`, and how to call again. Results come
back in the order of the calls, whatever order they finished in.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from loomctx.agent.events import AgentEvent
from loomctx.agent.llm import Completed
from loomctx.agent.tools import Tool, ToolResult, run_tool_calls
from loomctx.errors import MessageFormatError
from loomctx.memory.context_builder import ExecutionContext
from loomctx.memory.task import Task
from loomctx.messages import MAX_ARGUMENT_DEPTH, ToolCall, parse_arguments

__all__ = ["ToolTurn", "not_run"]


class ToolTurn:
    """The run of one reply's tool calls: `events` is the channel of what its sub-agents emit
    (then None once every call is done), `work` the task whose result is the results."""

    def __init__(
        self,
        completed: Completed,
        tools: Sequence[Tool],
        *,
        execution: ExecutionContext,
        pending: Mapping[str, Task],
        ids: Mapping[str, str],
    ) -> None:
        self.events: asyncio.Queue[AgentEvent | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        home = threading.get_ident()

        def emit(event: AgentEvent) -> None:
            if threading.get_ident() == home:
                self.events.put_nowait(event)
            else:  # from a sync tool's worker thread
                loop.call_soon_threadsafe(self.events.put_nowait, event)

        self.work = asyncio.create_task(_run_tools(completed, tools, execution, pending, ids, emit))
        self.work.add_done_callback(lambda _: self.events.put_nowait(None))

    async def stop(self) -> None:
        """Cancel the calls if they are still running (the run was cancelled, or its stream
        closed), and wait until they have stopped."""
        if not self.work.done():
            self.work.cancel()
            await asyncio.wait([self.work])


async def _run_tools(
    completed: Completed,
    tools: Sequence[Tool],
    execution: ExecutionContext,
    pending: Mapping[str, Task],
    ids: Mapping[str, str],
    emit: Callable[[AgentEvent], None],
) -> list[ToolResult]:
    """Results for every call, in order; calls with invalid JSON arguments are not run."""
    invalid = dict(completed.invalid_tool_calls)
    calls = completed.message.tool_calls
    runnable = [c for c in calls if c.id not in invalid]
    ran = iter(
        await run_tool_calls(
            runnable,
            list(tools),
            metadata=ids,
            executions={c.id: replace(execution, current_task=pending[c.id]) for c in runnable},
            emit=emit,
        )
    )
    return [
        ToolResult(
            call_id=c.id,
            name=c.name,
            content=not_run(c, invalid[c.id]),
            is_error=True,
            elapsed_ms=0.0,
        )
        if c.id in invalid
        else next(ran)
        for c in calls
    ]


def not_run(call: ToolCall, raw: str) -> str:
    """What the model reads for `call`, whose arguments `raw` were refused: the reason, in
    the words of `parse_arguments` (the providers' assembly refuses arguments with it, but
    keeps only their text), and how to call again."""
    try:
        parse_arguments(raw, call_id=call.id)
    except MessageFormatError as exc:
        why = str(exc)
    else:  # refused by a model adapter of its own, which did not say why
        why = (
            f"its arguments {raw[:200]!r} are not valid JSON arguments (not a JSON object, NaN "
            f"or Infinity, nested deeper than {MAX_ARGUMENT_DEPTH} levels, or invalid text)"
        )
    return (
        f"tool `{call.name}` was not run: {why}. Call it again with valid JSON arguments: "
        f"one JSON object of valid text, without NaN or Infinity, nested at most "
        f"{MAX_ARGUMENT_DEPTH} levels"
    )

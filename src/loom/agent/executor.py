"""`Agent`: the recursive tool loop that rebuilds its context before every model call.

One run (seeds 000, 001):

1. The static context is assembled once with `ContextAssembler`: the instructions and the
   user's request (and the stage, if any) CRITICAL, the task context HIGH.
2. Every turn, before the model call: the retriever is asked for the user's request *plus what
   the last tool results revealed*, and the orchestrator builds the window from the static
   context, the tools, the retrieved documents, memory (earlier runs), the exchange of this run
   so far, and the user's turn. Retrieved context is its own block: the system prompt can never
   overwrite it (the seed 000 bug).
3. The model streams; text deltas become events. Tool calls run (independent ones
   concurrently); a failing tool or an invalid call becomes an error result the model sees.
4. Every user message, reply and tool call is recorded in memory as a Task, and promoted.
5. The loop recurses until a reply has no tool calls, or `max_turns`.

`stream()` yields typed `AgentEvent`s; `run()` drains it and returns the final text.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

from loom.agent.events import (
    AgentEvent,
    ContextAssembled,
    ErrorEvent,
    LLMCompleted,
    LLMTextDelta,
    RetrievalCompleted,
    RetrievedDocument,
    RunCompleted,
    RunStarted,
    ToolCallEvent,
    ToolResultEvent,
    TurnCompleted,
)
from loom.agent.llm import LLM, Completed, LLMOptions, Usage
from loom.agent.retriever import ContextRetriever, RetrievedContextSource
from loom.agent.tools import Tool, ToolResult, run_tool_calls, tool
from loom.context.assembler import ComponentPriority, ContextAssembler
from loom.context.block import BuildContext, ContextBlock, ContextSource, TokenBudget
from loom.context.orchestrator import ContextOrchestrator
from loom.context.sources import (
    L1RecentSource,
    L2ImportantSource,
    L4SemanticSource,
    PromptSource,
    ToolSource,
    UserInputSource,
)
from loom.errors import ConfigError
from loom.memory.core import LoomMemory
from loom.memory.task import ASSISTANT_MESSAGE, USER_MESSAGE, Task, TaskStatus
from loom.messages import Message
from loom.tokens import TiktokenCounter, TokenCounter

__all__ = ["Agent", "TurnSource"]

E = TypeVar("E", bound=AgentEvent)


class TurnSource:
    """The exchange of the current run after the user's turn: each assistant message with its
    tool calls and their results, one unit per turn. The newest unit is pinned (the model must
    see the results of the calls it just made); older ones are kept by value."""

    def __init__(self, *, name: str = "turn", priority: float = 1.0) -> None:
        self.name = name
        self.priority = priority
        self.units: list[tuple[Message, ...]] = []

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> list[ContextBlock]:
        """One block per unit, newest first."""
        last = len(self.units) - 1
        return [
            ContextBlock(
                source=self.name,
                section="turn",
                messages=unit,
                token_count=ctx.counter.count_messages(unit) - 3,
                priority=1.0 if i == last else 0.95,
                pinned=i == last,
                sequence=i,
            )
            for i, unit in reversed(list(enumerate(self.units)))
        ]


class Agent:
    """An LLM agent whose context window Loom rebuilds before every model call.

    >>> agent = Agent(llm=OpenAIChatLLM("gpt-4o"), system_instructions="You are helpful.",
    ...               tools=[get_weather])
    >>> answer = await agent.run("Weather in Paris?")

    `tools` are `Tool`s or plain typed functions (wrapped with `loom.tool`); `memory` (default:
    a new in-memory `LoomMemory`) carries the conversation across runs; `context_retriever`
    is asked before every call. The window is `model_context_window` tokens with
    `output_reserve_ratio` kept for the reply.
    """

    def __init__(
        self,
        llm: LLM,
        system_instructions: str = "",
        tools: Sequence[Tool | Callable[..., Any]] = (),
        context_retriever: ContextRetriever | None = None,
        memory: LoomMemory | None = None,
        max_turns: int = 10,
        *,
        name: str = "agent",
        model_context_window: int = 16_000,
        output_reserve_ratio: float = 0.2,
        token_counter: TokenCounter | None = None,
        retrieval_top_k: int = 5,
        stage: str = "",
        task_context: str = "",
        llm_options: LLMOptions | None = None,
        sources: Sequence[ContextSource] = (),
        source_timeout: float = 2.0,
    ) -> None:
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ConfigError(f"`max_turns` must be an int >= 1, got {max_turns!r}")
        self.llm = llm
        self.name = name
        self.system_instructions = system_instructions
        self.tools = [t if isinstance(t, Tool) else tool(t) for t in tools]
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise ConfigError(f"two tools share a name in {names!r}; tool names must be unique")
        self.context_retriever = context_retriever
        self.counter = token_counter or TiktokenCounter()
        self.memory = memory or LoomMemory(name, counter=self.counter)
        self.max_turns = max_turns
        self.model_context_window = model_context_window
        self.output_reserve_ratio = output_reserve_ratio
        self.retrieval_top_k = retrieval_top_k
        self.stage = stage
        self.task_context = task_context
        self.llm_options = llm_options
        self.extra_sources = list(sources)
        self.source_timeout = source_timeout

    async def run(self, prompt: str) -> str:
        """Run to the end and return the final reply (drains `stream`)."""
        output = ""
        async for event in self.stream(prompt):
            if isinstance(event, RunCompleted):
                output = event.output
        return output

    def run_sync(self, prompt: str) -> str:
        """`run` for synchronous code (not from inside a running event loop)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.run(prompt))
        raise ConfigError("`run_sync` was called inside an event loop; use `await agent.run()`")

    def _static_context(self, prompt: str) -> str:
        budget = max(256, int(self.model_context_window * (1 - self.output_reserve_ratio) / 3))
        assembler = ContextAssembler(
            max_tokens=budget, token_counter=self.counter, order="insertion"
        )
        assembler.add_component(
            "instructions", self.system_instructions, ComponentPriority.CRITICAL, truncatable=False
        )
        assembler.add_component("stage", self.stage, ComponentPriority.CRITICAL, truncatable=False)
        assembler.add_component("request", prompt, ComponentPriority.CRITICAL)
        assembler.add_component("task_context", self.task_context, ComponentPriority.HIGH)
        return assembler.assemble()

    def _orchestrator(
        self, static: str, retrieved: RetrievedContextSource, turn: TurnSource
    ) -> ContextOrchestrator:
        sources: list[ContextSource] = [PromptSource(static)]
        if self.tools:
            sources.append(ToolSource([t.schema() for t in self.tools]))
        sources += [
            retrieved,
            L1RecentSource(self.memory),
            L2ImportantSource(self.memory),
            L4SemanticSource(self.memory),
            *self.extra_sources,
            turn,
            UserInputSource(),
        ]
        return ContextOrchestrator(
            token_counter=self.counter,
            sources=sources,
            model_context_window=self.model_context_window,
            output_reserve_ratio=self.output_reserve_ratio,
            source_timeout=self.source_timeout,
        )

    async def stream(self, prompt: str) -> AsyncIterator[AgentEvent]:
        """Run, yielding an `AgentEvent` for every step (see `AgentEventType`)."""
        run_id = uuid.uuid4().hex
        ids = {"run_id": run_id, "agent": self.name}
        retrieved = RetrievedContextSource()
        turn_source = TurnSource()
        usage: Usage | None = None
        last_text = ""
        turn = 0

        def event(kind: type[E], **fields: Any) -> E:
            return kind(run_id=run_id, agent=self.name, **fields)

        yield event(RunStarted, turn=0, prompt=prompt)
        try:
            self._record([self._task(USER_MESSAGE, "user", prompt, run_id)])
            orchestrator = self._orchestrator(self._static_context(prompt), retrieved, turn_source)
            revealed = ""
            for turn in range(1, self.max_turns + 1):
                if self.context_retriever is not None:
                    query = f"{prompt}\n{revealed}".strip()
                    docs = await self.context_retriever.retrieve_for_query(
                        query, self.retrieval_top_k
                    )
                    retrieved.text = self.context_retriever.format_documents(docs)
                    yield event(
                        RetrievalCompleted,
                        turn=turn,
                        query=query,
                        documents=tuple(
                            RetrievedDocument(id=d.id, score=d.score, preview=d.content[:120])
                            for d in docs
                        ),
                    )
                ctx = BuildContext(
                    agent_id=self.name,
                    session_id=self.memory.node_id,
                    turn_index=turn - 1,
                    metadata=ids,
                )
                window = await orchestrator.build(query=prompt, ctx=ctx)
                yield ContextAssembled.from_report(
                    window.report, run_id=run_id, agent=self.name, turn=turn
                )
                completed: Completed | None = None
                async for chunk in self.llm.stream(
                    window.messages, tools=window.tools, options=self.llm_options
                ):
                    if chunk.kind == "text":
                        yield event(LLMTextDelta, turn=turn, text=chunk.text)
                    elif chunk.kind == "completed":
                        completed = chunk
                if completed is None:
                    raise ConfigError(f"LLM {self.llm.name!r} ended its stream without `Completed`")
                reply = completed.message
                if completed.usage is not None:
                    usage = completed.usage if usage is None else usage + completed.usage
                last_text = reply.content
                yield event(
                    LLMCompleted,
                    turn=turn,
                    text=reply.content,
                    tool_calls=reply.tool_calls,
                    usage=completed.usage,
                    finish_reason=completed.finish_reason,
                )
                if not reply.tool_calls:
                    self._record([self._task(ASSISTANT_MESSAGE, self.name, reply.content, run_id)])
                    yield event(
                        TurnCompleted,
                        turn=turn,
                        usage=completed.usage,
                        had_tool_calls=False,
                    )
                    yield event(
                        RunCompleted,
                        turn=turn,
                        output=reply.content,
                        turns=turn,
                        usage=usage,
                        stopped="done",
                    )
                    return
                for call in reply.tool_calls:
                    yield event(ToolCallEvent, turn=turn, call=call)
                results = await self._run_tools(completed, ids)
                for result in results:
                    yield ToolResultEvent.from_result(
                        result, run_id=run_id, agent=self.name, turn=turn
                    )
                turn_source.units.append((reply, *(r.to_message() for r in results)))
                self._record_tools(reply, results, run_id)
                revealed = "\n".join(r.content for r in results)
                yield event(
                    TurnCompleted,
                    turn=turn,
                    usage=completed.usage,
                    had_tool_calls=True,
                )
            yield event(
                RunCompleted,
                turn=turn,
                output=last_text,
                turns=turn,
                usage=usage,
                stopped="max_turns",
            )
        except Exception as exc:
            yield event(
                ErrorEvent,
                turn=turn,
                message=str(exc),
                error_type=type(exc).__name__,
                recoverable=False,
            )
            yield event(
                RunCompleted,
                turn=turn,
                output=last_text,
                turns=turn,
                usage=usage,
                stopped="error",
            )
            raise

    async def _run_tools(self, completed: Completed, ids: dict[str, str]) -> list[ToolResult]:
        """Results for every call, in order; calls with invalid JSON arguments are not run."""
        invalid = dict(completed.invalid_tool_calls)
        calls = completed.message.tool_calls
        runnable = [c for c in calls if c.id not in invalid]
        ran = iter(await run_tool_calls(runnable, self.tools, metadata=ids))
        return [
            ToolResult(
                call_id=c.id,
                name=c.name,
                content=f"tool `{c.name}` was not run: its arguments are not a JSON object "
                f"({invalid[c.id][:200]!r}); call it again with valid JSON arguments",
                is_error=True,
                elapsed_ms=0.0,
            )
            if c.id in invalid
            else next(ran)
            for c in calls
        ]

    def _task(self, action: str, source: str, content: str, run_id: str) -> Task:
        return Task(
            source_agent=source,
            target_agent="user" if source == self.name else self.name,
            action=action,
            parameters={"content": content},
            status=TaskStatus.COMPLETED,
            metadata={"run_id": run_id},
        )

    def _record_tools(self, reply: Message, results: Sequence[ToolResult], run_id: str) -> None:
        tasks = (
            [self._task(ASSISTANT_MESSAGE, self.name, reply.content, run_id)]
            if (reply.content)
            else []
        )
        by_id = {r.call_id: r for r in results}
        for call in reply.tool_calls:
            result = by_id[call.id]
            tasks.append(
                Task(
                    source_agent=self.name,
                    target_agent=call.name,
                    action=call.name,
                    parameters=dict(call.arguments),
                    status=TaskStatus.FAILED if result.is_error else TaskStatus.COMPLETED,
                    result=None if result.is_error else result.content,
                    error=result.content if result.is_error else None,
                    metadata={"run_id": run_id, "tool_call_id": call.id},
                )
            )
        self._record(tasks)

    def _record(self, tasks: list[Task]) -> None:
        self.memory.add_tasks(tasks)
        self.memory.promote_tasks()

"""`Agent`: the recursive tool loop that rebuilds its context before every model call.

One run (seeds 000, 001):

1. The static context is assembled once with `ContextAssembler`: the instructions (and the
   stage, if any) CRITICAL, the task context HIGH. It is the window's stable prefix, the same
   for every run while they are unchanged; the user's request lives in the user turn only
   (seed 001 put it in the static context too, where it changed the prefix every run).
2. Every turn, before the model call: the retriever is asked for the user's request *plus what
   the model last tried (its tool calls, arguments and all) and what their results revealed*,
   and what earlier turns found while it is still relevant (`loomctx.agent.discovery`); memory
   and the knowledge bases are searched with the same query; and the orchestrator builds the
   window from the static context, the tools, the retrieved documents, memory (earlier runs),
   the exchange of this run so far, and the user's turn. Retrieved context is its own block:
   the system prompt can never overwrite it (the seed 000 bug).
3. The model streams; text deltas become events. Tool calls run (independent ones
   concurrently); a failing tool or an invalid call becomes an error result the model sees.
4. Every user message, reply and tool call is recorded in memory as a Task, and promoted.
5. The loop recurses until a reply has no tool calls, or `AgentLoop.max_turns`.

`stream()` yields typed `AgentEvent`s; `run()` drains it and returns the final text. An agent
becomes another's sub-agent through `as_tool()` or ``run(task, parent=ctx)`` (see
`loomctx.agent.subagent`); a shared pool (`AgentSources.shared_pool`) is a memory several
agents read and add to. How the agent builds its windows is `loomctx.agent._window`; what a
run records, `loomctx.agent._record`; one tool turn, `loomctx.agent._tool_turn`.

**Cancellation.** Cancelling the task that drains `stream()` or `run()`, or closing the stream
(`aclose()`), stops the run at once: running tool calls, sub-agents and the model's stream are
cancelled and closed, and no task is left behind. A sync tool's worker thread cannot be
stopped: it is abandoned, runs to its end, and its result is dropped. Memory only ever holds
whole units: a turn's reply and its tool results are recorded together once every result is
in, so an interrupted turn leaves nothing of itself, and the agent's next run starts from a
consistent history. For a time limit, wrap the run:
``async with asyncio.timeout(60): await agent.run(...)``.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import replace
from typing import Any, Literal, Never, TypeVar

from loomctx.agent._record import (
    Run,
    call_task,
    record,
    run_message_task,
    tool_unit,
    turns_recorded,
)
from loomctx.agent._tool_turn import ToolTurn
from loomctx.agent._window import AgentWindows, check_reader_name, check_text_argument
from loomctx.agent.discovery import Discoveries
from loomctx.agent.events import (
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
from loomctx.agent.llm import LLM, Completed, LLMChunk, LLMOptions, Usage
from loomctx.agent.retriever import ContextRetriever, RetrievedContextSource
from loomctx.agent.settings import AgentLoop, AgentSources, AgentWindow, moved_argument
from loomctx.agent.subagent import Lineage, delegation_tool, finish, run_context
from loomctx.agent.tools import Tool, ToolContext, tool
from loomctx.agent.turns import TurnSource
from loomctx.context.billing import (
    ANTHROPIC,
    ANTHROPIC_1H,
    CachePrediction,
    CachePricing,
    pricing_for,
)
from loomctx.context.block import BuildContext
from loomctx.context.budget import BudgetManager
from loomctx.context.excerpt import handle_for
from loomctx.context.orchestrator import ContextOrchestrator, ContextWindow, LayoutState
from loomctx.context.recipe import DEFAULT_MAX_DYNAMIC, WindowSettings
from loomctx.embeddings import Embedder
from loomctx.errors import ConfigError
from loomctx.knowledge import KnowledgeBaseProvider
from loomctx.memory.context_builder import ExecutionContext
from loomctx.memory.core import DEFAULT_EMBEDDER, EmbedderDefault, LoomMemory, same_view
from loomctx.memory.task import ASSISTANT_MESSAGE, USER_MESSAGE, Task
from loomctx.tokens import TiktokenCounter

__all__ = ["DEFAULT_MAX_DYNAMIC", "Agent", "AgentLoop", "AgentSources", "AgentWindow", "TurnSource"]

E = TypeVar("E", bound=AgentEvent)


class Agent(AgentWindows):
    """An LLM agent whose context window Loom rebuilds before every model call.

    >>> agent = Agent(OpenAIChatLLM("gpt-4o"), "You are helpful.", tools=[get_weather],
    ...               window=AgentWindow(model_context_window=128_000))
    >>> answer = await agent.run("Weather in Paris?")

    What the agent *has* is passed directly: the `llm`; its `system_instructions`; `tools`,
    `Tool`s or plain typed functions (wrapped with `loomctx.tool`); `memory` (default: a new
    in-memory `LoomMemory` with `embedder`), which carries the conversation across runs and
    whose archive is searched for every window with the `knowledge_bases`
    (`UnifiedRetrievalSource`); its `name`. `embedder` (default: the shipped offline embedder
    where installed, see `LoomMemory`; None: lexical search only) is for the memory the agent
    makes itself, embedding in the background so that a turn does not wait.

    How it *works* is three frozen values (`loomctx.agent.settings`), each with defaults
    that suit a 16,000-token window: `window` (`AgentWindow`: the window's size, the reply's
    reserve, the counter, the budget's split, the cache policy, the tool results' share),
    `sources` (`AgentSources`: stage and task context, a `ContextRetriever` asked before
    every call, sources of your own, a shared pool, the sources' timeout) and `loop`
    (`AgentLoop`: `max_turns`, `max_depth`, progress, the model calls' options). The
    keyword arguments these replaced are refused with a `ConfigError` naming the field to use.

    The agent remembers where its history starts across runs, so each call repeats the
    previous one's prompt up to the dynamic tail, and a provider's prompt cache reads it.
    History reaches back beyond the memory's L1, from its store, as far as the window's room
    (`loomctx.context.recipe`). One large tool result cannot crowd out the window: beyond
    `AgentWindow.max_result_tokens` the longest results are shown as a head and a tail around
    a marker naming a handle (``r-<task id>``); the whole text is the Task recorded in memory,
    and an agent with tools also has `read_result`, which reads a slice of it by handle from
    this agent's memory only. The report of each window marks such blocks ``truncated``.

    **Budget.** The budget manager splits the input budget among the window's sources. The
    static context (instructions, stage, task context: the stable system message,
    assembled once per run) gets all it needs up to the manager's `static_limit`, by default
    the whole input budget; `BudgetExceededError` (raised here, naming the sizes, the limit
    and the fixes) means it truly does not fit. The dynamic context (retrieved documents,
    memory and knowledge) takes at most the cache policy's `max_dynamic` share of the input
    and at most the manager's `dynamic_limit`. Seed 001's split, 12,000 static and 4,000
    dynamic tokens of 16,000: ``AgentWindow(budget_manager=BudgetManager(static_tokens=12_000,
    dynamic_tokens=4_000))`` in a window whose input budget is 16,000 tokens. An
    `AdaptiveBudgetManager` shifts the split with the run's phase: each build's
    `BuildContext.progress` is `AgentLoop.progress()` when given and not None, else the share
    of `max_turns` used before the call; `BuildContext.turn_index` counts this agent's model
    calls over all its runs (`turns_taken`), continued from what its memory recorded when the
    agent is made again on the same memory.

    **Cost.** Each window's report predicts what the call's prompt is billed under the
    provider's cache (`loomctx.context.billing`): `pricing` is the `llm`'s ``pricing`` where
    it has one (Anthropic's and OpenAI's providers do, by model family), else `ANTHROPIC`;
    set the attribute to another `CachePricing` to change it. Each `LLMCompleted` event
    carries the prediction beside the usage the provider reported.
    """

    def __init__(
        self,
        llm: LLM,
        system_instructions: str = "",
        tools: Sequence[Tool | Callable[..., Any]] = (),
        *,
        memory: LoomMemory | None = None,
        knowledge_bases: Sequence[KnowledgeBaseProvider] = (),
        name: str = "agent",
        embedder: Embedder | Literal[EmbedderDefault.EMBEDDER] | None = DEFAULT_EMBEDDER,
        window: AgentWindow | None = None,
        sources: AgentSources | None = None,
        loop: AgentLoop | None = None,
        **moved: Never,
    ) -> None:
        if moved:
            raise moved_argument(next(iter(moved)))
        self.window = _setting(window, AgentWindow, "window")
        self.sources = _setting(sources, AgentSources, "sources")
        self.loop = _setting(loop, AgentLoop, "loop")
        # Checked here, not when the first window is built: by then the run has recorded
        # the user's turn, and the error would name a `system` message, not the argument.
        for setting, text in (
            ("system_instructions", system_instructions),
            ("AgentSources.stage", self.sources.stage),
            ("AgentSources.task_context", self.sources.task_context),
        ):
            check_text_argument(text, f"the `{setting}` of agent `{name}`")
        self.budget_manager = self.window.budget_manager or BudgetManager()
        self.cache_policy = self.window.cache_policy or WindowSettings().cache_policy
        self.llm = llm
        pricing = getattr(llm, "pricing", None)
        self.pricing: CachePricing = pricing if isinstance(pricing, CachePricing) else ANTHROPIC
        ttl = self.loop.llm_options.cache_ttl if self.loop.llm_options is not None else None
        if ttl is not None and self.pricing in (ANTHROPIC, ANTHROPIC_1H):
            # The run's own options say which of Anthropic's caches its calls ask for.
            self.pricing = pricing_for("anthropic", ttl=ttl)
        self.name = name
        self.system_instructions = system_instructions
        self.tools = [t if isinstance(t, Tool) else tool(t) for t in tools]
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise ConfigError(f"two tools share a name in {names!r}; tool names must be unique")
        check_reader_name(names)
        self.counter = self.window.token_counter or TiktokenCounter()
        if memory is not None and embedder is not DEFAULT_EMBEDDER:
            raise ConfigError(
                f"agent `{name}` was given both `memory` and `embedder`; the embedder is for "
                "the memory the agent makes itself: pass it to your `LoomMemory(embedder=...)`"
            )
        self.memory = memory or LoomMemory(name, counter=self.counter, embedder=embedder)
        if self.sources.shared_pool is self.memory:
            raise ConfigError(
                "`AgentSources.shared_pool` is the agent's own `memory`; give the agents that "
                "share a pool a `LoomMemory` of its own"
            )
        self.knowledge_bases = list(knowledge_bases)
        self._reader = None
        # History marks and the previous window, across runs: history stays append-only.
        self._layout = LayoutState()
        # Model calls made so far in this agent's conversation (`BuildContext.turn_index`):
        # counted on from what its memory recorded, so a new Agent on the same memory (a
        # restart, a server's next request) does not start again at 0.
        self.turns_taken = turns_recorded(self.memory, name)
        # Checked here, not when the first window is built (see above); its size also sets
        # what the tool results may take.
        self._static_tokens = self.counter.count(self._static_context(None))

    async def run(self, prompt: str, *, parent: ToolContext | None = None) -> str:
        """Run to the end and return the final reply (drains `stream`; `parent` as there)."""
        return (await finish(self.stream(prompt, parent=parent))).output

    def run_sync(self, prompt: str) -> str:
        """`run` for synchronous code (not from inside a running event loop)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.run(prompt))
        raise ConfigError("`run_sync` was called inside an event loop; use `await agent.run()`")

    def as_tool(
        self,
        name: str | None = None,
        description: str | None = None,
        *,
        timeout: float | None = None,
    ) -> Tool:
        """This agent as a tool through which another agent delegates a task to it.

        The tool takes ``task`` (and optional ``context`` notes), runs this agent as a
        sub-agent of the calling run (see `loomctx.agent.subagent`) and returns its final reply;
        a sub-agent that fails, or ends without an answer, gives an error result. `name`
        defaults to the agent's name; say in `description` what the agent is good at.
        `timeout` (seconds) bounds the whole sub-agent run; None: no limit.
        """
        return delegation_tool(self, name=name, description=description, timeout=timeout)

    async def stream(
        self, prompt: str, *, parent: ToolContext | None = None
    ) -> AsyncGenerator[AgentEvent, None]:
        """Run, yielding an `AgentEvent` for every step (see `AgentEventType`), and those of
        the sub-agents it delegates to as they happen.

        `parent`, the `ToolContext` a tool received, makes this a sub-agent run for that tool
        call (see `loomctx.agent.subagent`): its events then also go into the parent's stream.
        Raises `ConfigError` before the run starts (nothing recorded, no event) if `prompt`
        is blank: a run answers a user turn, and a window without one would end on the
        previous reply, which a model reads as text of its own to continue. Likewise if
        `prompt` is not a string of valid Unicode (`MessageFormatError` for a surrogate), if
        `parent` is not a call of an agent run, if the run would be deeper than
        `AgentLoop.max_depth`, or if the parent has this agent's memory.
        """
        lineage = (
            None
            if parent is None
            else Lineage.of(
                parent, agent=self.name, memory=self.memory, max_depth=self.loop.max_depth
            )
        )
        emit = parent.emit if parent is not None else None
        run = Run(id=uuid.uuid4().hex, lineage=lineage)
        async with aclosing(self._events(prompt, run)) as events:
            async for event in events:
                if emit is not None:
                    emit(event)
                yield event

    async def preview(self, prompt: str) -> ContextWindow:
        """The window a run of `prompt` would be sent on its first call now, built without
        recording, calling or remembering anything (the history marks are a copy), and
        without the documents a `ContextRetriever` would find: for inspecting, and for
        measuring what a window holds at a point of a conversation."""
        check_text_argument(prompt, f"the `prompt` of agent `{self.name}`")
        saved, self._layout = self._layout, copy.deepcopy(self._layout)
        try:
            run = Run(id=uuid.uuid4().hex, lineage=None)
            found = Discoveries(prompt)
            orchestrator = self._orchestrator(
                self._static_context(run), RetrievedContextSource(), self._turn_source(), run, found
            )
            ctx = BuildContext(
                agent_id=self.name,
                session_id=self.memory.node_id,
                turn_index=self.turns_taken,
                now=self._now(),
            )
            with same_view():
                return await orchestrator.build(query=prompt, ctx=ctx)
        finally:
            self._layout = saved

    def _event(self, kind: type[E], run: Run, **fields: Any) -> E:
        return kind(run_id=run.id, agent=self.name, parent_run_id=run.parent_run_id, **fields)

    def _check_prompt(self, prompt: str) -> None:
        """Refuse a prompt that is not valid text, or blank, before anything is recorded: a
        refused prompt must leave memory as it was."""
        check_text_argument(prompt, f"the `prompt` of agent `{self.name}`")
        if not prompt.strip():
            # No user turn: the window would end on the previous reply, which a model reads
            # as its own text to continue (an Anthropic prefill), not as a request.
            raise ConfigError(
                f"the `prompt` of agent `{self.name}` is blank ({prompt!r}); a run answers a "
                "user turn, so pass the user's request, or skip the run when there is none"
            )

    async def _events(self, prompt: str, run: Run) -> AsyncGenerator[AgentEvent, None]:
        """The run itself (`stream` adds the forwarding to a parent)."""
        self._check_prompt(prompt)
        ids = {"run_id": run.id, "agent": self.name}
        retrieved = RetrievedContextSource()
        turn_source = self._turn_source()
        usage: Usage | None = None
        last_text = ""
        turn = 0
        yield self._event(RunStarted, run, turn=0, prompt=prompt)
        try:
            request = self._message(USER_MESSAGE, prompt, run)
            self._record([request])
            execution = run_context(
                agent=self.name,
                tools=self.tools,
                memory=self.memory,
                run_id=run.id,
                request=request,
                lineage=run.lineage,
            )
            found = Discoveries(prompt)
            orchestrator = self._orchestrator(
                self._static_context(run), retrieved, turn_source, run, found
            )
            for turn in range(1, self.loop.max_turns + 1):
                if self.sources.retriever is not None:
                    yield await self._retrieve(self.sources.retriever, found, retrieved, run, turn)
                window = await self._build(orchestrator, prompt, ids, turn)
                yield ContextAssembled.from_report(
                    window.report,
                    run_id=run.id,
                    agent=self.name,
                    turn=turn,
                    parent_run_id=run.parent_run_id,
                )
                completed: Completed | None = None
                async with aclosing(self._reply(window)) as replies:
                    async for part in replies:
                        if isinstance(part, str):
                            yield self._event(LLMTextDelta, run, turn=turn, text=part)
                        else:
                            completed = part
                if completed is None:
                    raise ConfigError(f"LLM {self.llm.name!r} ended its stream without `Completed`")
                reply = completed.message
                if completed.usage is not None:
                    usage = completed.usage if usage is None else usage + completed.usage
                last_text = reply.content
                yield self._completed(completed, window, run, turn)
                if reply.tool_calls:
                    tool_turn = self._tool_turn(
                        completed,
                        run,
                        turn,
                        execution=execution,
                        ids=ids,
                        into=(turn_source, found),
                    )
                    async with aclosing(tool_turn) as events:
                        async for event in events:
                            yield event
                else:
                    self._record([self._message(ASSISTANT_MESSAGE, reply.content, run)])
                yield self._event(
                    TurnCompleted,
                    run,
                    turn=turn,
                    usage=completed.usage,
                    had_tool_calls=bool(reply.tool_calls),
                )
                if not reply.tool_calls:
                    yield self._end(run, turn, last_text, usage, "done")
                    return
            yield self._end(run, turn, last_text, usage, "max_turns")
        except Exception as exc:
            yield self._event(
                ErrorEvent,
                run,
                turn=turn,
                message=str(exc),
                error_type=type(exc).__name__,
                recoverable=False,
            )
            yield self._end(run, turn, last_text, usage, "error")
            raise

    async def _retrieve(
        self,
        retriever: ContextRetriever,
        found: Discoveries,
        retrieved: RetrievedContextSource,
        run: Run,
        turn: int,
    ) -> RetrievalCompleted:
        """Ask the retriever for what the run is after (`Discoveries.query`), and put what it
        found, formatted, into the window's `retrieved` source."""
        query = found.query()
        docs = await retriever.retrieve_for_query(query, self.sources.top_k)
        retrieved.text = retriever.format_documents(docs)
        return self._event(
            RetrievalCompleted,
            run,
            turn=turn,
            query=query,
            documents=tuple(
                RetrievedDocument(id=d.id, score=d.score, preview=d.content[:120]) for d in docs
            ),
        )

    async def _build(
        self, orchestrator: ContextOrchestrator, prompt: str, ids: Mapping[str, str], turn: int
    ) -> ContextWindow:
        """The window of the model call of `turn`."""
        ctx = BuildContext(
            agent_id=self.name,
            session_id=self.memory.node_id,
            turn_index=self.turns_taken,
            progress=self._progress(turn),
            metadata=dict(ids),
            now=self._now(),
        )
        self.turns_taken += 1
        with same_view():  # the memory checks other workers' writes once per build
            return await orchestrator.build(query=prompt, ctx=ctx)

    async def _reply(self, window: ContextWindow) -> AsyncGenerator[str | Completed, None]:
        """The model's reply to `window`: its text deltas, then its `Completed` chunk."""
        chunks = self.llm.stream(window.messages, tools=window.tools, options=self._options(window))
        try:
            async for chunk in chunks:
                if chunk.kind == "text":
                    yield chunk.text
                elif chunk.kind == "completed":
                    yield chunk
        finally:
            await _close(chunks)

    def _completed(
        self, completed: Completed, window: ContextWindow, run: Run, turn: int
    ) -> LLMCompleted:
        """The event of a model call's end: the reply, the usage the provider reported and
        what the window's report predicted of it."""
        reply = completed.message
        return self._event(
            LLMCompleted,
            run,
            turn=turn,
            text=reply.content,
            tool_calls=reply.tool_calls,
            usage=completed.usage,
            finish_reason=completed.finish_reason,
            predicted=CachePrediction(
                cached=window.report.predicted_cached,
                written=window.report.predicted_written,
                plain=window.report.predicted_plain,
            ),
        )

    async def _tool_turn(
        self,
        completed: Completed,
        run: Run,
        turn: int,
        *,
        execution: ExecutionContext,
        ids: Mapping[str, str],
        into: tuple[TurnSource, Discoveries],
    ) -> AsyncGenerator[AgentEvent, None]:
        """Run the reply's tool calls, yielding their events (and their sub-agents') as they
        come; then record the reply with every result as one unit, and add the exchange to
        the run's window (`TurnSource`) and to what the run found (`Discoveries`)."""
        reply = completed.message
        for call in reply.tool_calls:
            yield self._event(ToolCallEvent, run, turn=turn, call=call)
        # Each call's Task id is fixed before the tools run: a sub-agent's Tasks point at it.
        # The Tasks are recorded, completed, with the reply below.
        index = self.turns_taken - 1
        pending = {
            c.id: call_task(c, run, agent=self.name, turn_index=index) for c in reply.tool_calls
        }
        tools = ToolTurn(completed, self._tools(), execution=execution, pending=pending, ids=ids)
        try:
            while (inner := await tools.events.get()) is not None:
                yield inner
            results = tools.work.result()
        finally:
            await tools.stop()  # cancelled, or the stream was closed
        for result in results:
            yield ToolResultEvent.from_result(
                result, run_id=run.id, agent=self.name, turn=turn, parent_run_id=run.parent_run_id
            )
        turn_source, found = into
        turn_source.add(
            (reply, *(r.to_message() for r in results)),
            handles={c.id: handle_for(pending[c.id].task_id) for c in reply.tool_calls},
        )
        self._record(tool_unit(reply, results, pending, run, agent=self.name, turn_index=index))
        found.add(turn=turn, calls=reply.tool_calls, results=results)

    def _end(
        self, run: Run, turn: int, output: str, usage: Usage | None, stopped: str
    ) -> RunCompleted:
        return self._event(
            RunCompleted, run, turn=turn, output=output, turns=turn, usage=usage, stopped=stopped
        )

    def _progress(self, turn: int) -> float:
        """How far the run has come before the model call of `turn`: the task's own signal
        (`AgentLoop.progress`) if it gives one, else the share of `max_turns` used."""
        if self.loop.progress is not None:
            given = self.loop.progress()
            if given is not None:
                if (
                    isinstance(given, bool)
                    or not isinstance(given, int | float)
                    or not 0 <= given <= 1
                ):
                    raise ConfigError(
                        f"the `progress` function of agent `{self.name}` returned {given!r}; "
                        "return a number from 0 to 1, or None to count turns"
                    )
                return float(given)
        return (turn - 1) / self.loop.max_turns

    def _options(self, window: ContextWindow) -> LLMOptions:
        """The call's options: the agent's, with its session as the prompt-cache key and the
        window's stable parts as cache breakpoints (unless the caller set them)."""
        options = self.loop.llm_options or LLMOptions()
        return replace(
            options,
            cache_key=options.cache_key or "/".join(self.memory.namespace),
            cache_breakpoints=options.cache_breakpoints
            or (window.layout.breakpoints() if window.layout is not None else ()),
        )

    def _message(self, action: str, content: str, run: Run) -> Task:
        """A user message (from `run.asker`) or a reply (to it), of the latest model call."""
        return run_message_task(
            action, content, run, agent=self.name, turn_index=self.turns_taken - 1
        )

    def _record(self, tasks: list[Task]) -> None:
        record(tasks, (self.memory, self.sources.shared_pool))


_Setting = TypeVar("_Setting", AgentWindow, AgentSources, AgentLoop)


def _setting(value: object, kind: type[_Setting], argument: str) -> _Setting:
    """`value`, the `argument` of `Agent`, if it is a `kind` (its default for None); else a
    `ConfigError` saying how to pass it."""
    if value is None:
        return kind()
    if not isinstance(value, kind):
        hint = (
            "pass your sources as `sources=AgentSources(extra=[...])`"
            if argument == "sources" and isinstance(value, list | tuple)
            else f"pass `{argument}={kind.__name__}(...)`"
        )
        raise ConfigError(
            f"`Agent({argument}=...)` must be an `{kind.__name__}`, got "
            f"{type(value).__name__}; {hint} (`from loomctx import {kind.__name__}`)"
        )
    return value


async def _close(chunks: AsyncIterator[LLMChunk]) -> None:
    """Close a model's stream we stop reading (it may hold a connection open)."""
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        await aclose()

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
5. The loop recurses until a reply has no tool calls, or `max_turns`.

`stream()` yields typed `AgentEvent`s; `run()` drains it and returns the final text. An agent
becomes another's sub-agent through `as_tool()` or ``run(task, parent=ctx)`` (see
`loomctx.agent.subagent`); a `shared_pool` is a memory several agents read and add to.

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
import threading
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

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
from loomctx.agent.reader import READ_RESULT, result_reader
from loomctx.agent.retriever import ContextRetriever, RetrievedContextSource
from loomctx.agent.subagent import Lineage, delegation_tool, finish, run_context
from loomctx.agent.tools import Tool, ToolContext, ToolResult, run_tool_calls, tool
from loomctx.agent.turns import ExcerptingOrchestrator, Requery, TurnSource
from loomctx.context.assembler import ComponentPriority, ContextAssembler
from loomctx.context.billing import ANTHROPIC, CachePrediction, CachePricing
from loomctx.context.block import BuildContext, ContextSource
from loomctx.context.budget import BudgetManager
from loomctx.context.compactor import CachePolicy
from loomctx.context.excerpt import (
    DEFAULT_EXCERPT_SHARE,
    MIN_EXCERPT_TOKENS,
    check_limit,
    handle_for,
)
from loomctx.context.orchestrator import ContextOrchestrator, ContextWindow, LayoutState
from loomctx.context.recipe import (
    DEFAULT_MAX_DYNAMIC,
    WindowSettings,
    memory_sources,
    window_orchestrator,
    window_sources,
)
from loomctx.context.sources import InheritedSource, SharedPoolSource
from loomctx.context.sources.retrieval import UnifiedRetrievalSource
from loomctx.errors import BudgetExceededError, ConfigError, MessageFormatError
from loomctx.knowledge import KnowledgeBaseProvider
from loomctx.memory.context_builder import ExecutionContext
from loomctx.memory.core import DEFAULT_EMBEDDER, EmbedderDefault, LoomMemory, same_view
from loomctx.memory.task import ASSISTANT_MESSAGE, USER_MESSAGE, Task, TaskStatus
from loomctx.messages import (
    MAX_ARGUMENT_DEPTH,
    Message,
    ToolCall,
    check_text,
    parse_arguments,
)
from loomctx.tokens import TiktokenCounter, TokenCounter, UsageCalibration

if TYPE_CHECKING:
    from loomctx.embeddings import Embedder

__all__ = ["DEFAULT_MAX_DYNAMIC", "Agent", "TurnSource"]

E = TypeVar("E", bound=AgentEvent)

DELEGATION = "delegation"
"""The source that gives a sub-agent its parent's request, as fenced reference data."""

TURN_INDEX = "turn_index"
"""The metadata key of a reply's or tool call's Task: the model call that made it, counted
over the agent's conversation (`BuildContext.turn_index`)."""


@dataclass(frozen=True, slots=True)
class _Run:
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


class Agent:
    """An LLM agent whose context window Loom rebuilds before every model call.

    >>> agent = Agent(llm=OpenAIChatLLM("gpt-4o"), system_instructions="You are helpful.",
    ...               tools=[get_weather])
    >>> answer = await agent.run("Weather in Paris?")

    `tools` are `Tool`s or plain typed functions (wrapped with `loomctx.tool`); `memory` (default:
    a new in-memory `LoomMemory` with `embedder`) carries the conversation across runs;
    `embedder` (default: the shipped offline embedder where installed, see `LoomMemory`; None:
    lexical search only) makes the search of that memory hybrid, embedding in the background
    so that a turn does not wait; `context_retriever` is asked before every call; memory's
    archive and `knowledge_bases` are searched together for every window
    (`UnifiedRetrievalSource`). The window is `model_context_window` tokens with
    `output_reserve_ratio` kept for the reply. `shared_pool` is a memory shared with other
    agents: it is read for every window (`SharedPoolSource`) and gets every Task this agent
    records. `max_depth` is how many delegations below a top-level run this agent may run as
    a sub-agent (see `as_tool`). `cache_policy` says when history is compacted and how much
    of the window the dynamic tail may take (default: the window
    recipe's, `WindowSettings().cache_policy`); the agent remembers where its history starts
    across runs, so each call repeats the previous one's prompt up to the dynamic tail, and a
    provider's prompt cache reads it. History reaches back beyond the memory's L1, from its
    store, as far as the window's room (`loomctx.context.recipe`).

    One large result cannot crowd out the window: a turn's tool results take at most
    `max_result_tokens` together (default: a quarter of the input budget, `window - output
    reserve`), and so does each task of history. Beyond it the longest are shown as a head
    and a tail around a marker naming a handle (``r-<task id>``); the whole text is the Task
    recorded in memory, and an agent with tools also has `read_result`, which reads a slice
    of it by handle (an offset, or the lines that contain a term) from this agent's memory
    only. The report of each window marks such blocks ``truncated`` and says why.

    **Budget.** `budget_manager` (default `BudgetManager()`) splits the input budget among
    the window's sources. The static context (instructions, stage, task context: the stable
    system message, assembled once per run) gets all it needs up to the manager's
    `static_limit`, by default the whole input budget: a 10,000-token system prompt works in
    the default 16,000-token window, and `BudgetExceededError` (raised here, naming the sizes,
    the limit and the fixes) means it truly does not fit. The dynamic context (retrieved
    documents, memory and knowledge) takes at most `cache_policy.max_dynamic` of the input
    and at most the manager's `dynamic_limit`. Seed 001's split, 12,000 static and 4,000
    dynamic tokens of 16,000: ``budget_manager=BudgetManager(static_tokens=12_000,
    dynamic_tokens=4_000)`` in a window whose input budget is 16,000 tokens. An
    `AdaptiveBudgetManager` shifts the split with the run's phase: each build's
    `BuildContext.progress` is `progress()` (the task's own signal, 0..1) when given and not
    None, else the share of `max_turns` used before the call; `BuildContext.turn_index`
    counts this agent's model calls over all its runs (`turns_taken`), continued from what
    its memory recorded when the agent is made again on the same memory.

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
        knowledge_bases: Sequence[KnowledgeBaseProvider] = (),
        source_timeout: float = 2.0,
        shared_pool: LoomMemory | None = None,
        max_depth: int = 5,
        cache_policy: CachePolicy | None = None,
        max_result_tokens: int | None = None,
        budget_manager: BudgetManager | None = None,
        progress: Callable[[], float | None] | None = None,
        embedder: Embedder | Literal[EmbedderDefault.EMBEDDER] | None = DEFAULT_EMBEDDER,
    ) -> None:
        for setting, value in (("max_turns", max_turns), ("max_depth", max_depth)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"`{setting}` must be an int >= 1, got {value!r}")
        # Checked here, not when the first window is built: by then the run has recorded
        # the user's turn, and the error would name a `system` message, not the argument.
        for setting, text in (
            ("system_instructions", system_instructions),
            ("stage", stage),
            ("task_context", task_context),
        ):
            _check_text(text, f"the `{setting}` of agent `{name}`")
        check_limit(max_result_tokens, "`max_result_tokens`")
        if budget_manager is not None and not isinstance(budget_manager, BudgetManager):
            raise ConfigError(
                f"`budget_manager` must be a BudgetManager (or AdaptiveBudgetManager), got "
                f"{type(budget_manager).__name__}"
            )
        if progress is not None and not callable(progress):
            raise ConfigError(
                f"`progress` must be a function returning the task's progress (0..1, or None "
                f"to count turns), got {progress!r}"
            )
        self.budget_manager = budget_manager or BudgetManager()
        self.progress = progress
        self.llm = llm
        pricing = getattr(llm, "pricing", None)
        self.pricing: CachePricing = pricing if isinstance(pricing, CachePricing) else ANTHROPIC
        self.name = name
        self.system_instructions = system_instructions
        self.tools = [t if isinstance(t, Tool) else tool(t) for t in tools]
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise ConfigError(f"two tools share a name in {names!r}; tool names must be unique")
        _check_reader_name(names)
        self.context_retriever = context_retriever
        self.counter = token_counter or TiktokenCounter()
        if memory is not None and embedder is not DEFAULT_EMBEDDER:
            raise ConfigError(
                f"agent `{name}` was given both `memory` and `embedder`; the embedder is for "
                "the memory the agent makes itself: pass it to your `LoomMemory(embedder=...)`"
            )
        self.memory = memory or LoomMemory(name, counter=self.counter, embedder=embedder)
        if shared_pool is not None and not isinstance(shared_pool, LoomMemory):
            raise ConfigError(
                f"`shared_pool` must be a LoomMemory, got {type(shared_pool).__name__}"
            )
        if shared_pool is self.memory:
            raise ConfigError(
                "`shared_pool` is the agent's own `memory`; give the agents that share a pool "
                "a `LoomMemory` of its own"
            )
        self.shared_pool = shared_pool
        self.max_turns = max_turns
        self.max_depth = max_depth
        self.model_context_window = model_context_window
        self.output_reserve_ratio = output_reserve_ratio
        self.retrieval_top_k = retrieval_top_k
        self.stage = stage
        self.task_context = task_context
        self.llm_options = llm_options
        self.extra_sources = list(sources)
        own = {"system_prompt", "tools", "retrieved", "L1_recent", "L2_important", "turn",
               "user_input", "unified_retrieval", "inherited", "shared_pool",
               DELEGATION}  # fmt: skip
        for source in self.extra_sources:
            if isinstance(source, UnifiedRetrievalSource) and source.name == "unified_retrieval":
                raise ConfigError(
                    "the agent already searches its memory and knowledge bases with a "
                    "`UnifiedRetrievalSource` of its own; pass the knowledge bases as "
                    "`Agent(..., knowledge_bases=[...])` instead of this source, or give it "
                    "another `name=` to search as well"
                )
            if getattr(source, "name", None) in own:
                raise ConfigError(
                    f"source `{source.name}` in `sources` has the name of a source the agent "
                    "adds itself; give it another `name=`"
                )
        self.knowledge_bases = list(knowledge_bases)
        self.source_timeout = source_timeout
        self.cache_policy = cache_policy or WindowSettings().cache_policy
        self.max_result_tokens = max_result_tokens
        self._reader: tuple[tuple[LoomMemory, int], Tool] | None = None
        # History marks and the previous window, across runs: history stays append-only.
        self._layout = LayoutState()
        # Model calls made so far in this agent's conversation (`BuildContext.turn_index`):
        # counted on from what its memory recorded, so a new Agent on the same memory (a
        # restart, a server's next request) does not start again at 0.
        self.turns_taken = _turns_recorded(self.memory, name)
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
        `parent` is not a call of an agent run, if the run would be deeper than `max_depth`,
        or if the parent has this agent's memory.
        """
        lineage = (
            None
            if parent is None
            else Lineage.of(parent, agent=self.name, memory=self.memory, max_depth=self.max_depth)
        )
        emit = parent.emit if parent is not None else None
        async with aclosing(self._events(prompt, _Run(uuid.uuid4().hex, lineage))) as events:
            async for event in events:
                if emit is not None:
                    emit(event)
                yield event

    async def preview(self, prompt: str) -> ContextWindow:
        """The window a run of `prompt` would be sent on its first call now, built without
        recording, calling or remembering anything (the history marks are a copy), and
        without the documents a `context_retriever` would find: for inspecting, and for
        measuring what a window holds at a point of a conversation."""
        _check_text(prompt, f"the `prompt` of agent `{self.name}`")
        saved, self._layout = self._layout, copy.deepcopy(self._layout)
        try:
            run = _Run(uuid.uuid4().hex, None)
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

    def _now(self) -> datetime:
        """The memory's time (the wall clock unless it was given a clock of its own), as
        the build's: whether the provider's cache has gone cold is counted in it."""
        now = self.memory.clock()
        return now if now.utcoffset() is not None else now.replace(tzinfo=UTC)

    def _result_limit(self) -> int:
        """The most tokens one turn's tool results (or one item of history) take in the
        window before the longest are shown as excerpts."""
        if self.max_result_tokens is not None:
            return self.max_result_tokens
        available = self._available()
        # A large system prompt leaves less room: results take at most half of what it
        # leaves, so the newest exchange (pinned) still fits beside it.
        left = (available - self._static_tokens) // 2
        return max(MIN_EXCERPT_TOKENS, min(int(available * DEFAULT_EXCERPT_SHARE), left))

    def _available(self) -> int:
        """The input budget: the window less the reply's reserve."""
        available, _ = BudgetManager.available(
            self._window(), output_reserve_ratio=self.output_reserve_ratio
        )
        return available

    def _window(self) -> int:
        """The window in Loom's tokens. Where the provider counts differently and says so
        (an `AnthropicLLM` with a `UsageCalibration`: Claude is counted with o200k, an
        estimate), the window the calibration deems safe, learnt from earlier calls' usage."""
        calibration = getattr(self.llm, "calibration", None)
        model = getattr(self.llm, "model", None)
        if isinstance(calibration, UsageCalibration) and isinstance(model, str):
            return calibration.safe_window(model, self.model_context_window)
        return self.model_context_window

    def _tools(self) -> list[Tool]:
        """The agent's tools, and the reader of excerpted results after them (none without
        tools: an agent that calls none gets no results to excerpt)."""
        if not self.tools:
            return []
        _check_reader_name([t.name for t in self.tools])
        limit = self._result_limit()
        if self._reader is None or self._reader[0] != (self.memory, limit):
            # An answer takes half a turn's room for results: reading never needs cutting.
            reader = result_reader(self.memory, counter=self.counter, max_tokens=limit // 2)
            self._reader = ((self.memory, limit), reader)
        return [*self.tools, self._reader[1]]

    def _turn_source(self) -> TurnSource:
        return TurnSource(
            max_result_tokens=self._result_limit(),
            read_tool=READ_RESULT if self.tools else None,
        )

    def _static_context(self, run: _Run | None) -> str:
        """The instructions, stage and task context (and a sub-agent's note), assembled within
        the budget manager's `static_limit`: all they need, up to the whole input budget by
        default; `BudgetExceededError` (naming the sizes, the limit and the fixes) if the
        must-keep parts do not fit it."""
        available = self._available()
        limit = self.budget_manager.static_limit(available)
        assembler = ContextAssembler(
            max_tokens=max(1, limit), token_counter=self.counter, order="insertion"
        )
        assembler.add_component(
            "instructions", self.system_instructions, ComponentPriority.CRITICAL, truncatable=False
        )
        assembler.add_component("stage", self.stage, ComponentPriority.CRITICAL, truncatable=False)
        if run is not None and run.lineage is not None:
            assembler.add_component(
                "delegation",
                f"You are a sub-agent: agent `{run.asker}` delegated the task in the user turn "
                "to you while working on a request of its own (quoted in the reference "
                f"context, source `{DELEGATION}`). Your final reply is returned to "
                f"`{run.asker}` as the result.",
                ComponentPriority.HIGH,
            )
        assembler.add_component("task_context", self.task_context, ComponentPriority.HIGH)
        try:
            text = assembler.assemble()
        except BudgetExceededError as exc:
            raise BudgetExceededError(
                offenders=exc.offenders,
                budget=exc.budget,
                hint=f"that is what the static context of agent `{self.name}` may take of its "
                f"{available} input tokens (`model_context_window` {self.model_context_window} "
                f"less the reply's reserve); shorten them, raise `model_context_window`, lower "
                "`output_reserve_ratio`, or raise the static limit with "
                "`budget_manager=BudgetManager(static_ratio=..., static_tokens=...)`",
            ) from None
        if self.stage or self.task_context or (run is not None and run.lineage is not None):
            return text
        # Instructions alone need no section header: the system message is the instructions,
        # as the proxy and a `Session` send them.
        return self.system_instructions

    def _orchestrator(
        self,
        static: str,
        retrieved: RetrievedContextSource,
        turn: TurnSource,
        run: _Run,
        found: Discoveries,
    ) -> ContextOrchestrator:
        tools = self._tools()
        memory: list[ContextSource] = []
        if run.lineage is None:
            history, important, retrieval = memory_sources(
                self.memory,
                self.knowledge_bases,
                settings=self._settings(),
                max_item_tokens=self._result_limit(),
                read_tool=READ_RESULT if tools else None,
            )
            memory = [history, important, Requery(retrieval, found)]
        else:  # a sub-agent's window starts clean, with its parent's context to read
            # The parent's request is the user's text: reference data, never system text.
            delegation = RetrievedContextSource(name=DELEGATION, priority=1.0)
            delegation.text = run.lineage.request
            memory = [delegation, InheritedSource(run.lineage.memory)]
            if self.knowledge_bases:
                memory.append(
                    Requery(UnifiedRetrievalSource(knowledge_bases=self.knowledge_bases), found)
                )
        extra = list(self.extra_sources)
        if self.shared_pool is not None:
            extra.insert(0, SharedPoolSource(self.shared_pool))
        sources = window_sources(
            static,
            # The reader always goes in when there are tools: excerpt markers name it.
            tools=[t.schema() for t in tools],
            always=[READ_RESULT],
            retrieved=[retrieved] if self.context_retriever is not None else [],
            memory=memory,
            extra=extra,
            turn=turn,
        )
        orchestrator = window_orchestrator(
            sources,
            counter=self.counter,
            window=self._window(),
            settings=self._settings(),
            output_reserve_ratio=self.output_reserve_ratio,
            budget_manager=self.budget_manager,
            source_timeout=self.source_timeout,
            state=self._layout if run.lineage is None else None,
            kind=ExcerptingOrchestrator,
        )
        orchestrator.pricing = self.pricing
        return orchestrator

    def _settings(self) -> WindowSettings:
        """The window recipe's settings for this agent's windows."""
        return WindowSettings(cache_policy=self.cache_policy)

    async def _events(self, prompt: str, run: _Run) -> AsyncGenerator[AgentEvent, None]:
        """The run itself (`stream` adds the forwarding to a parent)."""
        # Before anything is recorded: a refused prompt must leave memory as it was.
        _check_text(prompt, f"the `prompt` of agent `{self.name}`")
        if not prompt.strip():
            # No user turn: the window would end on the previous reply, which a model reads
            # as its own text to continue (an Anthropic prefill), not as a request.
            raise ConfigError(
                f"the `prompt` of agent `{self.name}` is blank ({prompt!r}); a run answers a "
                "user turn, so pass the user's request, or skip the run when there is none"
            )
        ids = {"run_id": run.id, "agent": self.name}
        retrieved = RetrievedContextSource()
        turn_source = self._turn_source()
        usage: Usage | None = None
        last_text = ""
        turn = 0

        def event(kind: type[E], **fields: Any) -> E:
            return kind(run_id=run.id, agent=self.name, parent_run_id=run.parent_run_id, **fields)

        yield event(RunStarted, turn=0, prompt=prompt)
        try:
            request = self._task(USER_MESSAGE, prompt, run)
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
            for turn in range(1, self.max_turns + 1):
                if self.context_retriever is not None:
                    query = found.query()
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
                    turn_index=self.turns_taken,
                    progress=self._progress(turn),
                    metadata=ids,
                    now=self._now(),
                )
                self.turns_taken += 1
                with same_view():  # the memory checks other workers' writes once per build
                    window = await orchestrator.build(query=prompt, ctx=ctx)
                yield ContextAssembled.from_report(
                    window.report,
                    run_id=run.id,
                    agent=self.name,
                    turn=turn,
                    parent_run_id=run.parent_run_id,
                )
                completed: Completed | None = None
                chunks = self.llm.stream(
                    window.messages, tools=window.tools, options=self._options(window)
                )
                try:
                    async for chunk in chunks:
                        if chunk.kind == "text":
                            yield event(LLMTextDelta, turn=turn, text=chunk.text)
                        elif chunk.kind == "completed":
                            completed = chunk
                finally:
                    await _close(chunks)
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
                    predicted=CachePrediction(
                        cached=window.report.predicted_cached,
                        written=window.report.predicted_written,
                        plain=window.report.predicted_plain,
                    ),
                )
                if not reply.tool_calls:
                    self._record([self._task(ASSISTANT_MESSAGE, reply.content, run)])
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
                # Each call's Task id is fixed before the tools run: a sub-agent's Tasks
                # point at it. The Tasks are recorded, completed, with the reply below.
                pending = {c.id: self._call_task(c, run) for c in reply.tool_calls}
                work, channel = self._start_tools(completed, execution, pending, ids)
                try:
                    while (inner := await channel.get()) is not None:
                        yield inner
                    results = work.result()
                finally:
                    if not work.done():  # cancelled, or the stream was closed
                        work.cancel()
                        await asyncio.wait([work])
                for result in results:
                    yield ToolResultEvent.from_result(
                        result,
                        run_id=run.id,
                        agent=self.name,
                        turn=turn,
                        parent_run_id=run.parent_run_id,
                    )
                turn_source.add(
                    (reply, *(r.to_message() for r in results)),
                    handles={c.id: handle_for(pending[c.id].task_id) for c in reply.tool_calls},
                )
                self._record_tools(reply, results, run, pending)
                found.add(turn=turn, calls=reply.tool_calls, results=results)
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

    def _progress(self, turn: int) -> float:
        """How far the run has come before the model call of `turn`: the task's own signal
        (`progress`) if it gives one, else the share of `max_turns` used."""
        if self.progress is not None:
            given = self.progress()
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
        return (turn - 1) / self.max_turns

    def _options(self, window: ContextWindow) -> LLMOptions:
        """The call's options: the agent's, with its session as the prompt-cache key and the
        window's stable parts as cache breakpoints (unless the caller set them)."""
        options = self.llm_options or LLMOptions()
        return replace(
            options,
            cache_key=options.cache_key or "/".join(self.memory.namespace),
            cache_breakpoints=options.cache_breakpoints
            or (window.layout.breakpoints() if window.layout is not None else ()),
        )

    def _start_tools(
        self,
        completed: Completed,
        execution: ExecutionContext,
        pending: Mapping[str, Task],
        ids: Mapping[str, str],
    ) -> tuple[asyncio.Task[list[ToolResult]], asyncio.Queue[AgentEvent | None]]:
        """Run the reply's calls in a task of their own, so that the run can yield the events
        its sub-agents emit meanwhile; they arrive on the channel, then None at the end."""
        channel: asyncio.Queue[AgentEvent | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        home = threading.get_ident()

        def emit(event: AgentEvent) -> None:
            if threading.get_ident() == home:
                channel.put_nowait(event)
            else:  # from a sync tool's worker thread
                loop.call_soon_threadsafe(channel.put_nowait, event)

        work = asyncio.create_task(self._run_tools(completed, execution, pending, ids, emit))
        work.add_done_callback(lambda _: channel.put_nowait(None))
        return work, channel

    async def _run_tools(
        self,
        completed: Completed,
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
                self._tools(),
                metadata=ids,
                executions={c.id: replace(execution, current_task=pending[c.id]) for c in runnable},
                emit=emit,
            )
        )
        return [
            ToolResult(
                call_id=c.id,
                name=c.name,
                content=_not_run(c, invalid[c.id]),
                is_error=True,
                elapsed_ms=0.0,
            )
            if c.id in invalid
            else next(ran)
            for c in calls
        ]

    def _task(self, action: str, content: str, run: _Run) -> Task:
        """A user message (from `run.asker`) or a reply (to it)."""
        asked = action == USER_MESSAGE
        return Task(
            source_agent=run.asker if asked else self.name,
            target_agent=self.name if asked else run.asker,
            action=action,
            parameters={"content": content},
            status=TaskStatus.COMPLETED,
            metadata={"run_id": run.id, "agent": self.name}
            if asked
            else {"run_id": run.id, "agent": self.name, TURN_INDEX: self.turns_taken - 1},
            parent_task_id=run.parent_task_id,
        )

    def _call_task(self, call: ToolCall, run: _Run) -> Task:
        return Task(
            source_agent=self.name,
            target_agent=call.name,
            action=call.name,
            parameters=dict(call.arguments),
            status=TaskStatus.RUNNING,
            metadata={
                "run_id": run.id,
                "agent": self.name,
                "tool_call_id": call.id,
                TURN_INDEX: self.turns_taken - 1,
            },
            parent_task_id=run.parent_task_id,
        )

    def _record_tools(
        self,
        reply: Message,
        results: Sequence[ToolResult],
        run: _Run,
        pending: Mapping[str, Task],
    ) -> None:
        """The reply and all its calls, completed, in one write: a whole unit or nothing."""
        tasks = [self._task(ASSISTANT_MESSAGE, reply.content, run)] if reply.content else []
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
        self._record(tasks)

    def _record(self, tasks: list[Task]) -> None:
        for memory in (self.memory, self.shared_pool):
            if memory is not None:
                memory.add_tasks(tasks)
                memory.promote_tasks()


def _turns_recorded(memory: LoomMemory, agent: str) -> int:
    """The model calls agent `agent` made in `memory`'s conversation: one more than the
    newest `TURN_INDEX` its replies and tool calls carry in L1 (0 for none)."""
    latest = -1
    for task in memory.get_l1_tasks(limit=memory.max_l1_size):
        index = task.metadata.get(TURN_INDEX)
        if task.metadata.get("agent") == agent and isinstance(index, int):
            latest = max(latest, index)
    return latest + 1


def _check_text(value: object, what: str) -> None:
    """Refuse `value`, the text argument `what`, unless it is a string of valid Unicode
    (`ConfigError`; `MessageFormatError` for a surrogate, with its position)."""
    if not isinstance(value, str):
        raise ConfigError(f"{what} must be a string, got {type(value).__name__} {value!r:.60}")
    check_text(value, what)


def _not_run(call: ToolCall, raw: str) -> str:
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


def _check_reader_name(names: Sequence[str]) -> None:
    if READ_RESULT in names:
        raise ConfigError(
            f"a tool is named `{READ_RESULT}`, the name of the agent's own tool that reads "
            "tool results shown only in part; give your tool another name"
        )


async def _close(chunks: AsyncIterator[LLMChunk]) -> None:
    """Close a model's stream we stop reading (it may hold a connection open)."""
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        await aclose()

"""How an `Agent` builds its windows with the one window recipe (`loomctx.context.recipe`).

The static context (instructions, stage, task context, and a sub-agent's note on who
delegated to it) is assembled once per run within the budget manager's `static_limit`: the
window's stable system message. A top-level run's window then holds the agent's history,
important memory and retrieval over memory and knowledge bases, asked again with what the
run found (`Requery`); a sub-agent's starts clean, with its parent's request as reference
data and its parent's memory to read (`InheritedSource`). Both end with the run's exchange
(`TurnSource`) and the user's turn.

One large result cannot crowd out the window: a turn's tool results take at most
`AgentWindow.max_result_tokens` together (default: a quarter of the input budget, less
beside a large system prompt), and so does each task of history; beyond it the longest are
shown as excerpts that the agent's `read_result` tool reads on.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from loomctx.agent._record import Run
from loomctx.agent.discovery import Discoveries
from loomctx.agent.llm import LLM
from loomctx.agent.reader import READ_RESULT, result_reader
from loomctx.agent.retriever import RetrievedContextSource
from loomctx.agent.settings import DELEGATION, AgentSources, AgentWindow
from loomctx.agent.tools import Tool
from loomctx.agent.turns import ExcerptingOrchestrator, Requery, TurnSource
from loomctx.context.assembler import ComponentPriority, ContextAssembler
from loomctx.context.billing import CachePricing
from loomctx.context.block import ContextSource
from loomctx.context.budget import BudgetManager
from loomctx.context.compactor import CachePolicy
from loomctx.context.excerpt import DEFAULT_EXCERPT_SHARE, MIN_EXCERPT_TOKENS
from loomctx.context.orchestrator import ContextOrchestrator, LayoutState
from loomctx.context.recipe import (
    WindowSettings,
    memory_sources,
    window_orchestrator,
    window_sources,
)
from loomctx.context.sources import InheritedSource, SharedPoolSource
from loomctx.context.sources.retrieval import UnifiedRetrievalSource
from loomctx.errors import BudgetExceededError, ConfigError
from loomctx.knowledge import KnowledgeBaseProvider
from loomctx.memory.core import LoomMemory
from loomctx.messages import check_text
from loomctx.tokens import TokenCounter, UsageCalibration

__all__ = ["AgentWindows", "check_reader_name", "check_text_argument"]


class AgentWindows:
    """The part of `Agent` that builds its windows: what it reads of the agent is declared
    here, and `Agent` sets it."""

    llm: LLM
    name: str
    system_instructions: str
    tools: list[Tool]
    memory: LoomMemory
    knowledge_bases: list[KnowledgeBaseProvider]
    window: AgentWindow
    sources: AgentSources
    counter: TokenCounter
    budget_manager: BudgetManager
    cache_policy: CachePolicy
    pricing: CachePricing
    _layout: LayoutState
    _reader: tuple[tuple[LoomMemory, int], Tool] | None
    _static_tokens: int

    def _now(self) -> datetime:
        """The memory's time (the wall clock unless it was given a clock of its own), as
        the build's: whether the provider's cache has gone cold is counted in it."""
        now = self.memory.clock()
        return now if now.utcoffset() is not None else now.replace(tzinfo=UTC)

    def _result_limit(self) -> int:
        """The most tokens one turn's tool results (or one item of history) take in the
        window before the longest are shown as excerpts."""
        if self.window.max_result_tokens is not None:
            return self.window.max_result_tokens
        available = self._available()
        # A large system prompt leaves less room: results take at most half of what it
        # leaves, so the newest exchange (pinned) still fits beside it.
        left = (available - self._static_tokens) // 2
        return max(MIN_EXCERPT_TOKENS, min(int(available * DEFAULT_EXCERPT_SHARE), left))

    def _available(self) -> int:
        """The input budget: the window less the reply's reserve."""
        available, _ = BudgetManager.available(
            self._window_tokens(), output_reserve_ratio=self.window.output_reserve_ratio
        )
        return available

    def _window_tokens(self) -> int:
        """The window in Loom's tokens. Where the provider counts differently and says so
        (an `AnthropicLLM` with a `UsageCalibration`: Claude is counted with o200k, an
        estimate), the window the calibration deems safe, learnt from earlier calls' usage."""
        calibration = getattr(self.llm, "calibration", None)
        model = getattr(self.llm, "model", None)
        tokens = self.window.model_context_window
        if isinstance(calibration, UsageCalibration) and isinstance(model, str):
            return calibration.safe_window(model, tokens)
        return tokens

    def _tools(self) -> list[Tool]:
        """The agent's tools, and the reader of excerpted results after them (none without
        tools: an agent that calls none gets no results to excerpt)."""
        if not self.tools:
            return []
        check_reader_name([t.name for t in self.tools])
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

    def _static_context(self, run: Run | None) -> str:
        """The instructions, stage and task context (and a sub-agent's note), assembled within
        the budget manager's `static_limit`: all they need, up to the whole input budget by
        default; `BudgetExceededError` (naming the sizes, the limit and the fixes) if the
        must-keep parts do not fit it."""
        available = self._available()
        limit = self.budget_manager.static_limit(available)
        assembler = ContextAssembler(
            max_tokens=max(1, limit), token_counter=self.counter, order="insertion"
        )
        stage, task_context = self.sources.stage, self.sources.task_context
        critical = ComponentPriority.CRITICAL
        assembler.add_component(
            "instructions", self.system_instructions, critical, truncatable=False
        )
        assembler.add_component("stage", stage, critical, truncatable=False)
        delegated = run is not None and run.lineage is not None
        if run is not None and delegated:
            assembler.add_component(
                "delegation",
                f"You are a sub-agent: agent `{run.asker}` delegated the task in the user turn "
                "to you while working on a request of its own (quoted in the reference "
                f"context, source `{DELEGATION}`). Your final reply is returned to "
                f"`{run.asker}` as the result.",
                ComponentPriority.HIGH,
            )
        assembler.add_component("task_context", task_context, ComponentPriority.HIGH)
        try:
            text = assembler.assemble()
        except BudgetExceededError as exc:
            raise BudgetExceededError(
                offenders=exc.offenders,
                budget=exc.budget,
                hint=f"that is what the static context of agent `{self.name}` may take of its "
                f"{available} input tokens (`AgentWindow.model_context_window` "
                f"{self.window.model_context_window} less the reply's reserve); shorten them, "
                "raise `model_context_window`, lower `output_reserve_ratio`, or raise the "
                "static limit with `AgentWindow(budget_manager=BudgetManager(static_ratio=..., "
                "static_tokens=...))`",
            ) from None
        if stage or task_context or delegated:
            return text
        # Instructions alone need no section header: the system message is the instructions,
        # as the proxy and a `Session` send them.
        return self.system_instructions

    def _orchestrator(
        self,
        static: str,
        retrieved: RetrievedContextSource,
        turn: TurnSource,
        run: Run,
        found: Discoveries,
    ) -> ContextOrchestrator:
        """The orchestrator that builds every window of one run (`run`) with the recipe."""
        tools = self._tools()
        sources = window_sources(
            static,
            # The reader always goes in when there are tools: excerpt markers name it.
            tools=[t.schema() for t in tools],
            always=[READ_RESULT],
            retrieved=[retrieved] if self.sources.retriever is not None else [],
            memory=self._memory_sources(run, found, read=bool(tools)),
            extra=self._extra_sources(),
            turn=turn,
        )
        orchestrator = window_orchestrator(
            sources,
            counter=self.counter,
            window=self._window_tokens(),
            settings=self._settings(),
            output_reserve_ratio=self.window.output_reserve_ratio,
            budget_manager=self.budget_manager,
            source_timeout=self.sources.timeout,
            state=self._layout if run.lineage is None else None,
            kind=ExcerptingOrchestrator,
        )
        orchestrator.pricing = self.pricing
        return orchestrator

    def _memory_sources(self, run: Run, found: Discoveries, *, read: bool) -> list[ContextSource]:
        """A top-level run's memory (history, important memory, retrieval asked again with
        what the run found); a sub-agent's parent's request and memory, and the knowledge
        bases."""
        if run.lineage is None:
            history, important, retrieval = memory_sources(
                self.memory,
                self.knowledge_bases,
                settings=self._settings(),
                max_item_tokens=self._result_limit(),
                read_tool=READ_RESULT if read else None,
            )
            return [history, important, Requery(retrieval, found)]
        # A sub-agent's window starts clean, with its parent's context to read. The parent's
        # request is the user's text: reference data, never system text.
        delegation = RetrievedContextSource(name=DELEGATION, priority=1.0)
        delegation.text = run.lineage.request
        memory: list[ContextSource] = [delegation, InheritedSource(run.lineage.memory)]
        if self.knowledge_bases:
            memory.append(
                Requery(UnifiedRetrievalSource(knowledge_bases=self.knowledge_bases), found)
            )
        return memory

    def _extra_sources(self) -> list[ContextSource]:
        """The shared pool (when there is one), then the sources of the agent's user."""
        extra = list(self.sources.extra)
        if self.sources.shared_pool is not None:
            extra.insert(0, SharedPoolSource(self.sources.shared_pool))
        return extra

    def _settings(self) -> WindowSettings:
        """The window recipe's settings for this agent's windows."""
        return WindowSettings(cache_policy=self.cache_policy)


def check_text_argument(value: object, what: str) -> None:
    """Refuse `value`, the text argument `what`, unless it is a string of valid Unicode
    (`ConfigError`; `MessageFormatError` for a surrogate, with its position)."""
    if not isinstance(value, str):
        raise ConfigError(f"{what} must be a string, got {type(value).__name__} {value!r:.60}")
    check_text(value, what)


def check_reader_name(names: Sequence[str]) -> None:
    """Refuse a tool named as the agent's own reader of excerpted results."""
    if READ_RESULT in names:
        raise ConfigError(
            f"a tool is named `{READ_RESULT}`, the name of the agent's own tool that reads "
            "tool results shown only in part; give your tool another name"
        )

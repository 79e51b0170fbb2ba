"""`ContextOrchestrator`: the best window that fits an exact budget, built before every call.

One build (DESIGN.md section 2):

1. allocate  the budget manager splits `window - output reserve` among the sources;
2. collect   every source at once, each under a deadline, failures isolated;
3. compact   pinned content first, then history append-only from where the last build of
             the session started it (compacted in steps when it outgrows its room), then each
             source within its grant, then what is left to the sources that want more;
4. render    the fixed layout built for provider prompt caches (`loomctx.context.render`),
             then the exact count of the rendered messages and tools; if boundary effects push
             it over, select again with less room.

The result is a `ContextWindow`: messages ready for a provider, the tools to send with them,
the blocks kept, the exact token count, where the layout's parts are, and a `ContextReport`
saying what went in and why, and how much of it repeats the session's previous window.

What a build must remember of the previous ones (per session: where history starts, its
frozen summary, the previous window's prompt) lives in a `LayoutState`. An orchestrator has
one of its own; pass the same `state=` to orchestrators made per run (as `Agent` does) so that
history stays append-only across them.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from loomctx.context.billing import ANTHROPIC, CachePricing
from loomctx.context.block import BuildContext, ContextBlock, ContextSource
from loomctx.context.budget import BudgetManager
from loomctx.context.collector import Collected, ContextCollector
from loomctx.context.compactor import (
    CachePolicy,
    Candidate,
    Compaction,
    ContextCompactor,
    Decision,
    held_tasks,
    task_of,
)
from loomctx.context.layout_state import LayoutState, cache_marks, repeated_prefix_tokens
from loomctx.context.render import Layout, block_cost, render, section_overhead
from loomctx.context.report import BlockRow, Blocks, ContextReport, SourceReport
from loomctx.context.selection import new_candidate
from loomctx.errors import BudgetExceededError, ConfigError, Oversize
from loomctx.memory.core import build_view
from loomctx.messages import (
    Message,
    mark_anthropic_cache,
    to_anthropic,
    to_anthropic_tools,
    to_openai,
    to_openai_tools,
)
from loomctx.tokens import TiktokenCounter, TokenCounter

__all__ = [
    "ContextOrchestrator",
    "ContextWindow",
    "LayoutState",
    "cache_marks",
    "repeated_prefix_tokens",
]  # the last three live in `loomctx.context.layout_state`

_MAX_ROUNDS = 4
_MESSAGE_COST_CACHE = 65_536
_TEXT_COST_CACHE = 4096


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextWindow:
    """A built window: `messages` and `tools` to send, and the account of how it was built."""

    messages: tuple[Message, ...]
    tools: tuple[Mapping[str, Any], ...]
    blocks: tuple[ContextBlock, ...]
    token_count: int
    report: ContextReport
    layout: Layout | None = None

    def to_openai(self) -> dict[str, Any]:
        """Keyword arguments for OpenAI's chat completions: `messages` (and `tools`)."""
        out: dict[str, Any] = {"messages": to_openai(self.messages)}
        if self.tools:
            out["tools"] = to_openai_tools(self.tools)
        return out

    def to_anthropic(self, *, cache: bool = True) -> dict[str, Any]:
        """Keyword arguments for Anthropic's messages API: `system`, `messages` (and `tools`).

        With `cache` (the default), prompt-cache breakpoints (``cache_control``, at most four)
        mark the end of the stable prefix (tools and system), of the frozen summary of
        compacted history, of the history, and of everything before the dynamic tail: the
        next call of the session reads all of that from Anthropic's cache.
        """
        tools = to_anthropic_tools(self.tools) if self.tools else []
        if cache and self.layout is not None:
            system, messages, tools = mark_anthropic_cache(
                self.messages, self.layout.breakpoints(), tools=tools
            )
        else:
            system, messages = to_anthropic(self.messages)
        out: dict[str, Any] = {"messages": messages}
        if system is not None:
            out["system"] = system
        if tools:
            out["tools"] = tools
        return out


class ContextOrchestrator:
    """Builds the context window for a query from many sources within an exact budget.

    >>> orchestrator = ContextOrchestrator(
    ...     token_counter=TiktokenCounter(),
    ...     sources=[PromptSource("You are helpful."), HistorySource(history), UserInputSource()],
    ...     model_context_window=8000,
    ...     output_reserve_ratio=0.125,
    ... )
    >>> window = await orchestrator.build(query="What did we decide?")

    `output_reserve_ratio` (default 0.2) or `max_output_tokens` sets what is kept free for the
    reply. Each source is given `source_timeout` seconds. `cache_policy` says when history is
    compacted (see `CachePolicy`); `state` is what builds remember of a session's previous
    windows (default: a `LayoutState` of this orchestrator's own). `pricing` is the provider's
    cache (`loomctx.context.billing`, default `ANTHROPIC`): each report predicts what the
    call's prompt is billed under it.
    """

    def __init__(
        self,
        *,
        token_counter: TokenCounter | None = None,
        sources: Sequence[ContextSource] = (),
        model_context_window: int = 8192,
        output_reserve_ratio: float | None = None,
        max_output_tokens: int | None = None,
        budget_manager: BudgetManager | None = None,
        compactor: ContextCompactor | None = None,
        source_timeout: float = 2.0,
        cache_policy: CachePolicy | None = None,
        state: LayoutState | None = None,
        pricing: CachePricing | None = None,
    ) -> None:
        self.token_counter = token_counter or TiktokenCounter()
        self.budget_manager = budget_manager or BudgetManager()
        self.available, self.output_reserve = self.budget_manager.available(
            model_context_window,
            output_reserve_ratio=output_reserve_ratio,
            max_output_tokens=max_output_tokens,
        )
        self.model_context_window = model_context_window
        self.compactor = compactor or ContextCompactor()
        self.cache_policy = cache_policy or CachePolicy()
        self.state = state if state is not None else LayoutState()
        self.pricing = pricing or ANTHROPIC
        self.collector = ContextCollector(timeout=source_timeout)
        self.sources: list[ContextSource] = []
        self._message_costs: OrderedDict[int, tuple[tuple[Message, ...], int]] = OrderedDict()
        self._text_costs: OrderedDict[tuple[str, ...], int] = OrderedDict()
        for source in sources:
            self.add_source(source)

    def add_source(self, source: ContextSource) -> None:
        """Add a source; its name must be unique among this orchestrator's sources."""
        if not isinstance(source, ContextSource):
            raise ConfigError(
                f"{type(source).__name__} is not a ContextSource: it needs `name`, `priority` "
                "and `async collect(query, budget, *, ctx)`"
            )
        if any(s.name == source.name for s in self.sources):
            raise ConfigError(
                f"two sources are named `{source.name}`; give one a different `name=`"
            )
        if not 0.0 <= source.priority <= 1.0:
            raise ConfigError(f"source `{source.name}` has priority {source.priority!r}; use 0..1")
        self.sources.append(source)

    async def build(
        self, query: str = "", *, ctx: BuildContext | None = None, prefill: bool = False
    ) -> ContextWindow:
        """The window for `query` (the current user turn; may be blank mid-run, where the
        exchange in flight ends the window).

        A window never ends on an assistant message unless `prefill` is True: Anthropic reads
        one as the start of its own reply to continue, not as a request. Without a user turn
        (a blank `query`) the window would end on the last message history offers, often the
        previous reply; that build raises `ConfigError` before the session's layout state
        changes. Pass `prefill=True` to send such a window on purpose."""
        ctx = ctx or BuildContext()
        session = self.state._session(ctx.session_id)
        # When the call is made (the caller's time, else the state's clock): a session idle
        # past the provider's cache lifetime reads nothing from the cache.
        now = ctx.now.timestamp() if ctx.now is not None else self.state.clock()
        cold = session.built_at is not None and now - session.built_at > self.pricing.lifetime
        # A session's first window: its dynamic sources are told the room its tail may take
        # (`CachePolicy.dynamic_floor`).
        floor = self.cache_policy.dynamic_floor(
            self.available,
            self.budget_manager.dynamic_limit(self.available),
            first=session.built_at is None,
        )
        ctx = replace(
            ctx,
            counter=self.token_counter,
            dynamic_floor=floor,
            history_start={name: mark.sequence for name, mark in session.marks.items()},
        )
        counter = self.token_counter
        names = [(s.name, s.priority) for s in self.sources]
        grants = self.budget_manager.allocate(names, self.available, ctx=ctx)
        with build_view():  # a memory checks the store for other writers once a build
            collected = await self.collector.collect(self.sources, grants, query, ctx=ctx)

        rank = {s.name: i for i, s in enumerate(self.sources)}
        candidates: list[Candidate] = []
        demands = {s.name: 0 for s in self.sources}
        cost_of = self._cost
        for item in collected:
            priority = item.source.priority
            for block in item.blocks:
                cost = cost_of(block)
                candidates.append(new_candidate(block, cost, priority, len(candidates)))
                demands[block.source] += cost
        # Framing is charged for what may go in: a dynamic block whose task history holds
        # goes in as history, so while the whole conversation fits, no fence is charged.
        # Framing only optional content needs (`slack`): pinned content may use it if
        # nothing else fits.
        held = held_tasks(candidates, session.marks)
        sections: set[str] = set()
        fenced: set[str] = set()
        pinned_sections: set[str] = set()
        pinned_fenced: set[str] = set()
        for c in candidates:
            block = c.block
            section = block.section
            if section != "context":
                sections.add(section)
            elif task_of(block) not in held:
                sections.add(section)
                fenced.add(block.source)
            if block.pinned:
                pinned_sections.add(section)
                if section == "context":
                    pinned_fenced.add(block.source)
        overhead = section_overhead(sections, counter, fenced)
        slack = overhead - section_overhead(pinned_sections, counter, pinned_fenced)
        room = self.available - overhead
        priorities = {s.name: s.priority for s in self.sources}
        self._check_static(candidates)
        for _ in range(_MAX_ROUNDS):
            # Shares of the room left after framing; what a source does not need flows on.
            shares = self.budget_manager.allocate(names, max(room, 0), ctx=ctx)
            compaction = await self.compactor.compact(
                candidates,
                grants={name: b.tokens for name, b in shares.items()},
                priorities=priorities,
                budget=room,
                counter=counter,
                cost_of=self._cost,
                slack=slack,
                marks=session.marks,
                policy=self.cache_policy,
                dynamic_cap=self.budget_manager.dynamic_limit(self.available),
                # The session's first window has no cached prefix at stake either.
                cold=cold or session.built_at is None,
                pricing=self.pricing,
                held=held,
            )
            kept = [d for d in compaction.decisions if d.status in ("kept", "truncated")]
            messages, tools, layout = render([d.block for d in kept], source_rank=rank)
            token_count = counter.count_messages(messages, tools=tools)
            if token_count <= self.available:
                break
            room -= token_count - self.available
        else:  # pragma: no cover - sums and exact counts differ by a few tokens at most
            raise ConfigError("could not fit the window after repeated selection; please report")
        if messages and messages[-1].role == "assistant" and not prefill:
            raise ConfigError(
                f"the window would end on an assistant message, since `query` ({query[:40]!r}) "
                "gives no user turn; a model reads a final assistant message as a prefill, the "
                "start of its own reply to continue. Pass the user's request as `query`, or "
                "`prefill=True` to send the window so on purpose"
            )
        reused = repeated_prefix_tokens(
            counter, (session.messages, session.tools), messages, tools, token_count
        )
        marks = cache_marks(counter, messages, tools, layout, token_count)
        prediction = self.pricing.predict(
            tokens=token_count,
            reused=reused,
            marks=marks,
            previous_marks=session.cache_marks,
            cold=cold,
        )
        session.marks = compaction.marks
        session.messages, session.tools = tuple(messages), tuple(tools)
        session.cache_marks, session.built_at = marks, now
        report = self._report(collected, shares, compaction, token_count, demands, reused)
        report = replace(
            report,
            cache_marks=marks,
            cache_cold=cold,
            pricing=self.pricing.name,
            predicted_cached=prediction.cached,
            predicted_written=prediction.written,
        )
        return ContextWindow(
            messages=tuple(messages),
            tools=tuple(tools),
            blocks=tuple(d.block for d in kept),
            token_count=token_count,
            report=report,
            layout=layout,
        )

    def _check_static(self, candidates: Sequence[Candidate]) -> None:
        """The static context (pinned instructions, the system message) within the budget
        manager's `static_limit`, or `BudgetExceededError` naming each part, the limit and how
        to raise it. (That it fits the whole budget with the other pinned content is the
        compactor's check.)"""
        limit = self.budget_manager.static_limit(self.available)
        if limit >= self.available:
            return
        static = [c for c in candidates if c.block.pinned and c.block.section == "instructions"]
        if sum(c.cost for c in static) > limit:
            raise BudgetExceededError(
                offenders=[Oversize(name=c.block.id, tokens=c.cost) for c in static],
                budget=limit,
                hint=f"that is the static context's limit of the {self.available} input tokens "
                "(`BudgetManager(static_ratio=..., static_tokens=...)`); raise it, shorten the "
                "instructions, or raise `model_context_window`",
            )

    def build_sync(
        self, query: str = "", *, ctx: BuildContext | None = None, prefill: bool = False
    ) -> ContextWindow:
        """`build` for code without an event loop (a script, a Flask view, a notebook cell
        run with no loop): runs it to the end on a loop of its own.

        Inside a running event loop (an ``async def``, Jupyter's own loop) it raises
        `ConfigError`: blocking that loop until the build ends would stall everything else
        on it; ``await orchestrator.build(...)`` there instead."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.build(query, ctx=ctx, prefill=prefill))
        raise ConfigError(
            "`build_sync` was called inside a running event loop (an `async def`, or a "
            "notebook); use `await orchestrator.build(...)` there instead"
        )

    def _cost(self, block: ContextBlock) -> int:
        """`block_cost`, remembered: for message tuples a source hands over again and again
        (a history's units) by identity, holding the tuple so its id is not reused; for text
        blocks by what their cost depends on (section, content, and for dynamic context the
        label or the id and source it comes from), since a retrieval source makes new blocks
        of the same texts every build and rendering one (`item`, `neutralize`) is the dearest
        part of its cost. Tool blocks (a mutable schema) are measured every time."""
        if block.messages:
            return self._message_cost(block)
        label = block.metadata.get("label")
        if block.section == "tools" or not (label is None or isinstance(label, str)):
            return block_cost(block, self.token_counter)
        key = (
            block.section,
            block.content,
            block.source,
            block.id,
            "" if label is None else "=" + label,
        )
        cost = self._text_costs.get(key)
        if cost is not None:
            self._text_costs.move_to_end(key)
            return cost
        cost = block_cost(block, self.token_counter)
        if len(self._text_costs) >= _TEXT_COST_CACHE:
            self._text_costs.popitem(last=False)
        self._text_costs[key] = cost
        return cost

    def _message_cost(self, block: ContextBlock) -> int:
        key = id(block.messages)
        hit = self._message_costs.get(key)
        if hit is not None and hit[0] is block.messages:
            self._message_costs.move_to_end(key)
            return hit[1]
        cost = block_cost(block, self.token_counter)
        # An OrderedDict: evicting a plain dict's first key again and again slows down (its
        # iteration skips the deleted slots), and a long-lived process evicts on every build.
        if len(self._message_costs) >= _MESSAGE_COST_CACHE:
            self._message_costs.popitem(last=False)
        self._message_costs[key] = (block.messages, cost)
        return cost

    def _report(
        self,
        collected: Sequence[Collected],
        grants: Mapping[str, Any],
        compaction: Compaction,
        token_count: int,
        requested: Mapping[str, int],
        reused: int,
    ) -> ContextReport:
        decisions: Sequence[Decision] = compaction.decisions
        used: dict[str, int] = {}
        kept: dict[str, int] = {}
        summary: dict[str, int] = {}
        pinned: set[str] = set()
        rows: list[BlockRow] = []
        for d in decisions:
            block, status, cost = d.block, d.status, d.cost
            src = block.source
            used[src] = used.get(src, 0) + cost
            if status in ("kept", "truncated"):
                kept[src] = kept.get(src, 0) + 1
                if block.pinned:
                    pinned.add(src)
            if d.candidate.order < 0 and block.metadata.get("kind") == "summary":
                # The frozen summary of earlier compactions: in the window, never offered.
                summary[src] = summary.get(src, 0) + cost
            rows.append(
                (
                    block.id,
                    src,
                    block.section,
                    d.candidate.block.token_count,
                    cost,
                    status,
                    d.reason,
                )
            )
        deferred = {n.source for n in compaction.notes if n.action == "deferred"}
        unembedded = {item.source.name: _unembedded(item.source) for item in collected}
        partly = {item.source.name: _partly_embedded(item.source) for item in collected}
        sources = tuple(
            SourceReport(
                name=item.source.name,
                priority=item.source.priority,
                allocated=grants[item.source.name].tokens,
                offered=requested[item.source.name],
                used=used.get(item.source.name, 0),
                blocks_offered=len(item.blocks),
                blocks_kept=kept.get(item.source.name, 0),
                status=item.status,
                error=item.error,
                elapsed_ms=round(item.elapsed_ms, 3),
                summary_tokens=summary.get(item.source.name, 0),
                note=_source_note(
                    allocated=grants[item.source.name].tokens,
                    used=used.get(item.source.name, 0),
                    summary=summary.get(item.source.name, 0),
                    deferred=item.source.name in deferred,
                    pinned=item.source.name in pinned,
                    unembedded=unembedded[item.source.name],
                    partly=partly[item.source.name],
                ),
                unembedded=unembedded[item.source.name],
            )
            for item in collected
        )
        blocks = Blocks(rows)
        return ContextReport(
            window=self.model_context_window,
            output_reserve=self.output_reserve,
            available=self.available,
            token_count=token_count,
            overhead_tokens=max(0, token_count - sum(used.values())),  # every decision's cost
            token_counter=self.token_counter.name,
            sources=sources,
            blocks=blocks,
            reused_prefix_tokens=reused,
            compactions=compaction.notes,
        )


def _unembedded(source: ContextSource) -> int:
    """How many records `source` searched by their words only for want of a vector: its
    `unembedded` attribute where it has one (sources that search a memory), else 0."""
    count = getattr(source, "unembedded", 0)
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0


def _partly_embedded(source: ContextSource) -> tuple[int, str, str] | None:
    """With an embedding cascade (a fast embedder, `MemoryEmbedding`): how many records have
    the fast model's vector but not yet the main model's, and the two names; else None."""
    by_model = getattr(source, "unembedded_by", None)
    if not isinstance(by_model, dict) or len(by_model) != 2:
        return None
    (fast, fast_missing), (slow, slow_missing) = by_model.items()
    count = slow_missing - fast_missing
    return (count, fast, slow) if isinstance(count, int) and count > 0 else None


def _source_note(
    *, allocated: int, used: int, summary: int, deferred: bool, pinned: bool, unembedded: int = 0,
    partly: tuple[int, str, str] | None = None,
) -> str:  # fmt: skip
    """Why a source holds more than it offered or was allocated, and whether its search was
    partly lexical (or by a fast model's vectors only) for want of vectors, in words ("" if
    neither): see `loomctx.context.report`."""
    parts = []
    if unembedded:
        parts.append(
            f"{unembedded} record(s) have no vector yet and were found by their words only "
            f"(lexical search) until the background embedder reaches them"
        )
    if partly is not None:
        count, fast, slow = partly
        parts.append(
            f"{count} record(s) have vectors of {fast} but not yet of {slow}: found by their "
            f"words and the fast vectors until the background embedder reaches them"
        )
    if summary:
        parts.append(
            f"{summary} of the tokens used are the summary of compacted history (in the "
            f"window, not among the blocks offered)"
        )
    if used > allocated:
        over = used - allocated
        if deferred:
            parts.append(
                f"{over} over its allocation: history outgrew it a little and was left whole "
                f"so the cached prefix survives (compaction deferred)"
            )
        elif pinned:
            parts.append(f"{over} over its allocation: pinned content is kept whole")
        else:
            parts.append(
                f"{over} over its allocation: budget other sources left unused flowed to it"
            )
    return "; ".join(parts)

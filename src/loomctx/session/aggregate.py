"""Aggregation: several sessions' windows for one query, merged into one window and budget.

Seed 003's flow "ContextController.aggregate_context([A, B, C]) -> A, B, C build_context()
-> merge + rank + trim". Given each session's window for the query:

1. **Merge.** The stable prefix (instructions, skills, tools) is shared: each distinct item
   once. Every other block becomes dynamic context labelled with its session (history units
   as ``role: text`` lines, oldest first), so conversations never interleave as messages.
   The query is the one user turn.
2. **Deduplicate.** A Task seen by several sessions (distributed, broadcast, or found by
   search) and identical text appear once, charged to the session with the largest share.
3. **Split.** What the prefix and the query leave of `budget` is split among the sessions by
   the strategy: ``"equal"``; ``"priority"`` (in proportion to each session's `priority`
   option); ``"relevance"`` (in proportion to how much of the query the best blocks that
   only that session offers cover). All weights zero means an equal split.
4. **Rank and trim.** A `ContextOrchestrator` over the merged blocks does the rest: each
   session keeps its most valuable blocks (its source's priority times the block's) within
   its share, cutting text on token boundaries; a share a session does not need flows to
   the others (no stranded tokens); the rendered window is counted exactly and is at most
   `budget`.
"""

from __future__ import annotations

import functools
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Final, Literal, get_args

from loomctx.context.block import BuildContext, ContextBlock, TokenBudget
from loomctx.context.budget import BudgetManager
from loomctx.context.orchestrator import ContextOrchestrator, ContextWindow
from loomctx.context.render import block_cost
from loomctx.context.sources import UserInputSource
from loomctx.errors import ConfigError, check_int
from loomctx.messages import Message
from loomctx.text import coverage, terms
from loomctx.tokens import TokenCounter

__all__ = ["SHARED_SOURCE", "SessionView", "SplitStrategy", "aggregate", "relevance", "weights"]

SplitStrategy = Literal["equal", "priority", "relevance"]
"""How an aggregate window's budget is split among its sessions."""

SHARED_SOURCE: Final = "shared"
"""The aggregate window's source for the prefix every session shares (instructions, tools)."""

_PREFIX: Final = ("instructions", "skills", "tools")
_RELEVANCE_TOP: Final = 5  # a session is as relevant as its best few blocks, not its average


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionView:
    """What aggregation needs of one session: its window for the query and how to rank it."""

    session_id: str
    priority: float
    window: ContextWindow
    source_priorities: Mapping[str, float]


@functools.lru_cache(maxsize=16_384)
def _terms(text: str) -> frozenset[str]:
    """The terms of `text`, remembered: the same history is weighed on every aggregate."""
    return frozenset(terms(text))


def relevance(query: str, texts: Sequence[str]) -> float:
    """How much of `query` a session's content covers, 0..1: the mean share of the query's
    terms found in each of its best `_RELEVANCE_TOP` texts (0 when none is given)."""
    wanted = frozenset(terms(query))
    scores = sorted((coverage(wanted, _terms(t)) for t in texts), reverse=True)
    best = scores[:_RELEVANCE_TOP]
    return math.fsum(best) / len(best) if best else 0.0


def weights(
    strategy: str, query: str, views: Sequence[SessionView], texts: Mapping[str, Sequence[str]]
) -> dict[str, float]:
    """Each session's share of the budget by `strategy`, summing to 1."""
    if strategy == "equal":
        raw = {v.session_id: 1.0 for v in views}
    elif strategy == "priority":
        raw = {v.session_id: v.priority for v in views}
    elif strategy == "relevance":
        raw = {v.session_id: relevance(query, texts[v.session_id]) for v in views}
    else:
        raise ConfigError(
            f"unknown split strategy {strategy!r}; use one of "
            f"{', '.join(repr(s) for s in get_args(SplitStrategy))}"
        )
    total = math.fsum(raw.values())
    if total <= 0:
        return {sid: 1 / len(raw) for sid in raw}
    return {sid: w / total for sid, w in raw.items()}


class _SplitBudget(BudgetManager):
    """Fixed sources get exactly what they need; the rest is split by the sessions' weights."""

    __slots__ = ("_fixed", "_weights")

    def __init__(self, *, fixed: Mapping[str, int], weights: Mapping[str, float]) -> None:
        super().__init__()
        self._fixed = dict(fixed)
        self._weights = dict(weights)

    def allocate(
        self, sources: Sequence[tuple[str, float]], available: int, *, ctx: BuildContext
    ) -> dict[str, TokenBudget]:
        """Fixed demands first, then the largest-remainder split of what is left."""
        tokens: dict[str, int] = {}
        left = available
        for name, _ in sources:
            if name in self._fixed:
                tokens[name] = min(self._fixed[name], left)
                left -= tokens[name]
        split = [name for name, _ in sources if name not in self._fixed]
        exact = {name: Fraction(self._weights[name]) * left for name in split}
        for name in split:
            tokens[name] = math.floor(exact[name])
        rest = left - sum(tokens[name] for name in split)
        by_remainder = sorted(split, key=lambda n: (-(exact[n] - tokens[n]), split.index(n)))
        for name in by_remainder[:rest]:
            tokens[name] += 1
        return {name: TokenBudget(tokens=tokens[name], ceiling=available) for name, _ in sources}


class _Replay:
    """A source that offers blocks collected beforehand (from the sessions' windows)."""

    __slots__ = ("blocks", "name", "priority")

    def __init__(self, name: str, priority: float, blocks: Sequence[ContextBlock]) -> None:
        self.name = name
        self.priority = priority
        self.blocks = list(blocks)

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> list[ContextBlock]:
        """The blocks, as given; the orchestrator selects within the budget."""
        return self.blocks


def _line(m: Message) -> str:
    calls = "; ".join(f"called {c.name}({c.arguments_json()})" for c in m.tool_calls)
    text = " ".join(part for part in (m.content, calls) if part)
    label = f"tool result{' (error)' if m.is_error else ''}" if m.role == "tool" else m.role
    return f"{label}: {text}"


def _session_blocks(view: SessionView, counter: TokenCounter) -> list[ContextBlock]:
    """The session's non-prefix blocks as dynamic context: context first, then the history
    oldest first, then the run's exchange; the user turn is left to the aggregate."""
    name = f"session:{view.session_id}"
    order = {"context": 0, "history": 1, "turn": 2}
    kept = [b for b in view.window.blocks if b.section in order]
    kept.sort(key=lambda b: (order[b.section], b.sequence if b.section != "context" else 0))
    out = []
    for b in kept:
        text = b.content if b.section == "context" else "\n".join(map(_line, b.messages))
        value = view.source_priorities.get(b.source, 0.5) * b.priority
        out.append(
            ContextBlock(
                source=name,
                section="context",
                id=f"{name}:{b.id}",
                content=text,
                token_count=counter.count(text),
                priority=max(0.01, min(1.0, value)),
                # A history unit stays whole, as in the session (tool units are atomic).
                truncatable=b.truncatable and b.section == "context",
                metadata={**b.metadata, "session_id": view.session_id, "origin": b.source},
            )
        )
    return out


def _key(block: ContextBlock) -> str:
    task_id = block.metadata.get("task_id")
    if task_id is not None:
        return f"task:{task_id}"
    if block.tool is not None:
        return "tool:" + json.dumps(block.tool, sort_keys=True, default=str)
    return f"{block.section}:{block.content}"


async def aggregate(
    views: Sequence[SessionView],
    query: str,
    budget: int,
    *,
    strategy: str,
    counter: TokenCounter,
    ctx: BuildContext,
) -> tuple[ContextWindow, dict[str, float]]:
    """The merged window of `views` for `query` within `budget` tokens, and each session's
    weight (see the module docstring)."""
    check_int(budget, "`budget`", minimum=1)
    seen: set[str] = set()
    shared: list[ContextBlock] = []
    for view in views:
        for b in view.window.blocks:
            if b.section in _PREFIX and _key(b) not in seen:
                seen.add(_key(b))
                shared.append(
                    replace(
                        b,
                        source=SHARED_SOURCE,
                        id=f"{SHARED_SOURCE}:{len(shared)}",
                        metadata={**b.metadata, "session_id": view.session_id},
                    )
                )
    offered = {v.session_id: _session_blocks(v, counter) for v in views}
    # A session is as relevant as what only it can add: content several sessions offer (a
    # broadcast, a shared knowledge base) is kept once anyway, by the largest share.
    offers = Counter(_key(b) for blocks in offered.values() for b in blocks)
    texts = {
        sid: [b.content for b in blocks if offers[_key(b)] == 1] for sid, blocks in offered.items()
    }
    share = weights(strategy, query, views, texts)
    # A block several sessions offer goes to the one with the largest share (then the first).
    owners = sorted(views, key=lambda v: -share[v.session_id])
    kept: dict[str, list[ContextBlock]] = {}
    for view in owners:
        kept[view.session_id] = []
        for b in offered[view.session_id]:
            if _key(b) not in seen:
                seen.add(_key(b))
                kept[view.session_id].append(b)
    turn = ContextBlock(source="user_input", section="user", messages=(Message.user(query),))
    fixed = {
        SHARED_SOURCE: sum(block_cost(b, counter) for b in shared),
        "user_input": block_cost(turn, counter) if query.strip() else 0,
    }
    names = {v.session_id: f"session:{v.session_id}" for v in views}
    # Source priority is the share too: what a session leaves unused flows to the largest.
    sources = [_Replay(names[v.session_id], share[v.session_id], kept[v.session_id]) for v in views]
    orchestrator = ContextOrchestrator(
        token_counter=counter,
        sources=[_Replay(SHARED_SOURCE, 1.0, shared), *sources, UserInputSource()],
        model_context_window=budget,
        max_output_tokens=0,
        budget_manager=_SplitBudget(
            fixed=fixed, weights={names[sid]: w for sid, w in share.items()}
        ),
    )
    return await orchestrator.build(query, ctx=ctx), share

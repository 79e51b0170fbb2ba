"""`ContextCompactor`: fits the collected blocks into the budget, lowest value out first.

Selection, in order:

1. **Pinned** blocks (the system prompt, the user turn, the newest tool exchange) are kept
   whole. If they alone exceed the budget, `BudgetExceededError` names each with its size.
2. **History, append-only.** History is the part of the window a provider's prompt cache can
   reuse, so it is not re-chosen every build: a `HistoryMark` remembers, per history source,
   the first unit kept in full and the frozen summary of what came before it. Until history
   outgrows its room (the budget left after pinned content and the other sources' shares,
   where a dynamic block whose task history holds claims none: the tail wants only what the
   window lacks), every build keeps all units from that mark to the newest, and the summary
   byte for byte. An overflow up to `CachePolicy.defer_ratio` of the room is taken from the
   dynamic context; beyond it (or past it at a cache-cold moment) history is compacted in one
   step: the newest units that fit `CachePolicy.low_water` of the room, and no more than
   repays the cache the rewrite breaks (`CachePolicy.break_even`), are kept (starting at a
   user message), the units before them are summarized into a new frozen summary (a
   `Summarizer`; the extractive default needs no LLM), and the mark moves. Tool units are
   atomic everywhere.
3. **Within grants.** Each other source's blocks are taken in its order of preference
   (priority, then as offered) within the source's grant. A text block that does not fit
   whole is cut on a token boundary if it is truncatable and enough room is left; anything
   else waits.
4. **Redistribution.** What is left of the whole budget goes to the waiting blocks, highest
   source priority first, then block priority: budget a source does not use is not stranded.
5. **Deduplication.** A task two sources offer (recent history and retrieval, say; blocks
   name it in `metadata["task_id"]`) goes in once, and the room freed goes to waiting blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from loomctx.context._account import Placed, Selection
from loomctx.context.billing import ANTHROPIC, CachePricing
from loomctx.context.block import ContextBlock
from loomctx.context.budget import BudgetManager
from loomctx.context.render import summary_text
from loomctx.context.report import CompactionNote
from loomctx.context.selection import (
    CachePolicy,
    Candidate,
    Compaction,
    Decision,
    HistoryMark,
    TailLimits,
    cold_tail,
    held_tasks,
    recall_limit,
    skipped_tail,
    tail_scale,
    task_of,
    unlifted,
)
from loomctx.errors import ConfigError
from loomctx.memory.summarizers import ExtractiveSummarizer, Summarizer
from loomctx.messages import Message
from loomctx.tokens import TokenCounter

__all__ = [
    "SUMMARY_UNITS",
    "CachePolicy",
    "Candidate",
    "Compaction",
    "ContextCompactor",
    "Decision",
    "HistoryMark",
    "held_tasks",
    "task_of",
]


SUMMARY_UNITS: Final = 40
"""A history summary covers at most this many units, the newest of those it stands for: a
history source need offer no more than these before the unit its kept history starts at
(`BuildContext.history_start`)."""

_PREFIX: Final = frozenset({"instructions", "skills", "tools", "history"})
"""The sections of a window that come before its dynamic tail: what a provider may cache."""


def _starts_with_user(c: Candidate) -> bool:
    """Anthropic requires the first message to be the user's: history starts with one."""
    return bool(c.block.messages) and c.block.messages[0].role == "user"


def _core_cost(units: Sequence[Candidate], count: int) -> int:
    """What the newest `count` of a history's `units` cost, from a user message on (further
    back if the count starts on another role)."""
    ordered = sorted(units, key=lambda c: c.block.sequence)
    first = max(0, len(ordered) - count)
    while 0 < first < len(ordered) and not _starts_with_user(ordered[first]):
        first -= 1
    return sum(c.cost for c in ordered[first:]) if count else 0


def _dynamic_first(
    shares: dict[str, int],
    wants: Mapping[str, int],
    dynamic: set[str],
    candidates: Sequence[Candidate],
    priorities: Mapping[str, float],
    floor: int,
    policy: CachePolicy,
) -> tuple[dict[str, int], set[str]]:
    """`shares` with the dynamic sources raised to `floor` tokens in all (no more than they
    want), taken from history older than its newest `policy.core_units` units, the
    lowest-priority history first (`CachePolicy.min_dynamic`); and the history sources that
    gave room."""
    short = min(floor, sum(wants[n] for n in dynamic)) - sum(shares.get(n, 0) for n in dynamic)
    if short <= 0:
        return shares, set()
    units: dict[str, list[Candidate]] = {}
    for c in candidates:
        if c.block.section == "history" and not c.block.pinned:
            units.setdefault(c.block.source, []).append(c)
    out = dict(shares)
    freed = 0
    gave: set[str] = set()
    for source in sorted(units, key=lambda n: (priorities[n], n)):
        core = _core_cost(units[source], policy.core_units)
        give = min(short - freed, max(0, out.get(source, 0) - core))
        if give > 0:
            out[source] = out.get(source, 0) - give
            freed += give
            gave.add(source)
    for name in sorted(dynamic, key=lambda n: (-priorities[n], n)):
        add = min(freed, wants[name] - out.get(name, 0))
        if add > 0:
            out[name] = out.get(name, 0) + add
            freed -= add
    return out, gave


def _describe(m: Message) -> str:
    calls = "; ".join(f"called {c.name}({c.arguments_json()})" for c in m.tool_calls)
    text = " ".join(part for part in (m.content, calls) if part)
    label = f"tool result{' (error)' if m.is_error else ''}" if m.role == "tool" else m.role
    return f"{label}: {text}"


class ContextCompactor:
    """Decides what is kept, truncated, summarized or dropped, within a token budget."""

    def __init__(
        self,
        *,
        summarizer: Summarizer | None = None,
        summarize_history: bool = True,
        summary_max_tokens: int = 256,
        min_truncated_tokens: int = 24,
    ) -> None:
        if summary_max_tokens < 1 or min_truncated_tokens < 1:
            raise ConfigError("`summary_max_tokens` and `min_truncated_tokens` must be >= 1")
        self.summarizer: Summarizer = summarizer or ExtractiveSummarizer()
        self.summarize_history = summarize_history
        self.summary_max_tokens = summary_max_tokens
        self.min_truncated_tokens = min_truncated_tokens

    async def compact(
        self,
        candidates: Sequence[Candidate],
        *,
        grants: Mapping[str, int],
        priorities: Mapping[str, float],
        budget: int,
        counter: TokenCounter,
        cost_of: Callable[[ContextBlock], int],
        slack: int = 0,
        marks: Mapping[str, HistoryMark] | None = None,
        policy: CachePolicy | None = None,
        dynamic_cap: int | None = None,
        cold: bool = False,
        pricing: CachePricing = ANTHROPIC,
        held: set[str] | None = None,
    ) -> Compaction:
        """One decision per candidate (in the order given), plus one for each history
        summary in the window, and the history marks for the next build.

        `grants` is each source's share of `budget` (by name), `priorities` each source's
        priority. `slack` is framing that `budget` was charged for but that only optional
        content needs (a fence, the tool list): pinned content may use it when nothing else
        goes in. `marks` are the previous build's `HistoryMark`s by source (none: history
        starts fresh), `policy` when to compact it. `dynamic_cap` is the most tokens the
        dynamic context (`context` blocks) may take besides `policy.max_dynamic`'s share (the
        budget manager's `dynamic_limit`; None: no such cap). `cold`: nothing the provider
        cached is at stake (the session's first window, or its cache expired since the
        previous one); `pricing` its prices. `held` is `held_tasks(candidates, marks)`, when
        the caller has worked it out already (as the orchestrator has, to charge framing).
        """
        policy = policy or CachePolicy()
        marks = marks or {}
        # A dynamic block whose task history holds (from its mark on) goes in as history, so
        # it claims no room: the tail wants only what the window lacks, and while the whole
        # conversation fits, history's room is the whole budget.
        if held is None:
            held = held_tasks(candidates, marks)
        below = unlifted(candidates, policy)

        async def place(first: bool) -> tuple[Selection, _Plan, Placed]:
            run = Selection(budget, counter, cost_of, self.min_truncated_tokens)
            run.pin(candidates, slack)
            plan = self._plan(
                candidates, grants, priorities, budget, held, {} if first else below, policy,
                dynamic_cap, first=first,
            )  # fmt: skip
            run.dynamic_left = plan.cap
            # Step 2: history first, append-only from its mark; the other sources' shares
            # are what it leaves them at least.
            placed = await self._histories(
                run, candidates, plan, grants, marks, policy, cold=cold, pricing=pricing
            )
            return run, plan, placed

        # A session's first window, with `CachePolicy.first_tail`: no history is placed yet,
        # so the tail's sources want all they offer, by priority, before history's room is
        # set (neither the cap nor `tail_lift`'s bar holds them back), and history keeps what
        # they leave. A later cold call places history as any call does: the warm calls
        # after it append to the history they had.
        opening = cold and policy.cold_tail and not marks
        first = opening and policy.first_tail
        run, plan, placed = await place(first)
        if opening and not first and (prefix := _prefix(run, placed)) < pricing.min_tokens:
            # History placed as on any call would not make a prefix the provider caches, so
            # it seeds no cache for the calls after: it yields to the tail as with
            # `first_tail`.
            first = True
            run, plan, placed = await place(first)
            why = (
                f"; the tail was planned first, as history in its room would make a prefix of "
                f"{prefix} tokens, under the {pricing.min_tokens} the provider caches"
            )
            placed.notes = [replace(n, reason=n.reason + why) for n in placed.notes]
        after_history = run.left
        # Nothing cached at stake (`CachePolicy.cold_tail`): the tail may use what history
        # leaves, blocks below `tail_lift`'s bar included; history is placed as on any call.
        tail = cold_tail(plan.tail, run.left, dynamic_cap, policy, cold=cold)
        cap = plan.cap
        if tail.lifted:
            cap = run.dynamic_left = tail.cap
            below = {}
        else:
            summarized = sum(d.cost for d in placed.extra)
            tail = recall_limit(tail, placed.marks, summarized, policy, pricing)
            run.recall = tail.recall
            run.recall_left = tail.recall or 0
        # Steps 3 and 4: the other sources within their shares, then what is left flows to
        # waiting blocks by source priority, then block value.
        ranked = sorted(
            (
                c
                for c in candidates
                if not c.block.pinned
                and c.block.source not in placed.sources
                and c.order not in below
            ),
            key=lambda c: (-c.source_priority, c.block.source, -c.block.priority, c.order),
        )
        run.fill(ranked, plan.shares)
        # Step 5: the same task offered by two sources (recent history and retrieval, an
        # inherited memory and a shared pool) goes in once; the room it frees goes to waiting
        # blocks.
        if self._drop_duplicates([c for c in candidates if c.order in run.decided], run.decided):
            run.refill(ranked, budget, cap, placed.extra)
        decisions = run.explain(candidates, placed.reasons, below, tail, after_history)
        return Compaction(
            decisions=[*decisions, *placed.extra], marks=placed.marks, notes=tuple(placed.notes)
        )

    @staticmethod
    def _plan(
        candidates: Sequence[Candidate],
        grants: Mapping[str, int],
        priorities: Mapping[str, float],
        budget: int,
        held: set[str],
        below: Mapping[int, str],
        policy: CachePolicy,
        dynamic_cap: int | None,
        *,
        first: bool = False,
    ) -> _Plan:
        """Each source's share of `budget` and the dynamic tail's cap: what each source
        wants (a dynamic block the window holds as history, or that `tail_lift` leaves out,
        wants nothing), the dynamic sources within the cap (in a session's `first` window,
        with `CachePolicy.first_tail`, within the budget and `dynamic_cap` only: `cold_tail`
        lifts the cap once history is placed, so the cap does not set history's room
        either), redistributed by priority, then the dynamic floor taken from older history
        (`_dynamic_first`)."""
        demands: dict[str, int] = {}
        for c in candidates:
            lacked = c.order not in below and not (
                c.block.section == "context" and task_of(c.block) in held
            )
            demands[c.block.source] = demands.get(c.block.source, 0) + c.cost * lacked
        dynamic = {c.block.source for c in candidates if c.block.section == "context"}
        cap = max(0, budget if policy.max_dynamic is None else int(policy.max_dynamic * budget))
        if dynamic_cap is not None:
            cap = min(cap, dynamic_cap)
        scale, scaled = tail_scale(candidates, held, policy)
        cap = int(cap * scale)
        tail = TailLimits(
            cap=cap,
            share=policy.max_dynamic,
            skipped=skipped_tail(candidates, held, policy),
            scaled=scaled,
        )
        if tail.skipped:
            cap = 0
        limit = cap
        if first and not tail.skipped:
            limit = max(0, budget if dynamic_cap is None else min(budget, dynamic_cap))
        # Shares by priority of what each source wants, the dynamic sources within the cap:
        # history's share is its room (and what a higher-priority source leaves flows to it).
        wants = {n: min(d, limit) if n in dynamic else d for n, d in demands.items()}
        if policy.max_dynamic is not None:
            tail_left = limit  # the cap is the whole tail's: its sources share it by priority
            for name in sorted(dynamic, key=lambda n: (-priorities[n], n)):
                wants[name] = min(demands[name], tail_left)
                tail_left -= wants[name]
        shares = BudgetManager.redistribute(dict(grants), wants, priorities)
        floor = policy.dynamic_floor(budget, dynamic_cap)
        shares, yielded = _dynamic_first(
            shares, wants, dynamic, candidates, priorities, floor, policy
        )
        return _Plan(
            shares=shares, wants=wants, dynamic=dynamic, cap=cap, tail=tail, yielded=yielded
        )

    async def _histories(
        self,
        run: Selection,
        candidates: Sequence[Candidate],
        plan: _Plan,
        grants: Mapping[str, int],
        marks: Mapping[str, HistoryMark],
        policy: CachePolicy,
        *,
        cold: bool,
        pricing: CachePricing,
    ) -> Placed:
        """Step 2: each history source's units kept from its mark (compacted past its room:
        `_history`), decided in `run`, with the marks, notes, summaries and the reasons for
        the units left out."""
        histories: dict[str, list[Candidate]] = {}
        for c in candidates:
            if c.block.section == "history" and not c.block.pinned:
                histories.setdefault(c.block.source, []).append(c)
        placed = Placed(sources=set(histories))
        shares, wants = plan.shares, plan.wants
        for source, units in histories.items():
            units.sort(key=lambda c: c.block.sequence)
            room = max(0, min(shares.get(source, 0), run.left))
            # What the other sources' own shares leave: a summary standing in for units that
            # cannot open the history may use it, and cut no one within their allocation.
            # (Their redistributed shares, not their first grants: step 3 gives each source its
            # share before a lower-priority one gets its allocation, so a summary using more
            # than the shares leave would cut a source that stayed within its allocation.)
            others = {
                name: min(max(shares.get(name, 0), grants.get(name, 0)), want)
                for name, want in wants.items()
                if name != source
            }
            spare = run.left - sum(others.values())
            # A deferred compaction takes its overflow from the dynamic tail and unused room,
            # never from another source's share (a tool definition, say): that would break the
            # cached prefix the deferral is there to keep.
            fixed = sum(held for name, held in others.items() if name not in plan.dynamic)
            kept, summary, note = await self._history(
                source,
                units,
                marks.get(source),
                (room, max(room, run.left - fixed), max(room, spare)),
                policy,
                run.counter,
                run.cost_of,
                core_units=policy.core_units if source in plan.yielded else 0,
                cold=cold,
                pricing=pricing,
            )
            placed.add(
                run, source, units, (kept, summary, note), room, marks.get(source), cold=cold
            )
        return placed

    async def _history(
        self,
        source: str,
        units: list[Candidate],
        mark: HistoryMark | None,
        rooms: tuple[int, int, int],
        policy: CachePolicy,
        counter: TokenCounter,
        cost_of: Callable[[ContextBlock], int],
        *,
        core_units: int = 0,
        cold: bool = False,
        pricing: CachePricing = ANTHROPIC,
    ) -> tuple[list[Candidate], ContextBlock | None, CompactionNote | None]:
        """The units of one history source to keep (the newest of `units`, oldest first), its
        frozen summary, and a note when history was compacted or a compaction deferred.
        `rooms` are its room (its share), the most a deferred compaction may use (its room,
        the dynamic tail's and unused room), and what the other sources' shares leave.
        `core_units`: when history gave room to the dynamic floor, a compaction keeps this
        many of its newest units whole if the room holds them, before a summary of the older
        ones. `cold`: the provider's cache has expired, so a due compaction is done now."""
        room, hard_room, spare = rooms
        ids = [c.block.id for c in units]
        summary = mark.summary if mark is not None else None
        if mark is not None and mark.start in ids:
            start, why = ids.index(mark.start), ""
        elif mark is not None:
            start, why = 0, "the first unit of its history left the source"
        else:  # a fresh start: no cache to keep yet, so fill the room
            start, why = 0, ""
        kept = units[start:]
        while kept and not _starts_with_user(kept[0]):
            kept = kept[1:]
        if units[start:] and not kept and summary is None:
            # Only units that cannot open a history (tool exchanges, say): say what they were
            # rather than show nothing of them.
            room = min(self.summary_max_tokens, spare)
            summary = await self._summary(source, units[start:], room, counter, cost_of)
            if summary is not None:
                meta = {**summary.metadata, "opens_history": True}
                summary = replace(summary, metadata=meta)
            return [], summary, None
        size = sum(c.cost for c in kept) + (cost_of(summary) if summary is not None else 0)
        if not why and size <= room:
            return kept, summary, None
        over = size - room
        deferrable = size <= hard_room and over <= policy.defer_ratio * room
        if not why and deferrable and mark and cold:
            why = (
                f"history of {size} tokens is {over} over its room of {room} and the cache "
                "is cold (the session idle past the provider's cache lifetime): compacted now, "
                "when the rewrite breaks nothing"
            )
        elif not why and deferrable and mark:
            return (
                kept,
                summary,
                CompactionNote(
                    source=source,
                    action="deferred",
                    reason=f"history is {over} tokens over its room of {room}; taken from the "
                    "dynamic context, as compacting now would save less than it costs in cache",
                    tokens_before=size,
                    tokens_after=size,
                ),
            )
        why = why or f"history of {size} tokens outgrew its room of {room}"
        # Compact: keep the newest units within the low-water mark, the rest summarized. A
        # first build may fill the room with whole units instead (`CachePolicy.fill_first`).
        fill = mark is None and policy.fill_first
        # In one step to the low-water mark, and at least as far as repays the cache the
        # rewrite breaks (nothing is cached to break when the cache is cold or new).
        target = room if fill else int(policy.low_water * room)
        if not fill and not cold and mark is not None:
            target = min(target, policy.break_even(size, pricing))
        summarize = self.summarize_history and not fill
        reserve = min(self.summary_max_tokens, target // 4) if summarize else 0
        if not fill and core_units:
            core = _core_cost(units, core_units)
            target = max(target, min(core + reserve, room))
            reserve = min(reserve, max(0, target - core))
        capacity = max((int(c.block.metadata.get("capacity", 0)) for c in units), default=0)
        max_units = int(policy.low_water * capacity) if capacity and not fill else len(units)
        first, total = len(units), 0
        for i in range(len(units) - 1, -1, -1):
            if total + units[i].cost > target - reserve or len(units) - i > max_units:
                break
            total += units[i].cost
            first = i
        while first < len(units) and not _starts_with_user(units[first]):
            first += 1
        kept = units[first:]
        summary = await self._summary(source, units[:first], reserve, counter, cost_of)
        after = sum(c.cost for c in kept) + (cost_of(summary) if summary is not None else 0)
        return (
            kept,
            summary,
            CompactionNote(
                source=source,
                action="compacted",
                reason=f"{why}; kept the newest {len(kept)} units within "
                f"{int(policy.low_water * 100)}% of it",
                tokens_before=size,
                tokens_after=after,
            ),
        )

    async def _summary(
        self,
        source: str,
        dropped: Sequence[Candidate],
        room: int,
        counter: TokenCounter,
        cost_of: Callable[[ContextBlock], int],
    ) -> ContextBlock | None:
        """The frozen summary of the units that left history (the last `SUMMARY_UNITS` of
        them: the oldest material is what memory tiers are for), within `room` tokens, or
        None."""
        if not (self.summarize_history and dropped) or room < self.min_truncated_tokens:
            return None
        recent = list(dropped[-SUMMARY_UNITS:])
        header = f"Summary of {len(recent)} earlier conversation units not shown in full:\n"
        frame = cost_of(self._summary_block(source, header, recent))
        texts = [" | ".join(_describe(m) for m in c.block.messages) for c in recent]
        text = await self.summarizer.summarize(texts, max_tokens=room - frame, counter=counter)
        if not text:
            return None
        return self._summary_block(source, header + text, recent)

    @staticmethod
    def _summary_block(source: str, text: str, covered: Sequence[Candidate]) -> ContextBlock:
        return ContextBlock(
            source=source,
            section="history",
            id=f"{source}:summary",
            messages=(Message.user(summary_text(source, text)),),
            content=text,
            priority=0.0,
            metadata={
                "kind": "summary",
                "summarized": len(covered),
                "covers_from": covered[0].block.sequence,
                "next": covered[-1].block.sequence + 1,
            },
        )

    @staticmethod
    def _drop_duplicates(ranked: Sequence[Candidate], decided: dict[int, Decision]) -> bool:
        """Drop kept blocks whose task (`metadata["task_id"]`) is already in the window: history
        wins (it must stay unbroken), then the first kept in rank order. Returns whether any
        was dropped (the reasons are given once selection is over)."""
        kept = [c for c in ranked if c.order in decided]
        # Only a block outside history (and not pinned) that stands for a task can be a
        # duplicate: without one, history's tasks need not be gathered.
        others = [
            (c, key)
            for c in kept
            if c.block.section != "history"
            and not c.block.pinned
            and (key := task_of(c.block)) is not None
        ]
        if not others:
            return False
        held = {
            key
            for c in kept
            if c.block.section == "history" and (key := task_of(c.block)) is not None
        }
        dropped = False
        for c, key in others:
            if key in held:
                del decided[c.order]
                dropped = True
            else:
                held.add(key)
        return dropped


@dataclass(frozen=True, slots=True, kw_only=True)
class _Plan:
    """One build's shares (`ContextCompactor._plan`): each source's share, what each wants,
    the dynamic sources, the tail's cap and limits, and the history sources that gave room
    to the dynamic floor."""

    shares: dict[str, int]
    wants: dict[str, int]
    dynamic: set[str]
    cap: int
    tail: TailLimits
    yielded: set[str]


def _prefix(run: Selection, placed: Placed) -> int:
    """The tokens of the window's prefix that a provider may cache once history is placed in
    `run`: its instructions, skills, tools and history, with history's summaries."""
    kept = sum(d.cost for d in run.decided.values() if d.block.section in _PREFIX)
    return kept + sum(d.cost for d in placed.extra)

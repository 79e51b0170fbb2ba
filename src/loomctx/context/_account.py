"""A compaction's running account (`ContextCompactor.compact`'s working state): the decisions
made so far, what each source has spent, what is left of the budget and of the dynamic tail's
cap, and how each step (pinned content, history, the shares, what duplicates free) records
its decisions. Private: the compactor's module docstring says what the steps decide."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from loomctx.context.block import ContextBlock
from loomctx.context.packing import history_drop_reason, truncate_text
from loomctx.context.report import BlockStatus, CompactionNote
from loomctx.context.selection import (
    Candidate,
    Decision,
    HistoryMark,
    TailLimits,
    new_decision,
    task_of,
)
from loomctx.errors import BudgetExceededError, Oversize
from loomctx.tokens import TokenCounter

__all__ = ["Placed", "Selection"]


@dataclass(slots=True)
class Placed:
    """What step 2 placed: the history sources, their marks for the next build, the notes
    on compactions, the decisions of the summaries in the window (`extra`), and why each
    unit left out of history is out."""

    sources: set[str]
    marks: dict[str, HistoryMark] = field(default_factory=dict)
    notes: list[CompactionNote] = field(default_factory=list)
    extra: list[Decision] = field(default_factory=list)
    reasons: dict[int, tuple[BlockStatus, str]] = field(default_factory=dict)

    def add(
        self,
        run: Selection,
        source: str,
        units: Sequence[Candidate],
        placed: tuple[list[Candidate], ContextBlock | None, CompactionNote | None],
        room: int,
        previous: HistoryMark | None = None,
        *,
        cold: bool = False,
    ) -> None:
        """Decide one history source's `units` in `run`: the `kept` ones in, its summary in
        (as an extra decision), the others summarized or dropped with the reason. `previous`
        is the source's mark of the last build (None: its first window); `cold`: nothing
        cached was at stake, so a compaction rewrote nothing a cache held."""
        kept, summary, note = placed
        if note is not None:
            self.notes.append(note)
        # `kept` is a suffix of `units` (`_history` keeps the newest): where it starts is
        # its length from the end (list.index compared Candidates field by field, blocks
        # and their messages included).
        first = len(units) - len(kept)
        for c in kept:
            run.keep(c)
        used = sum(c.cost for c in kept)
        if summary is not None:
            cost = run.cost_of(summary)
            s = Candidate(block=summary, cost=cost, source_priority=0.0, order=-1 - len(self.extra))
            self.extra.append(new_decision(s, summary, "kept", cost))
            used += cost
        if kept:
            self.marks[source] = _next_mark(units, kept, summary, previous, used, cold=cold)
        covered = int(summary.metadata.get("covers_from", first)) if summary else first
        for c in units[:first]:
            if summary is not None and c.block.sequence >= covered:
                why = f"compacted into `{summary.id}`"
                if summary.metadata.get("opens_history"):
                    why = f"summarized into `{summary.id}`: a history kept opens with a user turn"
                self.reasons[c.order] = ("summarized", why)
            else:
                self.reasons[c.order] = ("dropped", history_drop_reason(c.block, c.cost, room))
        run.spent[source] = run.spent.get(source, 0) + used
        run.left -= used


def _next_mark(
    units: Sequence[Candidate],
    kept: Sequence[Candidate],
    summary: ContextBlock | None,
    previous: HistoryMark | None,
    size: int,
    *,
    cold: bool,
) -> HistoryMark:
    """The mark of a history that keeps `kept` of `units` (and `summary`, `size` tokens in
    all): with the tokens that have left it so far, and those a compaction in this build
    rewrote behind the cache (`size`; none in a first window or a cold call, where nothing
    cached was at stake)."""
    start = kept[0].block.sequence
    # What left the kept history in this build: the units from the last mark (or, in a
    # first window, from the oldest offered) to the first one kept.
    since = previous.sequence if previous is not None else None
    left = sum(
        c.cost
        for c in units
        if c.block.sequence < start and (since is None or c.block.sequence >= since)
    )
    if previous is not None and previous.sequence == start:
        rewritten = previous.rewritten
    else:
        rewritten = 0 if previous is None or cold else size
    return HistoryMark(
        start=kept[0].block.id,
        summary=summary,
        sequence=start,
        dropped=(previous.dropped if previous is not None else 0) + left,
        rewritten=rewritten,
    )


class Selection:
    """One compaction's running account: the decisions so far (by candidate order), the
    tokens each source has spent, and what is left of the budget (`left`) and of the
    dynamic tail's cap (`dynamic_left`)."""

    def __init__(
        self,
        budget: int,
        counter: TokenCounter,
        cost_of: Callable[[ContextBlock], int],
        min_truncated: int,
    ) -> None:
        self.budget = budget
        self.counter = counter
        self.cost_of = cost_of
        self.min_truncated = min_truncated
        self.decided: dict[int, Decision] = {}
        self.spent: dict[str, int] = {}
        self.left = budget
        self.dynamic_left = 0
        self.recall: int | None = None  # the conversation's memory's limit, if any
        self.recall_left = 0

    def pin(self, candidates: Sequence[Candidate], slack: int) -> None:
        """Step 1: pinned blocks whole, or `BudgetExceededError` naming each."""
        pinned = [c for c in candidates if c.block.pinned]
        pinned_cost = sum(c.cost for c in pinned)
        if pinned_cost > self.budget + slack:
            raise BudgetExceededError(
                offenders=[Oversize(name=c.block.id, tokens=c.cost) for c in pinned],
                budget=self.budget + slack,
                hint="raise `model_context_window`, lower the output reserve, or shorten them",
            )
        for c in pinned:
            self.keep(c)
        self.left = self.budget - pinned_cost
        for c in pinned:
            self.spent[c.block.source] = self.spent.get(c.block.source, 0) + c.cost

    def keep(self, c: Candidate) -> None:
        """`c` in, whole."""
        self.decided[c.order] = new_decision(c, c.block, "kept", c.cost)

    def take(self, c: Candidate, room: int, why_cut: str) -> int:
        """Keep `c` whole or cut within `room` (and what is left of the tail's cap, for a
        dynamic block); return the tokens used (0: it waits)."""
        if c.block.section != "context":
            return self._fit(c, room, why_cut)
        recalled = self.recall is not None and task_of(c.block) is not None
        room = min(room, self.dynamic_left)
        if recalled:
            room = min(room, self.recall_left)
        used = self._fit(c, room, why_cut)
        self.dynamic_left -= used
        if recalled:
            self.recall_left -= used
        return used

    def _fit(self, c: Candidate, room: int, why_cut: str) -> int:
        if c.cost <= room:
            self.keep(c)
            return c.cost
        if not c.block.truncatable or room < self.min_truncated:
            return 0
        frame = c.cost - c.block.token_count
        text = truncate_text(self.counter, c.block.content, room - frame)
        if not text:
            return 0
        cut = c.block.with_content(text, self.counter.count(text))
        cost = self.cost_of(cut)
        if cost > room:
            return 0
        self.decided[c.order] = new_decision(
            c,
            cut,
            "truncated",
            cost,
            f"cut from {c.block.token_count} to {cut.token_count} tokens ({why_cut})",
        )
        return cost

    def fill(self, ranked: Sequence[Candidate], shares: Mapping[str, int]) -> None:
        """Steps 3 and 4: each of `ranked` within its source's share, then within what is
        left of the whole budget."""
        for step in ("its source's budget", "the budget left by other sources"):
            for c in ranked:
                src = c.block.source
                if c.order in self.decided:
                    continue
                room = (
                    self.left
                    if step != "its source's budget"
                    else min(shares.get(src, 0) - self.spent.get(src, 0), self.left)
                )
                used = self.take(c, room, step) if room > 0 else 0
                self.spent[src] = self.spent.get(src, 0) + used
                self.left -= used

    def refill(
        self, ranked: Sequence[Candidate], budget: int, cap: int, extra: Sequence[Decision]
    ) -> None:
        """Step 5's second half: the room duplicates freed to the waiting blocks of
        `ranked`, one per task."""
        free = budget - sum(d.cost for d in self.decided.values()) - sum(d.cost for d in extra)
        # A dropped copy in the dynamic context gives its share of the cap back too.
        tail = [d for d in self.decided.values() if d.block.section == "context"]
        self.dynamic_left = cap - sum(d.cost for d in tail)
        if self.recall is not None:
            self.recall_left = self.recall - sum(d.cost for d in tail if task_of(d.block))
        seen = {task_of(d.block) for d in self.decided.values()} - {None}
        for c in ranked:
            key = task_of(c.block)
            if c.order in self.decided or key in seen:
                continue
            if free <= 0:
                break
            used = self.take(c, free, "the budget left by duplicates")
            free -= used
            if used and key is not None:
                seen.add(key)

    def explain(
        self,
        candidates: Sequence[Candidate],
        reasons: Mapping[int, tuple[BlockStatus, str]],
        below: Mapping[int, str],
        tail: TailLimits,
        after_history: int,
    ) -> list[Decision]:
        """A decision per candidate, in order: those made, and for the rest why they are
        out (history's reasons, a duplicate, `tail_lift`, the tail's limits, the budget)."""
        decided = self.decided
        holder: dict[str, str] | None = None  # who holds each task, once a reason asks
        decisions: list[Decision] = []
        for c in candidates:
            d = decided.get(c.order)
            if d is None:
                status, why = reasons.get(c.order, ("dropped", ""))
                if not why and holder is None:
                    holder = {
                        k: d.block.source for d in decided.values() if (k := task_of(d.block))
                    }
                if not why and holder and (key := task_of(c.block)) in holder:
                    why = f"its task is in the window already (from `{holder[key]}`)"
                why = why or below.get(c.order, "")
                if not why and c.block.section == "context" and task_of(c.block):
                    why = tail.recall_reason(c.cost, self.recall_left)
                if not why and c.block.section == "context":
                    why = tail.reason(c.cost, self.dynamic_left, after_history)
                if not why:
                    why = f"needs {c.cost} tokens; the budget is spent on higher-value content"
                d = new_decision(c, c.block, status, 0, why)
            decisions.append(d)
        return decisions

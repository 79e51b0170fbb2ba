"""`ContextCompactor`: fits the collected blocks into the budget, lowest value out first.

Selection, in order:

1. **Pinned** blocks (the system prompt, the user turn) are kept whole. If they alone exceed
   the budget, `BudgetExceededError` names each with its size.
2. **Within grants.** Each source's blocks are taken in its order of preference (priority,
   then as offered) within the source's grant. A text block that does not fit whole is cut
   on a token boundary if it is truncatable and enough room is left; anything else waits.
3. **Redistribution.** What is left of the whole budget goes to the waiting blocks, highest
   source priority first, then block priority: budget a source does not use is not stranded.
4. **Summarization.** History units that did not fit are summarized (a `Summarizer`; the
   extractive default needs no LLM) into one dynamic-context block, if room is left for it.
   Tool units are atomic everywhere: a unit is kept whole, or dropped or summarized whole.
5. **Deduplication.** A task two sources offer (recent history and retrieval, say; blocks
   name it in `metadata["task_id"]`) goes in once, and the room freed goes to waiting blocks.

The history kept is a contiguous run ending at the newest unit and starting at a user
message (Anthropic requires the first message to be the user's), so the model never sees a
gap in the middle of the conversation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from loomctx.context.block import ContextBlock
from loomctx.context.budget import BudgetManager
from loomctx.context.packing import truncate_text
from loomctx.context.report import BlockStatus
from loomctx.errors import BudgetExceededError, ConfigError, Oversize
from loomctx.memory.summarizers import ExtractiveSummarizer, Summarizer
from loomctx.messages import Message
from loomctx.tokens import TokenCounter

__all__ = ["Candidate", "ContextCompactor", "Decision"]

_SUMMARY_CACHE = 16


def _task_of(block: ContextBlock) -> str | None:
    """The task a block stands for (memory sources say so in `metadata["task_id"]`)."""
    key = block.metadata.get("task_id")
    return str(key) if key is not None else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """A collected block with what it costs in the window and its source's standing."""

    block: ContextBlock
    cost: int
    source_priority: float
    order: int  # position among all candidates, for stable ties


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """What became of one candidate: `block` is what goes in (possibly cut), `cost` its tokens."""

    candidate: Candidate
    block: ContextBlock
    status: BlockStatus
    cost: int
    reason: str = ""


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
        # The same dropped stretch is summarized on every rebuild within a turn: remember it.
        self._summaries: dict[tuple[tuple[str, ...], int, str], str] = {}

    async def compact(
        self,
        candidates: Sequence[Candidate],
        *,
        grants: Mapping[str, int],
        priorities: Mapping[str, float],
        budget: int,
        counter: TokenCounter,
        cost_of: Callable[[ContextBlock], int],
        context_frame: int = 0,
    ) -> list[Decision]:
        """One decision per candidate (in the order given), plus one for a summary block of
        dropped history if one was made.

        `grants` is each source's share of `budget` (by name), `priorities` each source's
        priority; `context_frame` is what a summary block's fence costs (with opening the
        dynamic-context section, if no other source opens it).
        """
        decided: dict[int, Decision] = {}
        pinned = [c for c in candidates if c.block.pinned]
        pinned_cost = sum(c.cost for c in pinned)
        if pinned_cost > budget:
            raise BudgetExceededError(
                offenders=[Oversize(name=c.block.id, tokens=c.cost) for c in pinned],
                budget=budget,
                hint="raise `model_context_window`, lower the output reserve, or shorten them",
            )
        for c in pinned:
            decided[c.order] = Decision(candidate=c, block=c.block, status="kept", cost=c.cost)
        left = budget - pinned_cost
        spent: dict[str, int] = {}
        for c in pinned:
            spent[c.block.source] = spent.get(c.block.source, 0) + c.cost

        def take(c: Candidate, room: int, why_cut: str) -> int:
            """Keep `c` whole or cut within `room`; return the tokens used (0: it waits)."""
            if c.cost <= room:
                decided[c.order] = Decision(candidate=c, block=c.block, status="kept", cost=c.cost)
                return c.cost
            if not c.block.truncatable or room < self.min_truncated_tokens:
                return 0
            frame = c.cost - c.block.token_count
            text = truncate_text(counter, c.block.content, room - frame)
            if not text:
                return 0
            cut = c.block.with_content(text, counter.count(text))
            cost = cost_of(cut)
            if cost > room:
                return 0
            decided[c.order] = Decision(
                candidate=c,
                block=cut,
                status="truncated",
                cost=cost,
                reason=f"cut from {c.block.token_count} to {cut.token_count} tokens ({why_cut})",
            )
            return cost

        # When history will not fit whole, hold back room for a summary of what is left out.
        history_cost = sum(
            c.cost for c in candidates if c.block.section == "history" and not c.block.pinned
        )
        reserve = 0
        if self.summarize_history and history_cost > left:
            reserve = min(self.summary_max_tokens, left // 8)
        left -= reserve
        # Each source keeps what it needs of its share (the reserve taken out pro rata); the
        # rest flows to the sources that want more, highest priority first.
        scale = (budget - reserve) / budget if budget else 0.0
        demands: dict[str, int] = {}
        for c in candidates:
            demands[c.block.source] = demands.get(c.block.source, 0) + c.cost
        shares = BudgetManager.redistribute(
            {name: int(g * scale) for name, g in grants.items()}, demands, priorities
        )
        # Newest history first within a source, whatever priorities it gave.
        ranked = sorted(
            (c for c in candidates if not c.block.pinned),
            key=lambda c: (
                -c.source_priority,
                c.block.source,
                -c.block.sequence if c.block.section == "history" else 0,
                -c.block.priority,
                c.order,
            ),
        )
        # Step 2: within each source's grant; step 3: what is left flows to waiting blocks,
        # by source priority then block value. A history unit that does not fit blocks the
        # older units of its source in that pass, so the kept history has no gaps.
        for step in ("its source's budget", "the budget left by other sources"):
            blocked: set[str] = set()
            for c in ranked:
                src = c.block.source
                if c.order in decided or src in blocked:
                    continue
                room = (
                    left
                    if step != "its source's budget"
                    else min(shares.get(src, 0) - spent.get(src, 0), left)
                )
                used = take(c, room, step) if room > 0 else 0
                spent[src] = spent.get(src, 0) + used
                left -= used
                if not used and c.block.section == "history":
                    blocked.add(src)

        leading: set[int] = set()
        self._keep_history_unbroken(candidates, decided, leading)
        # The same task offered by two sources (recent history and retrieval, an inherited
        # memory and a shared pool) goes in once; the room it frees goes to waiting blocks.
        if self._drop_duplicates(ranked, decided):
            free = budget - reserve - sum(d.cost for d in decided.values())
            seen = {_task_of(d.block) for d in decided.values()} - {None}
            for c in ranked:
                key = _task_of(c.block)
                if c.order in decided or c.block.section == "history" or key in seen:
                    continue
                if free <= 0:
                    break
                used = take(c, free, "the budget left by duplicates")
                free -= used
                if used and key is not None:
                    seen.add(key)
        # A copy left out because its task is in the window already says so, whichever step
        # left it out.
        holder = {k: d.block.source for d in decided.values() if (k := _task_of(d.block))}
        duplicate = {
            c.order: f"its task is in the window already (from `{holder[key]}`)"
            for c in candidates
            if c.order not in decided
            and c.block.section != "history"
            and (key := _task_of(c.block)) in holder
        }
        left += reserve
        first_user = "the window's history must begin with a user message"
        decisions = [
            decided.get(c.order)
            or Decision(
                candidate=c,
                block=c.block,
                status="dropped",
                cost=0,
                reason=first_user if c.order in leading else duplicate.get(c.order, ""),
            )
            for c in candidates
        ]
        decisions = [self._explain(d) for d in decisions]
        left = budget - sum(d.cost for d in decisions) - context_frame
        summary = await self._summarize(decisions, left, counter, cost_of)
        return [*decisions, *summary]

    @staticmethod
    def _keep_history_unbroken(
        candidates: Sequence[Candidate], decided: dict[int, Decision], leading: set[int]
    ) -> None:
        """Per history source: keep only the unbroken run of kept units ending at the newest,
        and start it at a user message (the units before that go into `leading`)."""
        by_source: dict[str, list[Candidate]] = {}
        for c in candidates:
            if c.block.section == "history":
                by_source.setdefault(c.block.source, []).append(c)
        for units in by_source.values():
            units.sort(key=lambda c: -c.block.sequence)
            run = 0
            while run < len(units) and units[run].order in decided:
                run += 1
            for c in units[run:]:
                decided.pop(c.order, None)
            kept = units[:run][::-1]  # oldest first
            for c in kept:
                if c.block.messages and c.block.messages[0].role == "user":
                    break
                del decided[c.order]
                leading.add(c.order)

    @staticmethod
    def _drop_duplicates(ranked: Sequence[Candidate], decided: dict[int, Decision]) -> bool:
        """Drop kept blocks whose task (`metadata["task_id"]`) is already in the window: history
        wins (it must stay unbroken), then the first kept in rank order. Returns whether any
        was dropped (the reasons are given once selection is over)."""
        kept = [c for c in ranked if c.order in decided]
        held = {
            key
            for c in kept
            if c.block.section == "history" and (key := _task_of(c.block)) is not None
        }
        dropped = False
        for c in kept:
            key = _task_of(c.block)
            if key is None or c.block.section == "history" or c.block.pinned:
                continue
            if key in held:
                del decided[c.order]
                dropped = True
            else:
                held.add(key)
        return dropped

    @staticmethod
    def _explain(d: Decision) -> Decision:
        if d.status != "dropped" or d.reason:
            return d
        b = d.candidate.block
        if b.section == "history":
            why = "older than the history that fits (history is kept newest first, unbroken)"
        else:
            why = f"needs {d.candidate.cost} tokens; the budget is spent on higher-value content"
        return Decision(candidate=d.candidate, block=d.block, status="dropped", cost=0, reason=why)

    async def _summarize(
        self,
        decisions: list[Decision],
        left: int,
        counter: TokenCounter,
        cost_of: Callable[[ContextBlock], int],
    ) -> list[Decision]:
        dropped = [
            i
            for i, d in enumerate(decisions)
            if d.status == "dropped" and d.candidate.block.section == "history"
        ]
        if not (self.summarize_history and dropped):
            return []
        # Only the stretch just before the kept history: its cost stays flat with the length
        # of the conversation, and the oldest material is what memory tiers are for.
        dropped = sorted(dropped, key=lambda i: decisions[i].candidate.block.sequence)[-40:]
        source = decisions[dropped[0]].candidate.block.source
        shell = ContextBlock(
            source=source,
            section="context",
            id=f"{source}:summary",
            content="",
            priority=0.0,
            truncatable=True,
            metadata={"kind": "summary", "summarized": len(dropped)},
        )
        header = f"Summary of {len(dropped)} earlier conversation units not shown in full:\n"
        frame = cost_of(shell.with_content(header, 0))
        room = min(self.summary_max_tokens, left - frame)
        if room < self.min_truncated_tokens:
            return []
        texts = [
            " | ".join(_describe(m) for m in decisions[i].candidate.block.messages) for i in dropped
        ]
        key = (tuple(texts), room, counter.name)
        text = self._summaries.get(key)
        if text is None:
            text = await self.summarizer.summarize(texts, max_tokens=room, counter=counter)
            self._summaries[key] = text
            if len(self._summaries) > _SUMMARY_CACHE:
                del self._summaries[next(iter(self._summaries))]
        if not text:
            return []
        block = shell.with_content(header + text, counter.count(header + text))
        cost = cost_of(block)
        if cost > left:
            return []
        for i in dropped:
            d = decisions[i]
            decisions[i] = Decision(
                candidate=d.candidate,
                block=d.block,
                status="summarized",
                cost=0,
                reason=f"summarized into `{block.id}`: {d.reason}",
            )
        summary = Candidate(block=block, cost=cost, source_priority=0.0, order=-1)
        return [Decision(candidate=summary, block=block, status="kept", cost=cost)]

"""The values compaction decides with: a collected block as a `Candidate`, what became of it
(`Decision`), when history is compacted (`CachePolicy`, `HistoryMark`, `Compaction`), and the
dynamic tail's limits in one build (`TailLimits`), so that a report names the rule that left
a block out."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from loomctx.context.billing import ANTHROPIC, CachePricing
from loomctx.context.block import ContextBlock
from loomctx.context.report import BlockStatus, CompactionNote
from loomctx.errors import ConfigError, check_unit

__all__ = [
    "CachePolicy",
    "Candidate",
    "Compaction",
    "Decision",
    "HistoryMark",
    "TailLimits",
    "cold_tail",
    "held_tasks",
    "new_candidate",
    "new_decision",
    "recall_limit",
    "skipped_tail",
    "tail_scale",
    "task_of",
    "unlifted",
]


def task_of(block: ContextBlock) -> str | None:
    """The task a block stands for (memory sources say so in `metadata["task_id"]`)."""
    key = block.metadata.get("task_id")
    return key if key is None or type(key) is str else str(key)


def held_tasks(candidates: Sequence[Candidate], marks: Mapping[str, HistoryMark]) -> set[str]:
    """The tasks of the history units offered from each history source's mark on: those the
    window's history holds unless this build compacts it."""
    held: set[str] = set()
    for c in candidates:
        block = c.block
        if block.section != "history" or (key := task_of(block)) is None:
            continue
        mark = marks.get(block.source)
        if mark is None or block.sequence >= mark.sequence:
            held.add(key)
    return held


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


# The slots' own setters, which a frozen value's fields can be set through once, as it is made.
_SET_C_BLOCK, _SET_C_COST, _SET_C_PRIORITY, _SET_C_ORDER = (
    Candidate.__dict__[name].__set__ for name in ("block", "cost", "source_priority", "order")
)
_SET_CANDIDATE, _SET_BLOCK, _SET_STATUS, _SET_COST, _SET_REASON = (
    Decision.__dict__[name].__set__ for name in ("candidate", "block", "status", "cost", "reason")
)


def new_candidate(block: ContextBlock, cost: int, source_priority: float, order: int) -> Candidate:
    """The value ``Candidate(block=block, ...)`` makes, made as `new_decision` makes its
    value: one per block offered, on every build."""
    made = object.__new__(Candidate)
    _SET_C_BLOCK(made, block)
    _SET_C_COST(made, cost)
    _SET_C_PRIORITY(made, source_priority)
    _SET_C_ORDER(made, order)
    return made


def new_decision(
    candidate: Candidate, block: ContextBlock, status: BlockStatus, cost: int, reason: str = ""
) -> Decision:
    """The value ``Decision(candidate=candidate, ...)`` makes, for less: a compaction makes
    one per candidate of every build (hundreds with a long history), and a frozen
    dataclass's `__init__` parses keywords and sets each field through `object.__setattr__`,
    where this sets the slots directly (as `new_evidence` does)."""
    made = object.__new__(Decision)
    _SET_CANDIDATE(made, candidate)
    _SET_BLOCK(made, block)
    _SET_STATUS(made, status)
    _SET_COST(made, cost)
    _SET_REASON(made, reason)
    return made


@dataclass(frozen=True, slots=True, kw_only=True)
class CachePolicy:
    """When history is compacted, for windows a provider's prompt cache can reuse.

    - `low_water`: after a compaction, history (with its summary) takes at most this share of
      its room, so it can grow by appending for a while before the next one (default 0.6).
      A source that says how many units it can hold (``metadata["capacity"]``, as
      `L1RecentSource` does) keeps at most this share of them too.
    - `defer_ratio`: an overflow up to this share of the room is taken from the dynamic
      context instead of compacting (default 0.1).
    - `max_dynamic`: the share of the input budget the dynamic tail (retrieved memory and
      knowledge, sent new on every call) may take at most; None: no cap beyond the sources'
      budgets (default).
    - `min_dynamic`: the tokens of dynamic context that come before history older than its
      newest `core_units` units (default 2,000; 0: history keeps its whole share). In a small
      window the best retrieved blocks hold more of what a question needs per token than
      older history does; in a large one the dynamic sources' own shares exceed the floor and
      nothing changes. Only as much as the dynamic sources offer, and only in windows without
      `max_dynamic`: a window that caps its dynamic tail for the cache's sake (an `Agent`'s,
      the proxy's) keeps history's share (see `dynamic_floor`).
    - `core_units`: the newest history units (opening with a user message) that history keeps
      whatever the floor takes (default 4): a conversation needs its last exchanges.
    - `min_tail_score`: skip the dynamic tail on a call where no block the window lacks
      scores at least this (its priority, 0..1); None: never skip (default). Opt-in: a
      skipped tail costs nothing, and what it would have brought is missing from that call.
    - `tail_lift`: send a memory block (one that stands for a task of the conversation) in
      the dynamic tail only when its relevance score (``metadata["score"]``) stands at least
      this far above the level of what its build retrieved (the median score of the memory
      blocks offered, those the window holds included; with fewer than `MIN_POOL` of them,
      every one is sent; knowledge chunks are not held back); None: no such rule
      (default; the window recipe's is 0.03). A query that matches nothing in particular
      (small talk) gets a small tail or none, a question that singles out a few old turns
      gets them; blocks without a score (important memory, chosen by importance, not by the
      query) are not sent under this rule.
    - `full_tail_lift`: the dynamic tail's cap scales with how far the best block the window
      lacks stands above the level of what its build retrieved (the median score of the
      dynamic blocks offered): all of the cap at this lift or more, a proportional share
      below it, none when nothing stands out; None: the whole cap on every call (default).
      Unlike `tail_lift`, a question that singles something out keeps its lower-ranked hits
      too (the second and third turn a question needs may score near the rest).
    - `fill_first`: a session's first window (no history mark yet), when its history
      outgrows the room, fills the room with whole units (True, the default), or keeps the
      newest within the low-water mark like any compaction (False), so that history grows
      for a while before the next one: a first window that fills its room is compacted a
      call or two later, breaking the cache it just wrote. The window recipe's is False.
    - `cold_tail`: on a call where nothing cached is at stake (the session's first window, or
      its cache gone cold: idle past the provider's lifetime), the dynamic tail may use all
      the room history leaves, by relevance, beyond `max_dynamic` and `full_tail_lift`'s
      cap and `tail_lift`'s bar (True, the default): the cap is there to protect the cache,
      and a cold call has none to protect, so tail tokens cost what history's do. History
      is placed as on any call (at its low-water mark after a first compaction), so the
      next, warm call appends to it and caps the tail again: its window minus its tail
      still begins with this one's minus its tail. False: the cap on every call.
    - `first_tail`: in a session's first window (with `cold_tail`), where no history is
      placed yet, plan the tail's sources before history: they are asked for enough to
      fill the window (`dynamic_floor`) and want all they offer, by priority, so history
      keeps the newest units within what they leave (at its low-water mark). A first
      question over a long memory is better served by what it retrieves than by older
      history, but the warm calls after it append to that short history, so their
      prefix is small (under a provider's smallest cacheable prefix in a small window) and
      the capped tail a larger part of their bill, until history grows back: opt-in
      (default False). Without it, a first window plans its tail first all the same when
      history, placed as on any call, would make a prefix shorter than the provider caches
      (`CachePricing.min_tokens`, with the prompt and tools before it): such a history
      seeds no cache, so it has no claim on the room. A later cold call places history as
      any call does.
    - `memory_payback`: the conversation's own memory in the dynamic tail (blocks that stand
      for a task) takes at most this multiple of what history's compactions save on the
      call: the tokens that have left history (`HistoryMark.dropped`) less its summary, at
      the provider's cached-read price, counted in plain input tokens (at Anthropic's
      prices, a tenth of them); None: no such limit (default; the window recipe's is 1.0).
      Recalled turns stand in for the history the window no longer sends, so they cost no
      more than sending it would: past its room, a conversation's call is billed about what
      re-sending the whole conversation would be, and the further it reaches the more its
      tail may recall. Only once history has been compacted (before, the window holds the
      whole conversation, and the memory it lacks is another conversation's, which no
      amount of history would bring), and not on a cold call (`cold_tail`). Knowledge
      chunks are not held to it.
    - `expected_calls`: how many further calls a compaction's saving is counted over
      (default 20): a compaction removes at least the tokens that repay the cache its
      rewrite breaks, at the provider's prices (`break_even`). A session idle longer than
      the provider's cache lifetime has a cold cache: a compaction that is due (history past
      its room, the overflow taken from the tail) is done then, as the rewrite breaks
      nothing (`loomctx.context.billing.CachePricing`).
    """

    low_water: float = 0.6
    defer_ratio: float = 0.1
    max_dynamic: float | None = None
    min_dynamic: int = 2000
    core_units: int = 4
    min_tail_score: float | None = None
    tail_lift: float | None = None
    full_tail_lift: float | None = None
    fill_first: bool = True
    cold_tail: bool = True
    first_tail: bool = False
    memory_payback: float | None = None
    expected_calls: int = 20

    def __post_init__(self) -> None:
        for name in ("low_water", "defer_ratio"):
            check_unit(getattr(self, name), f"`CachePolicy.{name}`")
        for name in ("max_dynamic", "min_tail_score", "tail_lift", "full_tail_lift"):
            if getattr(self, name) is not None:
                check_unit(getattr(self, name), f"`CachePolicy.{name}`")
        payback = self.memory_payback
        if payback is not None and (
            isinstance(payback, bool)
            or not isinstance(payback, int | float)
            or not 0 <= payback < math.inf
        ):
            raise ConfigError(
                "`CachePolicy.memory_payback` must be a finite number >= 0 or None, "
                f"got {payback!r}"
            )
        for name in ("fill_first", "cold_tail", "first_tail"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(
                    f"`CachePolicy.{name}` must be True or False, got {getattr(self, name)!r}"
                )
        for name in ("min_dynamic", "core_units", "expected_calls"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"`CachePolicy.{name}` must be an int >= 0, got {value!r}")

    def break_even(self, size: int, pricing: CachePricing = ANTHROPIC) -> int:
        """The most tokens a compaction of `size` tokens of history may keep and still repay
        the cache it breaks, at `pricing`'s prices. Removing R tokens saves them on this call
        and a cached read of each on `expected_calls` (T) calls after; rewriting the
        B = size - R tokens kept behind the edit costs each of them a write instead of a
        read. With p and c the write and read prices, it pays when R (p + T c) > B (p - c)."""
        p, c, t = pricing.write, pricing.read, self.expected_calls
        k = (p - c) / (p + t * c) if p + t * c else 0.0
        return int(size / (1 + k))

    def dynamic_floor(
        self, available: int, dynamic_limit: int | None = None, *, first: bool = False
    ) -> int:
        """The tokens of a budget of `available` that the dynamic context may claim ahead of
        older history: `min_dynamic` within `available` and `dynamic_limit` (the budget
        manager's cap), or 0 when `max_dynamic` caps the dynamic tail. In a session's
        `first` window, with `cold_tail` and `first_tail`, the tail's sources are planned
        before history: `available` within `dynamic_limit`, so that a dynamic source offers
        enough to fill the window."""
        if first and self.cold_tail and self.first_tail:
            floor = available
        elif self.max_dynamic is not None:
            return 0
        else:
            floor = min(self.min_dynamic, available)
        return max(0, floor if dynamic_limit is None else min(floor, dynamic_limit))


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryMark:
    """Where a history source's kept history starts (`start`, a block id, and `sequence`,
    that block's), the frozen summary of what came before it (a `history` block, or None),
    the tokens of the units that have left the kept history since its first window
    (`dropped`: compacted into the summary or past it), which a client re-sending the whole
    conversation sends and this window does not, and the tokens the compaction that set the
    mark wrote where a cache held others (`rewritten`: what it kept; 0 when nothing cached
    was at stake)."""

    start: str
    summary: ContextBlock | None = None
    sequence: int = 0
    dropped: int = 0
    rewritten: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Compaction:
    """What `ContextCompactor.compact` decided: a decision per candidate (and one per history
    summary kept), the history marks for the next build, and notes on compactions."""

    decisions: list[Decision]
    marks: dict[str, HistoryMark]
    notes: tuple[CompactionNote, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TailLimits:
    """The dynamic tail's limits in one build (its `cap` in tokens, the `share` of the input
    that set it, and why it was skipped, if it was), to name the rule that left a block of it
    out."""

    cap: int
    share: float | None
    skipped: str = ""
    scaled: str = ""  # how `CachePolicy.full_tail_lift` scaled the cap, if it did
    lifted: str = ""  # why `CachePolicy.cold_tail` lifted the cap, if it did
    recall: int | None = None  # the conversation's memory's limit (`memory_payback`)
    saved: int = 0  # the history tokens the window no longer sends, that set `recall`
    rewritten: int = 0  # the tokens the last compaction rewrote, that lowered `recall`

    def recall_reason(self, cost: int, recall_left: int) -> str:
        """Why a memory block of `cost` tokens did not go in, with `recall_left` of the
        conversation memory's limit unused; "" if that limit did not decide."""
        if self.recall is None or cost <= recall_left:
            return ""
        return (
            f"recalled turns may cost what the history they stand in for would: {self.recall} "
            f"tokens on this call, as {self.saved} tokens of history are no longer sent and "
            f"the last compaction rewrote {self.rewritten} (`CachePolicy.memory_payback`), "
            f"and {self.recall - recall_left} are used; this block needs {cost}"
        )

    def reason(self, cost: int, cap_left: int, after_history: int) -> str:
        """Why a block of `cost` tokens did not go in, with `cap_left` of the cap unused and
        `after_history` tokens of the budget left once history was placed; "" if neither
        rule decided."""
        if self.skipped:
            return self.skipped
        if cost > cap_left and self.lifted:
            return (
                f"the dynamic tail may use the {self.cap} tokens history leaves ({self.lifted}) "
                f"and {self.cap - cap_left} are used; this block needs {cost}"
            )
        if cost > cap_left and (self.share is not None or self.scaled):
            rule = (
                f"`CachePolicy.max_dynamic`: {self.share:.0%} of the input"
                if self.share is not None
                else "the budget"
            )
            scaled = f"; {self.scaled}" if self.scaled else ""
            return (
                f"the dynamic tail is capped at {self.cap} tokens ({rule}{scaled}) and "
                f"{self.cap - cap_left} are used; this block needs {cost}"
            )
        if cost > after_history and after_history < self.cap:
            return (
                f"history fills the window and leaves the tail {after_history} tokens (the "
                f"tail holds what history lacks, in the room history leaves); this block "
                f"needs {cost}"
            )
        return ""


def cold_tail(
    tail: TailLimits, room: int, limit: int | None, policy: CachePolicy, *, cold: bool
) -> TailLimits:
    """`tail` with its cap lifted to `room` (the tokens history leaves; at most `limit`, the
    budget manager's cap on dynamic context) when the call is `cold` (nothing cached is at
    stake) and `CachePolicy.cold_tail` allows it; `tail` as it is otherwise, or when it is
    skipped (`CachePolicy.min_tail_score`)."""
    if not (cold and policy.cold_tail) or tail.skipped:
        return tail
    lifted = room if limit is None else min(room, limit)
    if lifted <= tail.cap:
        return tail
    return replace(
        tail,
        cap=lifted,
        lifted="nothing cached is at stake: the session's first window, or its cache has "
        "gone cold; `CachePolicy.cold_tail`",
    )


def recall_limit(
    tail: TailLimits,
    marks: Mapping[str, HistoryMark],
    summarized: int,
    policy: CachePolicy,
    pricing: CachePricing,
) -> TailLimits:
    """`tail` with the limit `CachePolicy.memory_payback` puts on the conversation's memory in
    it, in plain input tokens: what the history the window no longer sends would cost as a
    cached read (the tokens `marks` say have left it, less the `summarized` tokens of the
    summaries standing for them), less what the last compaction's rewrite cost beyond a read,
    spread over `CachePolicy.expected_calls` calls; `tail` as it is when the policy sets no
    such limit or history has not been compacted."""
    dropped = sum(mark.dropped for mark in marks.values())
    if policy.memory_payback is None or dropped <= 0:
        return tail
    saved = max(0, dropped - summarized)
    rewritten = sum(mark.rewritten for mark in marks.values())
    overhead = rewritten * (pricing.write - pricing.read) / max(1, policy.expected_calls)
    worth = max(0.0, saved * pricing.read - overhead) / pricing.plain if pricing.plain else 0.0
    return replace(
        tail, recall=int(policy.memory_payback * worth), saved=saved, rewritten=rewritten
    )


def skipped_tail(candidates: Sequence[Candidate], held: set[str], policy: CachePolicy) -> str:
    """Why the dynamic tail is skipped in this build (`CachePolicy.min_tail_score`: no block
    the window lacks scores as high), or ""."""
    if policy.min_tail_score is None:
        return ""
    scores = [
        float(c.block.metadata.get("score", c.block.priority))
        for c in candidates
        if c.block.section == "context" and task_of(c.block) not in held
    ]
    best = max(scores, default=0.0)
    if not scores or best >= policy.min_tail_score:
        return ""
    return (
        f"the tail is skipped: no block the window lacks scores {policy.min_tail_score:g} "
        f"(`CachePolicy.min_tail_score`); the best scores {best:.2f}"
    )


MIN_POOL = 3
"""`CachePolicy.tail_lift` and `full_tail_lift` measure a block against the median of what
was retrieved when at least this many scored blocks were: with fewer (a small knowledge
base, a pointed search) what was retrieved is all that matched, and nothing is held back."""


def _score(block: ContextBlock) -> float | None:
    value = block.metadata.get("score")
    return float(value) if isinstance(value, int | float) else None


def unlifted(candidates: Sequence[Candidate], policy: CachePolicy) -> dict[int, str]:
    """The dynamic blocks that `CachePolicy.tail_lift` leaves out of the tail (by candidate
    order), each with the reason: its score is not that far above the median score of the
    memory blocks offered, or it has no score. Only the conversation's own memory (blocks
    that stand for a task) is weighed so: a knowledge chunk or another source's block is
    never in the history, and goes in within the cap as before. (A block whose task
    history holds goes in as history, whatever this says.)"""
    if policy.tail_lift is None:
        return {}
    dynamic = [
        c for c in candidates if c.block.section == "context" and task_of(c.block) is not None
    ]
    scores = sorted(s for c in dynamic if (s := _score(c.block)) is not None)
    if len(scores) < MIN_POOL:
        return {}  # nothing to stand above: what was retrieved is all that matched
    level = _median(scores)
    bar = level + policy.tail_lift
    out: dict[int, str] = {}
    for c in dynamic:
        score = _score(c.block)
        if score is None:
            out[c.order] = (
                "it has no relevance score to stand above the retrieved level "
                "(`CachePolicy.tail_lift`: the tail holds what this query singles out)"
            )
        elif score < bar:
            out[c.order] = (
                f"it scores {score:.2f}, less than {policy.tail_lift:g} above the median "
                f"{level:.2f} of what was retrieved (`CachePolicy.tail_lift`)"
            )
    return out


def _median(ordered: Sequence[float]) -> float:
    if not ordered:
        return 0.0
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def tail_scale(
    candidates: Sequence[Candidate], held: set[str], policy: CachePolicy
) -> tuple[float, str]:
    """The share of the tail's cap this build gives it under `CachePolicy.full_tail_lift`
    (1.0 without it), and how it was found ("" when not scaled)."""
    if policy.full_tail_lift is None:
        return 1.0, ""
    dynamic = [c for c in candidates if c.block.section == "context"]
    scored = [(c, s) for c in dynamic if (s := _score(c.block)) is not None]
    if len(scored) < MIN_POOL:
        return 1.0, ""
    level = _median(sorted(s for _, s in scored))
    lacked = [s for c, s in scored if task_of(c.block) not in held]
    lift = max(lacked, default=level) - level
    full = policy.full_tail_lift
    share = 1.0 if full <= 0 else max(0.0, min(1.0, lift / full))
    if share >= 1.0:
        return 1.0, ""
    return share, (
        f"{share:.0%} of it, as the best block the window lacks stands {lift:.2f} above the "
        f"median {level:.2f} of what was retrieved (`CachePolicy.full_tail_lift`: all of it "
        f"at {full:g})"
    )

"""Pure packing functions: which items fit a token budget, and how to cut text to fit.

`plan_packing` is a priority knapsack with truncation. It decides from token costs alone
(no text, no I/O), so the assembler and the orchestrator share one tested rule:

1. Required items (must be kept whole) are placed first. If they cannot all fit, the plan
   fails with `BudgetExceededError` naming each one that did not fit and its size.
2. The other items are taken in priority order (highest first; ties keep their given order).
   An item that fits is included whole. The first item that does not fit is truncated to the
   remaining budget if it is truncatable and at least `min_truncated_tokens` remain;
   otherwise it is dropped. Every item after it is dropped ("budget exhausted").

Stopping at the first item that does not fit keeps the plan monotone: with a larger budget,
nothing that was included is ever left out (a property test checks it).

`truncate_text` cuts text to a token allowance on a token boundary, never inside a character,
preferring the end of a line or sentence, and appends a marker whose tokens are counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from loomctx.context.block import ContextBlock
from loomctx.errors import BudgetExceededError, Oversize
from loomctx.tokens import TokenCounter

__all__ = [
    "TRUNCATION_MARKER",
    "PackItem",
    "Placement",
    "history_drop_reason",
    "plan_packing",
    "truncate_text",
]

TRUNCATION_MARKER: Final = "\n... (truncated)"

Status = Literal["included", "truncated", "dropped"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PackItem:
    """One candidate for the budget: its cost when whole, its priority and how it may be cut."""

    key: str
    tokens: int
    priority: float
    required: bool = False
    truncatable: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """The decision for one item: `tokens` is what it was granted (0 when dropped)."""

    key: str
    status: Status
    tokens: int
    reason: str


def plan_packing(
    items: Sequence[PackItem], budget: int, *, min_truncated_tokens: int = 8
) -> list[Placement]:
    """Decide, for each item in `items`, whether it is included whole, truncated or dropped.

    Returns one `Placement` per item, in the order of `items`. Raises `BudgetExceededError`
    when the required items alone exceed `budget`.
    """
    order = sorted(range(len(items)), key=lambda i: -items[i].priority)  # stable: ties keep order
    decided: dict[int, Placement] = {}
    remaining = budget

    oversize: list[Oversize] = []
    for i in order:
        item = items[i]
        if not item.required:
            continue
        if item.tokens <= remaining:
            remaining -= item.tokens
            decided[i] = Placement(key=item.key, status="included", tokens=item.tokens, reason="")
        else:
            oversize.append(Oversize(name=item.key, tokens=item.tokens))
    if oversize:
        raise BudgetExceededError(offenders=oversize, budget=budget)

    blocker: PackItem | None = None
    for i in order:
        item = items[i]
        if item.required:
            continue
        if blocker is not None:
            reason = f"budget exhausted: `{blocker.key}` (higher priority) did not fit whole"
            decided[i] = Placement(key=item.key, status="dropped", tokens=0, reason=reason)
        elif item.tokens <= remaining:
            remaining -= item.tokens
            decided[i] = Placement(key=item.key, status="included", tokens=item.tokens, reason="")
        elif item.truncatable and remaining >= min_truncated_tokens:
            decided[i] = Placement(
                key=item.key,
                status="truncated",
                tokens=remaining,
                reason=f"cut from {item.tokens} to fit the {remaining} tokens left",
            )
            remaining = 0
            blocker = item
        else:
            why = "not truncatable" if not item.truncatable else "too few tokens left to cut to"
            reason = f"needs {item.tokens} tokens, {remaining} left ({why})"
            decided[i] = Placement(key=item.key, status="dropped", tokens=0, reason=reason)
            blocker = item
    return [decided[i] for i in range(len(items))]


_SENTENCE_ENDS: Final = (". ", "! ", "? ", ".\t", "。", "！", "？", "；", "…")


def _nice_cut(prefix: str) -> str:
    """Shorten `prefix` to the last line end or sentence end in its second half, if any."""
    floor = len(prefix) // 2
    line = prefix.rfind("\n")
    if line >= floor:
        return prefix[:line]
    best = max(prefix.rfind(end) + len(end.rstrip()) for end in _SENTENCE_ENDS)
    if best > floor:
        return prefix[:best]
    space = prefix.rfind(" ")
    if space >= len(prefix) * 4 // 5:
        return prefix[:space]
    return prefix


def truncate_text(
    counter: TokenCounter, text: str, max_tokens: int, *, marker: str = TRUNCATION_MARKER
) -> str:
    """`text` cut to at most `max_tokens` tokens, marker included.

    Returns `text` unchanged when it fits, and ``""`` when not even the marker fits. The cut
    is on a token boundary, between whole characters, at a line or sentence end when one is
    near, and the result (marker appended) is re-counted so it never exceeds `max_tokens`.
    """
    if counter.count(text) <= max_tokens:
        return text
    allowance = max_tokens - counter.count(marker)
    while allowance > 0:
        prefix = _nice_cut(counter.truncate(text, allowance)).rstrip()
        if prefix:
            out = prefix + marker
            over = counter.count(out) - max_tokens
            if over <= 0:
                return out
            allowance -= over
        else:
            return ""
    return ""


def history_drop_reason(block: ContextBlock, cost: int, room: int) -> str:
    """Why a unit of history older than the history kept is dropped: a unit holding an image
    or a file that is larger than the history's room says so, with its size, as it is never
    cut."""
    if cost > room and any(m.parts for m in block.messages):
        return (
            f"needs {cost} tokens whole (it holds an image or a file, never cut), more than "
            f"the {room} the history has"
        )
    return "older than the history kept (history is compacted in steps, the newest units whole)"

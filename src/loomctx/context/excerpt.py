"""Excerpts: a text too long for the window shown as its head and its tail, with a handle.

One tool result of 80 KB would take a 16k window whole: the pinned exchange could not fit,
and in history it would push out every older turn. A text over its allowance is shown
instead as its first and last parts, cut on token boundaries with the real counter (at a
line end when one is near), and a marker between them that says how much was left out and
names a handle under which the whole text is stored::

    <head>
    [... 74,312 tokens left out (characters 3,120 to 77,508 of 80,611); read them with
    read_result(handle="r-1f0c...", offset=3120)]
    <tail>

Head and tail get half of the allowance each: a result's head usually says what it is (a
header, a schema), its tail how it ended (a summary line, the error at the end of a log).
The excerpt is a pure function of the text, the allowance, the handle and the counter: the
same text gives the same bytes on every build, so a window prefix that holds it stays
cacheable.

`fit_unit` applies this to a unit of messages (a tool call with its results, or one
message): when the unit takes more than its allowance, the longest of its texts are cut to
a common level and the shorter ones are kept whole, until the unit fits. `note_excerpts`
writes what was cut into a window's `ContextReport`.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from loomctx.context.block import ContextBlock
from loomctx.context.packing import truncate_text
from loomctx.context.report import BlockReport, ContextReport
from loomctx.errors import check_int
from loomctx.messages import Message
from loomctx.tokens import TOKENS_REPLY_PRIMING, TokenCounter

__all__ = [
    "DEFAULT_EXCERPT_SHARE",
    "HANDLE_PREFIX",
    "MIN_EXCERPT_TOKENS",
    "Excerpt",
    "check_excerpt_tokens",
    "excerpt",
    "fit_unit",
    "handle_for",
    "note_excerpts",
    "task_of_handle",
]

DEFAULT_EXCERPT_SHARE: Final = 0.25
"""The share of the input budget one unit (a tool call with its results, a message) may take
in the window before its long texts are shown as excerpts, when no limit is set."""

MIN_EXCERPT_TOKENS: Final = 128
"""The smallest allowance an excerpt is cut to: the marker takes up to about 70 tokens."""

HANDLE_PREFIX: Final = "r-"

# Characters that continue the grapheme before them: a tail must not start with one.
_ZWJ: Final = "\u200d"
_CONTINUATIONS: Final = ((0xFE00, 0xFE0F), (0x1F3FB, 0x1F3FF), (0xE0020, 0xE007F))


def check_excerpt_tokens(value: object, what: str) -> int | None:
    """`value` if it is None (a share of the budget) or an int >= `MIN_EXCERPT_TOKENS`; else
    a `ConfigError` naming `what`."""
    share = f"{DEFAULT_EXCERPT_SHARE:.0%} of the input budget"
    return check_int(value, what, minimum=MIN_EXCERPT_TOKENS, none=share)


def handle_for(task_id: str) -> str:
    """The handle under which the stored text of task `task_id` is read (``r-<task id>``)."""
    return f"{HANDLE_PREFIX}{task_id}"


def task_of_handle(handle: str) -> str:
    """The task id a handle names (a bare task id is taken as is)."""
    handle = handle.strip()
    return handle[len(HANDLE_PREFIX) :] if handle.startswith(HANDLE_PREFIX) else handle


@dataclass(frozen=True, slots=True, kw_only=True)
class Excerpt:
    """A text shown in part: its `handle`, its size (`tokens`) and the tokens of the excerpt
    shown in its place (`shown`, the marker included)."""

    handle: str
    tokens: int
    shown: int

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types (what a block's ``metadata["excerpts"]`` holds)."""
        return {"handle": self.handle, "tokens": self.tokens, "shown": self.shown}


def _marker(left: int, start: int, end: int, size: int, handle: str, read_tool: str | None) -> str:
    where = f"characters {start:,} to {end:,} of {size:,}"
    if read_tool is None:
        return f"[... {left:,} tokens left out ({where}); the whole text is stored as {handle!r}]"
    return (
        f"[... {left:,} tokens left out ({where}); read them with "
        f'{read_tool}(handle="{handle}", offset={start})]'
    )


def _continues(text: str, i: int) -> bool:
    """Whether a cut before `text[i]` would split a grapheme (approximately)."""
    ch = text[i]
    if ch == _ZWJ or text[i - 1] == _ZWJ or unicodedata.combining(ch):
        return True
    return any(lo <= ord(ch) <= hi for lo, hi in _CONTINUATIONS)


def _tail(counter: TokenCounter, text: str, max_tokens: int, floor: int) -> str:
    """The longest suffix of `text` that starts at `floor` or later and counts at most
    `max_tokens`, starting at a line start when one is in its first half."""
    n = len(text)
    if max_tokens <= 0 or floor >= n:
        return ""
    # Look at a window of the end that is just large enough, not at all of an 80 KB text.
    width = 4 * max_tokens + 16
    while True:
        start = max(floor, n - width)
        if start == floor or counter.count(text[start:]) > max_tokens:
            break
        width *= 2
    if counter.count(text[start:]) <= max_tokens:
        cut = start
    else:
        lo, hi = start, n  # text[lo:] does not fit, text[hi:] does
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if counter.count(text[mid:]) <= max_tokens:
                hi = mid
            else:
                lo = mid
        cut = hi
    while 0 < cut < n and _continues(text, cut):
        cut += 1
    line = text.find("\n", cut, cut + (n - cut) // 2)
    if line >= 0:
        cut = line + 1
    return text[cut:]


def excerpt(
    counter: TokenCounter,
    text: str,
    max_tokens: int,
    *,
    handle: str,
    read_tool: str | None = None,
) -> str:
    """`text` if it counts at most `max_tokens` tokens; else its head and its tail with a
    marker between them that says what was left out, `max_tokens` tokens at most in all.

    The marker names `handle`, and `read_tool` (a tool's name) if the model can read the
    rest with it. Returns ``""`` when not even the marker fits. Deterministic.
    """
    total = counter.count(text)
    if total <= max_tokens:
        return text
    size = len(text)
    # The marker with its numbers at their widest: what it can cost at most.
    widest = _marker(total, size, size, size, handle, read_tool)
    room = max_tokens - counter.count(f"\n{widest}\n")
    while room > 0:
        head = truncate_text(counter, text, room - room // 2, marker="")
        tail = _tail(counter, text, room // 2, len(head))
        start, end = len(head), size - len(tail)
        left = counter.count(text[start:end])
        out = f"{head}\n{_marker(left, start, end, size, handle, read_tool)}\n{tail}"
        over = counter.count(out) - max_tokens
        if over <= 0:
            return out
        room -= over
    return ""


def _billed(counter: TokenCounter, messages: Sequence[Message]) -> int:
    return counter.count_messages(messages) - TOKENS_REPLY_PRIMING


def _level(sizes: Sequence[int], room: int) -> int:
    """The largest level L with ``sum(min(s, L) for s in sizes) <= room`` (water-filling:
    texts below L stay whole, the others are cut to L)."""
    rest = sorted(sizes)
    for i, s in enumerate(rest):
        share = room // (len(rest) - i)
        if s > share:
            return share
        room -= s
    return rest[-1] if rest else 0


def fit_unit(
    texts: Mapping[str, str],
    frame: Callable[[Mapping[str, str]], Sequence[Message]],
    max_tokens: int,
    *,
    counter: TokenCounter,
    read_tool: str | None = None,
) -> tuple[tuple[Message, ...], tuple[Excerpt, ...]]:
    """A unit of messages within `max_tokens` (billed inside a conversation), and what of it
    is shown as excerpts.

    `texts` are the unit's texts that may be cut, by handle; `frame` builds the unit's
    messages from them (cut or whole). When the whole unit takes more than `max_tokens`,
    the longest texts are cut to a common level (`excerpt`), the shorter ones kept whole,
    and the level lowered until the unit fits or the texts are at `MIN_EXCERPT_TOKENS`:
    the caller checks what the unit costs (a unit whose other parts alone are too large
    does not fit).
    """
    whole = tuple(frame(texts))
    cost = _billed(counter, whole)
    if cost <= max_tokens or not texts:
        return whole, ()
    sizes = {h: counter.count(t) for h, t in texts.items()}
    room = max_tokens - (cost - sum(sizes.values()))  # what the texts may take together
    level = max(MIN_EXCERPT_TOKENS, _level(list(sizes.values()), room))
    while True:
        cuts = [h for h in texts if sizes[h] > level]
        cut = dict(texts)
        for h in cuts:
            cut[h] = excerpt(counter, texts[h], level, handle=h, read_tool=read_tool)
        unit = tuple(frame(cut))
        over = _billed(counter, unit) - max_tokens
        if over <= 0 or level <= MIN_EXCERPT_TOKENS or not cuts:
            notes = tuple(
                Excerpt(handle=h, tokens=sizes[h], shown=counter.count(cut[h])) for h in cuts
            )
            return unit, notes
        level = max(MIN_EXCERPT_TOKENS, level - math.ceil(over / len(cuts)))


def note_excerpts(report: ContextReport, blocks: Sequence[ContextBlock]) -> ContextReport:
    """`report` with each kept block that shows excerpts (``metadata["excerpts"]``, as
    `Excerpt.to_dict` gives them) marked ``truncated``, its reason saying what was left out
    and under which handle."""
    cut: dict[tuple[str, str], str] = {}
    for block in blocks:
        notes = block.metadata.get("excerpts")
        if notes:
            parts = [
                f"`{n['handle']}` shown as an excerpt of {n['shown']:,} of its {n['tokens']:,} "
                "tokens"
                for n in notes
            ]
            cut[(block.source, block.id)] = (
                "; ".join(parts) + " (the whole text is stored and can be read by its handle)"
            )
    if not cut:
        return report

    def marked(b: BlockReport) -> BlockReport:
        reason = cut.get((b.source, b.id))
        if reason is None or b.status not in ("kept", "truncated"):
            return b
        return replace(b, status="truncated", reason=reason)

    return replace(report, blocks=tuple(marked(b) for b in report.blocks))

"""What the web inspector shows, computed from saved windows (`loomctx.session.windows`):
a session's timeline rows, the diff of a window against the previous call, text search over
the messages sent, and billed cost under a provider's cache (`loomctx.context.billing`, the
one cost model): each call's predicted cached, written and plain tokens beside what the
provider reported, and whether its cache missed unexpectedly. Pure functions over store
reads; the HTML is `loomctx.server._inspect_html`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from loomctx.context.billing import (
    ANTHROPIC,
    PROVIDERS,
    CachePrediction,
    CachePricing,
    ReportedUsage,
    unexpected_miss,
)
from loomctx.context.report import ContextReport
from loomctx.errors import ConfigError
from loomctx.messages import Message
from loomctx.session.windows import (
    MESSAGE_KIND,
    SavedWindow,
    WindowLog,
    report_from_payload,
    usage_of,
)
from loomctx.stores.base import Record, Scan

__all__ = [
    "Pricing",
    "Row",
    "WindowDiff",
    "diff_windows",
    "search_text",
    "timeline",
]

MAX_SEARCH: Final = 200  # calls listed per search; the rest are counted


@dataclass(frozen=True, slots=True, kw_only=True)
class Pricing:
    """How the inspector bills calls: a provider's cache (`cache`, a `CachePricing` of
    `loomctx.context.billing`) and, optionally, the model's price of a million input tokens
    (`usd_per_mtok`), to show dollars."""

    cache: CachePricing = ANTHROPIC
    usd_per_mtok: float | None = None

    @property
    def name(self) -> str:
        """The cache's name (``anthropic``, ``openai``, ...)."""
        return self.cache.name

    @classmethod
    def named(cls, name: str, *, usd_per_mtok: float | None = None) -> Pricing:
        """The pricing of a cache in `loomctx.context.billing.PROVIDERS`."""
        if name not in PROVIDERS:
            known = ", ".join(sorted(PROVIDERS))
            raise ConfigError(f"unknown pricing {name!r}; use one of: {known}")
        if usd_per_mtok is not None and usd_per_mtok < 0:
            raise ConfigError(f"a price per million tokens cannot be negative: {usd_per_mtok}")
        return cls(cache=PROVIDERS[name], usd_per_mtok=usd_per_mtok)

    def billed(self, cached_tokens: int, new_tokens: int) -> float:
        """Input tokens billed, as plain input tokens, for a prompt marked as a client marks
        it (one breakpoint at its end: what is new is written)."""
        return self.cache.billed_marked_at_end(
            prompt=cached_tokens + new_tokens, cached=cached_tokens
        )

    def predict(
        self, report: ContextReport, previous_marks: tuple[int, ...] = ()
    ) -> CachePrediction:
        """A window's predicted split under this cache: the report's own prediction when it
        was made for this cache, else made again from its facts (`previous_marks`: the
        previous call's sizes at its breakpoints; a report without marks is taken as marked
        at its end)."""
        if report.pricing == self.cache.name:
            return CachePrediction(
                cached=report.predicted_cached,
                written=report.predicted_written,
                plain=report.predicted_plain,
            )
        return self.cache.predict(
            tokens=report.token_count,
            reused=report.reused_prefix_tokens,
            marks=report.cache_marks or (report.token_count,),
            previous_marks=previous_marks,
            cold=report.cache_cold,
        )

    def label(self, billed: float) -> str:
        """`billed` in words: tokens, and dollars when a price is set."""
        text = f"{billed:,.0f} billed tok"
        if self.usd_per_mtok is not None:
            text += f" · ${billed * self.usd_per_mtok / 1e6:,.4f}"
        return text


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One model call of a session's timeline: its report, the cache's predicted split of
    its prompt and the bill, and what the provider reported (`reported`, None if not known;
    `missed`: the cache missed unexpectedly, `unexpected_miss`)."""

    turn: int
    call: int
    prompt: str
    model: str
    saved_at: str
    report: Any  # ContextReport
    billed: float
    seq: int = 0
    predicted: CachePrediction | None = None
    reported: ReportedUsage | None = None

    @property
    def label(self) -> str:
        """``turn.call``."""
        return f"{self.turn}.{self.call}"

    @property
    def missed(self) -> bool:
        """Whether the provider read under half of what was predicted cached."""
        cached = self.predicted.cached if self.predicted is not None else 0
        return unexpected_miss(cached, self.reported)


def timeline(log: WindowLog, session: str, pricing: Pricing, *, after_seq: int = 0) -> list[Row]:
    """Every saved call of `session`, in order, with its report, its predicted split and
    billed cost under `pricing`, and the usage the provider reported (only those saved after
    the store's write `after_seq`, if given)."""
    rows = []
    previous: tuple[int, ...] = ()
    for r in log.records(session, after_seq=after_seq):
        report = report_from_payload(r.data["report"])
        predicted = pricing.predict(report, previous)
        previous = report.cache_marks or (report.token_count,)
        rows.append(
            Row(
                turn=int(r.data["turn"]),
                call=int(r.data["call"]),
                prompt=str(r.data.get("prompt", "")),
                model=str(r.data.get("model", "")),
                saved_at=str(r.data.get("saved_at", "")),
                report=report,
                billed=pricing.cache.bill(predicted),
                seq=r.seq,
                predicted=predicted,
                reported=usage_of(r.data),
            )
        )
    return rows


# --- the diff against the previous call -----------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowDiff:
    """What changed from the previous call's window to this one.

    `same_messages`: how many leading messages are identical (the provider's cache can read
    them); `first_change` names the first message that differs (None: the previous window
    is a prefix of this one); `tools_changed`: the tool schemas differ (that breaks the cache
    from the start); `added` / `removed`: kept blocks, by id, new in this window or gone
    from it; `status_changed`: (block id, before, after) for blocks offered both times whose
    fate changed; `compacted`: this build compacted history."""

    previous: str
    same_messages: int
    first_change: str | None
    tools_changed: bool
    added: tuple[str, ...]
    removed: tuple[str, ...]
    status_changed: tuple[tuple[str, str, str], ...]
    compacted: bool

    @property
    def cause(self) -> str:
        """Why the cache broke, or that it did not, in one sentence."""
        if self.tools_changed:
            return "the tool schemas changed, so nothing of the previous prompt is cached"
        if self.first_change is None:
            return "the previous window is a prefix of this one: all of it can be cached"
        why = "history was compacted" if self.compacted else "the dynamic tail moved"
        return (
            f"the prompt differs from message {self.same_messages + 1} on "
            f"({self.first_change}); {why}"
        )


def _describe(m: Message) -> str:
    text = m.content.strip().replace("\n", " ")
    what = f"{m.role}: {text[:60]!r}" if text else m.role
    if m.tool_calls:
        what += " calling " + ", ".join(c.name for c in m.tool_calls)
    return what


def _kept(window: SavedWindow) -> dict[str, str]:
    return {b.id: b.status for b in window.report.blocks}


def diff_windows(previous: SavedWindow, current: SavedWindow) -> WindowDiff:
    """What changed between two windows of a session (see `WindowDiff`)."""
    same = 0
    for a, b in zip(previous.messages, current.messages, strict=False):
        if a != b:
            break
        same += 1
    first_change = None
    if same < len(previous.messages):
        first_change = _describe(current.messages[same]) if same < len(current.messages) else ""
        first_change = first_change or "the window ends there"
    before, after = _kept(previous), _kept(current)
    in_before = {k for k, s in before.items() if s in ("kept", "truncated")}
    in_after = {k for k, s in after.items() if s in ("kept", "truncated")}
    changed = tuple(
        (k, before[k], after[k])
        for k in sorted(before.keys() & after.keys())
        if before[k] != after[k]
    )
    return WindowDiff(
        previous=f"{previous.turn}.{previous.call}",
        same_messages=same,
        first_change=first_change,
        tools_changed=list(previous.tools) != list(current.tools),
        added=tuple(sorted(in_after - in_before)),
        removed=tuple(sorted(in_before - in_after)),
        status_changed=changed,
        compacted=any(n.action == "compacted" for n in current.report.compactions),
    )


# --- search ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionHits:
    """Where a text was in one session: the calls whose window contained it (`present`, as
    (turn, call, role of the first message holding it)), every call in order (`calls`), and
    the calls after which it was no longer in the window (`left`: (turn, call) of the first
    call without it, after one with it, and why in words: the build's compaction, or what it
    left out)."""

    session: str
    calls: tuple[tuple[int, int], ...]
    present: tuple[tuple[int, int, str], ...]
    left: tuple[tuple[int, int, str], ...]


def _messages_of(log: WindowLog, session: str) -> dict[str, Mapping[str, Any]]:
    scan = Scan(prefix=log.namespace(session), kind=MESSAGE_KIND, exact=True)
    found: list[Record] = log.store.batch([scan])[0]
    return {r.key: r.data for r in found}


def _text(data: Mapping[str, Any]) -> str:
    calls = " ".join(f"{c.get('name')} {c.get('arguments')}" for c in data.get("tool_calls", ()))
    return f"{data.get('content', '')} {calls}"


def _why_left(report: Mapping[str, Any]) -> str:
    compacted = [c for c in report.get("compactions", ()) if c.get("action") == "compacted"]
    if compacted:
        c = compacted[0]
        return (
            f"history compacted, {c.get('tokens_before', 0):,} to "
            f"{c.get('tokens_after', 0):,} tokens: {c.get('reason', '')}"
        )
    out = [b for b in report.get("blocks", ()) if b.get("status") != "kept"]
    if out:
        return f"{len(out)} block(s) left out or cut, e.g. {out[0].get('reason', '')}"
    return "the turn's retrieval did not bring it back"


def search_text(log: WindowLog, query: str, sessions: Sequence[str]) -> list[SessionHits]:
    """In which calls of `sessions` a window contained `query` (case-insensitive), and
    when it left the window. Reads each session's messages once."""
    needle = query.strip().casefold()
    if not needle:
        raise ConfigError("search for what? give some text (`q`)")
    out = []
    for session in sessions:
        messages = _messages_of(log, session)
        holds = {k: needle in _text(d).casefold() for k, d in messages.items()}
        calls: list[tuple[int, int]] = []
        present: list[tuple[int, int, str]] = []
        left: list[tuple[int, int, str]] = []
        was = False
        for r in log.records(session):
            turn, call = int(r.data["turn"]), int(r.data["call"])
            calls.append((turn, call))
            where = next((k for k in r.data["messages"] if holds.get(k)), None)
            if where is not None:
                present.append((turn, call, str(messages[where].get("role", ""))))
            elif was:
                left.append((turn, call, _why_left(r.data["report"])))
            was = where is not None
        if present:
            out.append(
                SessionHits(
                    session=session, calls=tuple(calls), present=tuple(present), left=tuple(left)
                )
            )
    return out

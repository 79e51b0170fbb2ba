"""`ContextReport`: what went into a window, what did not, and why.

It is the payload of the CONTEXT_ASSEMBLED event, what `loomctx inspect` draws, and what a user
reads when asking "why did the model not see X?". `to_dict()` gives plain JSON types with
stable field names; `from_dict()` reads them back.

The words, per source, and how they relate:

- `allocated`: the source's share of the input budget for this build (after framing);
- `offered`: the tokens of the blocks the source offered (before selection);
- `used`: the tokens of the window that the source holds.

`used` may exceed `offered` only by `summary_tokens`: a history source holds the frozen
summary of what was compacted in earlier builds, which it did not offer this time. `used` may
exceed `allocated` when budget that other sources left unused flowed to it (no tokens are
stranded), when history outgrew its share a little and was left whole so that the cached
prefix survives (a "deferred" compaction), or for pinned content; `note` says which, in words.

`unembedded` is how many records a searching source (`UnifiedRetrievalSource`,
`L4SemanticSource`) could find by their words only, because the background embedder had not
given them a vector yet (after a bulk import, or when a store made with another embedding
model is reopened): search was partly, or wholly, lexical. `note` says so too. With an
embedding cascade (a fast embedder, `MemoryEmbedding`), records with the fast model's vector
are not counted; `note` says how many lack the main model's vector still, and names both
models.
(Reports saved before this field was named `offered` call it `requested`; `from_dict` reads
both.)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal, overload

__all__ = [
    "BlockReport",
    "BlockRow",
    "BlockStatus",
    "Blocks",
    "CompactionNote",
    "ContextReport",
    "SourceReport",
    "SourceStatus",
    "source_fields",
]

BlockStatus = Literal["kept", "truncated", "summarized", "dropped"]
SourceStatus = Literal["ok", "error", "timeout"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockReport:
    """One offered block: its size offered, tokens used in the window, and what happened."""

    id: str
    source: str
    section: str
    offered_tokens: int
    used_tokens: int
    status: BlockStatus
    reason: str = ""


BlockRow = tuple[str, str, str, int, int, BlockStatus, str]
"""A `BlockReport`'s fields in their order: id, source, section, offered and used tokens,
status, reason."""


class Blocks(Sequence[BlockReport]):
    """A report's blocks, as a tuple of `BlockReport`s made when they are first read.

    A build offers hundreds of blocks and most builds' reports are never read block by block
    (a `ContextOrchestrator.build` whose caller takes the messages), so the orchestrator hands
    the report each block's fields as a plain row, which costs a fraction of a frozen value,
    and the values are made from the rows on first use. `to_dict` reads the rows directly.
    It equals (and hashes as) the tuple of its blocks, so a report compares as it did."""

    __slots__ = ("_made", "_rows")

    def __init__(self, rows: Iterable[BlockRow]) -> None:
        self._rows: tuple[BlockRow, ...] = tuple(rows)
        self._made: tuple[BlockReport, ...] | None = None

    def _blocks(self) -> tuple[BlockReport, ...]:
        made = self._made
        if made is None:  # two threads may both make them: the same values, either kept
            made = self._made = tuple(
                BlockReport(
                    id=i,
                    source=src,
                    section=sec,
                    offered_tokens=o,
                    used_tokens=u,
                    status=st,
                    reason=r,
                )
                for i, src, sec, o, u, st, r in self._rows
            )
        return made

    def dicts(self) -> list[dict[str, Any]]:
        """Each block's fields by name (what `ContextReport.to_dict` writes), from the rows."""
        return [dict(zip(_BLOCK_FIELDS, row, strict=True)) for row in self._rows]

    def statuses(self) -> list[BlockStatus]:
        """Each block's status, in order, from the rows."""
        return [row[5] for row in self._rows]

    @overload
    def __getitem__(self, index: int) -> BlockReport: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[BlockReport, ...]: ...
    def __getitem__(self, index: int | slice) -> BlockReport | tuple[BlockReport, ...]:
        return self._blocks()[index]

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[BlockReport]:
        return iter(self._blocks())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Blocks):
            return self._rows == other._rows
        if isinstance(other, tuple):
            return self._blocks() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._blocks())

    def __repr__(self) -> str:
        return repr(self._blocks())

    def __reduce__(self) -> tuple[Any, ...]:  # copies and pickles are plain tuples
        return (tuple, (self._blocks(),))


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceReport:
    """One source: its allocation, what it offered, and what it got (`used`); see the module
    docstring for how they relate, `note` for why `used` is above either."""

    name: str
    priority: float
    allocated: int
    offered: int
    used: int
    blocks_offered: int
    blocks_kept: int
    status: SourceStatus = "ok"
    error: str | None = None
    elapsed_ms: float = 0.0
    summary_tokens: int = 0
    note: str = ""
    unembedded: int = 0

    @property
    def requested(self) -> int:
        """The earlier name of `offered`."""
        return self.offered


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionNote:
    """History that was compacted in a build (`action` "compacted"), or that outgrew its
    room a little and was left whole ("deferred"), with why and its size before and after."""

    source: str
    action: Literal["compacted", "deferred"]
    reason: str
    tokens_before: int
    tokens_after: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextReport:
    """The account of one build.

    `window` is the model's context window, `output_reserve` what is kept for the reply,
    `available` what the input may use, `token_count` what the window's messages and tools
    count as the provider bills them, `overhead_tokens` the part of it spent on framing
    (message wrappers, section preambles, tool-list boilerplate), and `utilization` the share
    of `available` used.

    `reused_prefix_tokens` is how many of `token_count` repeat, in place, the previous window
    built for the same session (tools, then messages): what a provider's prompt cache can
    read instead of processing anew (0 for a session's first window); `new_tokens` the rest.
    `compactions` notes the history compacted in this build (or a compaction deferred).

    The prediction of the bill (`loomctx.context.billing`, under the cache named `pricing`;
    "" in reports saved before predictions were made): `predicted_cached` tokens read from
    the provider's cache, `predicted_written` written to it (up to the last breakpoint), and
    `predicted_plain` the rest; `cache_cold` when the session was idle longer than the
    cache's lifetime, so nothing is read; `cache_marks` the prompt's sizes up to each cache
    breakpoint (what lets the same window be priced under another provider).
    """

    window: int
    output_reserve: int
    available: int
    token_count: int
    overhead_tokens: int
    token_counter: str
    sources: tuple[SourceReport, ...]
    blocks: Sequence[BlockReport]
    reused_prefix_tokens: int = 0
    compactions: tuple[CompactionNote, ...] = ()
    pricing: str = ""
    predicted_cached: int = 0
    predicted_written: int = 0
    cache_cold: bool = False
    cache_marks: tuple[int, ...] = ()

    @property
    def new_tokens(self) -> int:
        """Tokens of the window that do not repeat the previous window's prefix."""
        return self.token_count - self.reused_prefix_tokens

    @property
    def predicted_plain(self) -> int:
        """Tokens predicted to be billed at the plain input price (after the last
        breakpoint, or not cached): the window less `predicted_cached` and
        `predicted_written`."""
        return self.token_count - self.predicted_cached - self.predicted_written

    @property
    def utilization(self) -> float:
        """Share of the available input budget the window uses (0..1)."""
        return self.token_count / self.available if self.available else 0.0

    @property
    def dropped(self) -> tuple[BlockReport, ...]:
        """Blocks that were offered but are not in the window (summarized ones included)."""
        return tuple(b for b in self.blocks if b.status in ("dropped", "summarized"))

    def summary(self) -> dict[str, Any]:
        """The short form carried by events: totals, counts and overflow."""
        offered = sum(s.offered for s in self.sources)
        blocks = self.blocks
        statuses = blocks.statuses() if isinstance(blocks, Blocks) else [b.status for b in blocks]
        return {
            "total_tokens": self.token_count,
            "available": self.available,
            "utilization": round(self.utilization, 4),
            "components": sum(1 for s in statuses if s in ("kept", "truncated")),
            "dropped": sum(1 for s in statuses if s in ("dropped", "summarized")),
            "overflow": max(0, offered - self.available),
            "failed_sources": [s.name for s in self.sources if s.status != "ok"],
            "reused_prefix_tokens": self.reused_prefix_tokens,
            "compacted": any(n.action == "compacted" for n in self.compactions),
            "unembedded": max((s.unembedded for s in self.sources), default=0),
            "predicted_cached": self.predicted_cached,
            "predicted_written": self.predicted_written,
        }

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types (lists, not tuples), stable field names. Built by hand: an agent
        event carries one per model call, and `dataclasses.asdict` deep-copies (10x slower)."""
        out: dict[str, Any] = {name: getattr(self, name) for name in _REPORT_FIELDS}
        out["sources"] = [{n: getattr(s, n) for n in _SOURCE_FIELDS} for s in self.sources]
        blocks = self.blocks
        out["blocks"] = (
            blocks.dicts()
            if isinstance(blocks, Blocks)
            else [{n: getattr(b, n) for n in _BLOCK_FIELDS} for b in blocks]
        )
        out["compactions"] = [{n: getattr(c, n) for n in _NOTE_FIELDS} for c in self.compactions]
        out["cache_marks"] = list(self.cache_marks)
        out["utilization"] = round(self.utilization, 4)
        out["new_tokens"] = self.new_tokens
        out["predicted_plain"] = self.predicted_plain
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ContextReport:
        """The inverse of `to_dict` (for reports saved as JSON)."""
        values = {k: v for k, v in data.items() if k not in _DERIVED}
        values["cache_marks"] = tuple(data.get("cache_marks", ()))
        values["compactions"] = tuple(CompactionNote(**c) for c in data.get("compactions", ()))
        values["sources"] = tuple(SourceReport(**source_fields(s)) for s in data["sources"])
        values["blocks"] = tuple(BlockReport(**b) for b in data["blocks"])
        return cls(**values)


def source_fields(data: dict[str, Any]) -> dict[str, Any]:
    """A source's saved fields, with the earlier name `requested` read as `offered`."""
    if "requested" in data and "offered" not in data:
        data = {k: v for k, v in data.items() if k != "requested"} | {"offered": data["requested"]}
    return data


_DERIVED = frozenset({"utilization", "new_tokens", "predicted_plain"})
_BLOCK_FIELDS = tuple(f.name for f in fields(BlockReport))
_SOURCE_FIELDS = tuple(f.name for f in fields(SourceReport))
_NOTE_FIELDS = tuple(f.name for f in fields(CompactionNote))
_REPORT_FIELDS = tuple(
    f.name for f in fields(ContextReport) if f.name not in ("sources", "blocks", "compactions")
)

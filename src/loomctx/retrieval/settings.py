"""`RetrievalSettings`: every tuned constant of the retrieval path, in one place.

Loom's retrieval was tuned by hand on the LoCoMo dev conversations: the fusion of
lexical and dense scores, the neighbours' weight, the time decay, when to rewrite a query and
with how many words, how many candidates a grant asks for, and the reranker's signal weights.
They are the fields below, with those values as defaults, so that one object says what a run
used and ``loomctx bench locomo --cv`` can vary them and choose them honestly (tuned on four
conversations, reported on the fifth). Constants added since (`answer_weight`,
`speaker_weight`, `whole_below`, `pool_depth`) were chosen that way.

    settings = RetrievalSettings(neighbour_weight=0.2)
    memory = LoomMemory("agent", ranking=settings.memory_ranking())
    source = UnifiedRetrievalSource(memory, settings=settings)

The memory-side fields (`fusion_weights`, `fast_weight`, `neighbour_weight`, `answer_weight`,
`time_decay`, `date_weight`) are `LoomMemory`'s `MemoryRanking`; the others are read by
`UnifiedRetrievalSource` (its rewriter and reranker).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from loomctx.errors import ConfigError, check_int
from loomctx.memory.settings import MemoryRanking
from loomctx.retrieval.reranker import Reranker
from loomctx.retrieval.rewriter import QueryRewriter
from loomctx.retrieval.signals import (
    ContentLengthSignal,
    OriginDiversitySignal,
    QueryOverlapSignal,
    RelevanceSignal,
    RoleSignal,
    SessionSignal,
    SpeakerSignal,
    TimeSignal,
)

__all__ = ["RetrievalSettings"]

_INTS = ("recall_limit", "pool_depth", "rewrite_max_terms", "rewrite_window", "rewrite_top_k",
         "tokens_per_candidate", "length_low", "length_high", "hop_from",
         "hop_terms", "session_top")  # fmt: skip
_UNITS = ("neighbour_weight", "answer_weight", "time_decay", "hop_weight", "fast_weight",
          "date_weight", "session_spread")  # fmt: skip
_WEIGHTS = ("vector_weight", "overlap_weight", "diversity_weight", "length_weight",
            "speaker_weight", "time_weight", "role_weight", "session_weight")  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class RetrievalSettings:
    """The tuned constants of recall, rewriting, reranking and filling a grant.

    Memory search (`LoomMemory.search`): `fusion_weights` (lexical, dense), `fast_weight` (the
    fast embedder's dense ranking, beside them: `MemoryEmbedding(fast_embedder=...)`),
    `neighbour_weight` (what a turn gains from the scores of the turns just before and after
    it), `answer_weight`
    (what a message gains from the one just before it when that one asks a question),
    `time_decay` (what a task far from a time the query names loses), `date_weight` (how far
    a turn that names a time, "yesterday", rises above the others when the query asks when).
    Rewriting (`QueryRewriter`): queries of at most `rewrite_max_terms` distinct content terms
    also recall with the `rewrite_top_k` most frequent words of the last `rewrite_window`
    messages. Recall: `recall_limit` candidates per source; with `fill`, one more per
    `tokens_per_candidate` tokens of twice the grant; memory's lexical and dense searches
    each bring `pool_depth` times as many hits to be fused (`LoomMemory.search`'s `pool`; 8,
    where search alone takes 3: an answer whose own words rank it deep is lifted by its
    question and neighbours only if the pool holds it; chosen by leave-one-conversation-out,
    8 over 3 and 5 on every fold).
    Reranking (`Reranker`): the weights of the eight signals (`time_weight`: how close to
    a time the query names; `role_weight`: the user's own words for a question in the first
    person; `session_weight`: how well the piece's session as a whole matches the query, by
    the relevance of its `session_top` best pieces), the span of characters
    (`length_low`..`length_high`) `ContentLengthSignal` scores 1,
    and `session_spread` (off at 0: `loomctx.retrieval.reranker.spread_sessions`,
    a session's later pieces held back behind other sessions' best; it measured worse on
    both benchmarks, docs/benchmarks.md).
    Packing (`RetrievalInjector`): a candidate of fewer than `whole_below` tokens (64) goes
    into the window whole or not at all (0: every candidate may be cut at a sentence end to
    fill the room left): a turn cut to its first half rarely still holds what it was recalled
    for, and the room it would fill may hold the next candidate whole. Chosen by
    cross-validation for 4 of the 5 LoCoMo dev conversations (docs/benchmarks.md).
    Second hop (`loomctx.retrieval.hop`): with `hop_weight` above 0, the `hop_terms` names and
    years the best `hop_from` candidates mention are recalled with the query again, and each
    candidate's relevance gains `hop_weight` times its relevance in that recall (off by
    default: not adopted until it measures better cross-validated).
    """

    fusion_weights: tuple[float, float] = (0.5, 0.5)
    fast_weight: float = 0.2
    neighbour_weight: float = 0.3
    answer_weight: float = 0.35
    time_decay: float = 0.5
    date_weight: float = 0.5
    recall_limit: int = 20
    pool_depth: int = 8
    rewrite_max_terms: int = 4
    rewrite_window: int = 5
    rewrite_top_k: int = 6
    tokens_per_candidate: int = 32
    vector_weight: float = 0.40
    overlap_weight: float = 0.35
    diversity_weight: float = 0.15
    length_weight: float = 0.10
    speaker_weight: float = 0.10
    time_weight: float = 0.10
    role_weight: float = 0.05
    session_weight: float = 0.10
    session_top: int = 3
    length_low: int = 200
    length_high: int = 800
    whole_below: int = 64
    hop_weight: float = 0.0
    hop_from: int = 3
    hop_terms: int = 4
    session_spread: float = 0.0

    def __post_init__(self) -> None:
        check_int(self.whole_below, "RetrievalSettings: `whole_below`", minimum=0)
        for name in _INTS:
            value = getattr(self, name)
            check_int(value, f"RetrievalSettings: `{name}`", minimum=1)
        if self.length_low > self.length_high:
            raise ConfigError(
                f"RetrievalSettings: need `length_low` <= `length_high`, got "
                f"{self.length_low!r} > {self.length_high!r}"
            )
        for name in _UNITS + _WEIGHTS:
            value = getattr(self, name)
            if not _number(value) or value < 0 or (name in _UNITS and value > 1):
                bound = "in 0..1" if name in _UNITS else ">= 0"
                raise ConfigError(f"RetrievalSettings: `{name}` must be a number {bound}, got "
                                  f"{value!r}")  # fmt: skip
        if sum(getattr(self, n) for n in _WEIGHTS) <= 0:
            raise ConfigError("RetrievalSettings: at least one signal weight must be above 0")
        fw = self.fusion_weights
        if (
            not isinstance(fw, tuple)
            or len(fw) != 2
            or not all(_number(w) and w >= 0 for w in fw)
            or max(fw) <= 0
        ):
            raise ConfigError(
                "RetrievalSettings: `fusion_weights` must be a (lexical, dense) tuple of "
                f"numbers >= 0, not both 0; got {fw!r}"
            )

    @classmethod
    def parse(cls, assignments: Sequence[str]) -> RetrievalSettings:
        """Settings from ``name=value`` strings (``neighbour_weight=0.2``, ``fusion_weights=
        0.4,0.6``), the defaults for the rest; `ConfigError` names a bad name or value."""
        names = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        for item in assignments:
            name, sep, text = item.partition("=")
            name = name.strip()
            if not sep or name not in names:
                raise ConfigError(
                    f"RetrievalSettings: expected name=value with a name among {sorted(names)}, "
                    f"got {item!r}"
                )
            try:
                numbers = [float(x) for x in text.split(",")]
            except ValueError:
                raise ConfigError(
                    f"RetrievalSettings: `{name}` takes a number, got {text!r}"
                ) from None
            if name == "fusion_weights":
                values[name] = tuple(numbers)
            elif len(numbers) != 1:
                raise ConfigError(f"RetrievalSettings: `{name}` takes one number, got {text!r}")
            elif name in (*_INTS, "whole_below"):
                values[name] = int(numbers[0]) if numbers[0].is_integer() else numbers[0]
            else:
                values[name] = numbers[0]
        return cls(**values)

    def memory_ranking(self) -> MemoryRanking:
        """The memory-side fields as `LoomMemory`'s ``ranking``."""
        return MemoryRanking(
            fusion_weights=self.fusion_weights,
            fast_weight=self.fast_weight,
            neighbour_weight=self.neighbour_weight,
            answer_weight=self.answer_weight,
            time_decay=self.time_decay,
            date_weight=self.date_weight,
        )

    def rewriter(self) -> QueryRewriter:
        """A `QueryRewriter` with `rewrite_window` and `rewrite_top_k`."""
        return QueryRewriter(window=self.rewrite_window, top_k=self.rewrite_top_k)

    def reranker(self) -> Reranker:
        """A `Reranker` with the default eight signals at these weights, spreading its order
        over sessions by `session_spread`."""
        return Reranker(
            [
                RelevanceSignal(self.vector_weight),
                QueryOverlapSignal(self.overlap_weight),
                OriginDiversitySignal(self.diversity_weight),
                ContentLengthSignal(self.length_weight, low=self.length_low, high=self.length_high),
                SpeakerSignal(self.speaker_weight),
                TimeSignal(self.time_weight),
                RoleSignal(self.role_weight),
                SessionSignal(self.session_weight, top=self.session_top),
            ],
            session_spread=self.session_spread,
        )

    def changed(self) -> dict[str, Any]:
        """The fields that differ from the defaults, by name (``{}`` for the defaults)."""
        base = RetrievalSettings()
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if getattr(self, f.name) != getattr(base, f.name)
        }

    def label(self) -> str:
        """``"defaults"`` or ``"neighbour_weight=0.2, ..."``: the changed fields, for a table."""
        changed = self.changed()
        return ", ".join(f"{k}={v}" for k, v in changed.items()) or "defaults"


def _number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)

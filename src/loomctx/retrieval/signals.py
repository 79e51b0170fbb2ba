"""The reranker's signals (seed 002): each scores a candidate from 0 to 1.

- `VectorScoreSignal` (0.40): the recall score ("vector/relevance score" in seed 002): the
  fused relevance of the recall (which includes the cosine similarity when there is one),
  relative to the best candidate's.
- `QueryOverlapSignal` (0.35): the share of the query's terms found in the candidate, each
  term weighted by its rarity among the candidates.
- `OriginDiversitySignal` (0.15): 0.3 if the candidate's origin holds more than 70% of the
  candidates, 0.6 if more than 50%, else 1 (computed over the actual candidate set).
- `ContentLengthSignal` (0.10): 1 for 200-800 characters, less for shorter or longer.
- `SpeakerSignal` (0.10): 0 for a message said by someone other than the person a query
  names, else 1 (a query naming no speaker: 1 for all, which changes no order).

A signal is anything with a `name`, a `weight` and `score(candidate, query)`; `prepare` sees the
whole candidate set first (diversity needs it). Write your own and pass it to `Reranker`.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from loomctx.errors import ConfigError
from loomctx.retrieval.candidates import Candidate
from loomctx.text import terms

__all__ = [
    "ContentLengthSignal",
    "OriginDiversitySignal",
    "QueryOverlapSignal",
    "Signal",
    "SpeakerSignal",
    "VectorScoreSignal",
    "default_signals",
]


@runtime_checkable
class Signal(Protocol):
    """One reason to rank a candidate higher, scored 0..1, weighted in the final score."""

    name: str
    weight: float

    def prepare(self, query: str, candidates: Sequence[Candidate]) -> None:
        """Called once per rerank, before `score`, with every candidate."""
        ...

    def score(self, candidate: Candidate) -> float:
        """0..1 for `candidate` (after `prepare`)."""
        ...


def is_weight(value: object) -> bool:
    """A finite number >= 0 (not a bool)."""
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and value >= 0
    )


class _Signal:
    name = "signal"

    def __init__(self, weight: float) -> None:
        if not is_weight(weight):
            raise ConfigError(
                f"signal `{self.name}`: `weight` must be a number >= 0, got {weight!r}"
            )
        self.weight = float(weight)

    def prepare(self, query: str, candidates: Sequence[Candidate]) -> None:
        """Nothing to prepare."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(weight={self.weight})"


class VectorScoreSignal(_Signal):
    """The recall-time relevance relative to the best candidate's (0..1). Seed 002 takes "the
    vector/relevance score from recall"; raw cosine alone would throw away the lexical
    evidence recall fused in (on LoCoMo it costs 5 points of R@10 against the recall order).

    Relative, because memory's relevance lives in a narrow band: its neighbour smoothing
    divides by ``1 + 2 * neighbour_weight``, so the best turn often scores about 0.5, while
    the other signals span 0..1. As it was, the signal weighed less than its 0.40 said.
    Measured side by side (``loomctx bench locomo``, e5): R@10 70.7 -> 71.9, R@5 62.8 -> 63.4,
    window@2000 76.0 -> 76.2; LongMemEval lexical recall_all@10 89.3 -> 91.1."""

    name = "vector_score"

    def __init__(self, weight: float = 0.40) -> None:
        super().__init__(weight)
        self._best = 1.0

    def prepare(self, query: str, candidates: Sequence[Candidate]) -> None:
        self._best = max((c.relevance for c in candidates), default=1.0)

    def score(self, candidate: Candidate) -> float:
        if self._best <= 0:
            return 0.0
        return min(1.0, max(0.0, candidate.relevance / self._best))


class QueryOverlapSignal(_Signal):
    """The share of the query's distinct terms (stemmed words, CJK bigrams) in the candidate,
    each term weighted by how rare it is among the candidates: ``ln(1 + (n + 1) / (df +
    0.5))``, `df` the candidates holding it, of `n`.

    Unweighted, "get" and "new" count as much as "fryer" and "gadget": in "what new kitchen
    gadget did I get before the Air Fryer?" a turn about getting a bike outranked the one
    about a new Instant Pot. Rarity is taken over the candidate set (as diversity is), as
    the reranker sees nothing else. Measured side by side: LoCoMo (e5) R@5 63.4 -> 64.3,
    R@10 71.9 -> 72.3, nDCG@10 55.4 -> 56.0, window@2000 76.2 -> 76.6; LongMemEval (first 20
    questions, e5) recall_all@5 0.90 -> 0.95; lexical (56) nDCG@10 90.9 -> 91.0."""

    name = "query_overlap"

    def __init__(self, weight: float = 0.35) -> None:
        super().__init__(weight)
        self._weights: dict[str, float] = {}
        self._total = 0.0

    def prepare(self, query: str, candidates: Sequence[Candidate]) -> None:
        wanted = frozenset(terms(query))
        n = len(candidates)
        df = Counter(t for c in candidates for t in wanted & c.terms)
        # In sorted order: a set's order changes with the process's string hashing, and the
        # sums below would differ in their last bits between processes.
        self._weights = {t: math.log(1 + (n + 1) / (df[t] + 0.5)) for t in sorted(wanted)}
        self._total = sum(self._weights.values())

    def score(self, candidate: Candidate) -> float:
        if not self._total:
            return 0.0
        # Over the query's few terms: `keys() & terms` walked all of a chunk's hundreds.
        have = candidate.terms
        return sum(w for t, w in self._weights.items() if t in have) / self._total


class OriginDiversitySignal(_Signal):
    """Keeps one origin from filling the window: candidates of an origin holding more than 70%
    of the set score 0.3, more than 50% score 0.6, the rest 1."""

    name = "origin_diversity"

    def __init__(self, weight: float = 0.15) -> None:
        super().__init__(weight)
        self._share: dict[str, float] = {}

    def prepare(self, query: str, candidates: Sequence[Candidate]) -> None:
        counts = Counter(c.origin for c in candidates)
        total = len(candidates)
        self._share = {origin: n / total for origin, n in counts.items()}

    def score(self, candidate: Candidate) -> float:
        share = self._share.get(candidate.origin, 0.0)
        return 0.3 if share > 0.7 else 0.6 if share > 0.5 else 1.0


class ContentLengthSignal(_Signal):
    """Moderate length first: 1 for `low`..`high` characters (200-800), falling linearly to
    0 at an empty text and as ``high / length`` above `high` (a 1,600-character chunk: 0.5)."""

    name = "content_length"

    def __init__(self, weight: float = 0.10, *, low: int = 200, high: int = 800) -> None:
        super().__init__(weight)
        if not 0 < low <= high:
            raise ConfigError(f"ContentLengthSignal: need 0 < low <= high, got {low!r}, {high!r}")
        self.low = low
        self.high = high

    def score(self, candidate: Candidate) -> float:
        n = len(candidate.text.strip())
        if n < self.low:
            return n / self.low
        return 1.0 if n <= self.high else self.high / n


class SpeakerSignal(_Signal):
    """Who said it: when the query names the speaker of some candidates ("What did Caroline
    research?"), a message said by another speaker scores 0, the rest 1 (those of a named
    speaker, and candidates without one: knowledge, tool calls). A query naming no speaker
    scores every candidate 1, which changes no order. A speaker is the ``speaker`` a message
    task was recorded with (`Task.parameters`), matched as a whole word, in any case.

    In a conversation between two people, a question about one of them matches the other's
    turns that address her by name ("Woah, Caroline, ...") as well as her own: on the LoCoMo
    dev questions that name one speaker, 82% of the gold turns are that speaker's, against
    63% of the top five retrieved. The weight, 0.10, was chosen by leave-one-conversation-out
    (docs/benchmarks.md): R@10 73.5 -> 74.6 and evidence in a 2,000-token window 79.4% ->
    80.4% held out, category 1 R@10 43.3 -> 46.9."""

    name = "speaker"

    def __init__(self, weight: float = 0.10) -> None:
        super().__init__(weight)
        self._named: frozenset[str] = frozenset()

    def prepare(self, query: str, candidates: Sequence[Candidate]) -> None:
        spoken = {s for c in candidates if (s := _speaker(c))}
        self._named = frozenset(
            s for s in spoken if re.search(rf"(?<!\w){re.escape(s)}(?!\w)", query, re.IGNORECASE)
        )

    def score(self, candidate: Candidate) -> float:
        if not self._named:
            return 1.0
        speaker = _speaker(candidate)
        return 1.0 if speaker is None or speaker in self._named else 0.0


def _speaker(candidate: Candidate) -> str | None:
    """The ``speaker`` of a message task, else None."""
    parameters = getattr(candidate.item, "parameters", None)
    speaker = parameters.get("speaker") if isinstance(parameters, Mapping) else None
    return (speaker.strip() or None) if isinstance(speaker, str) else None


def default_signals() -> list[Signal]:
    """Seed 002's four signals and `SpeakerSignal`, with their default weights."""
    return [
        VectorScoreSignal(),
        QueryOverlapSignal(),
        OriginDiversitySignal(),
        ContentLengthSignal(),
        SpeakerSignal(),
    ]

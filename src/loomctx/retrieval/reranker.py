"""`Reranker` (seed 002): dedupe, score with weighted signals, filter and sort.

1. Dedupe by content fingerprint: the same text recalled twice (from memory and a knowledge
   base, or as a task and its summary) is one candidate, the one with the higher vector score.
2. Score: ``final = sum(signal.score * signal.weight) / sum(signal.weight)``.
3. Filter (`min_score`) and sort, best first; ties keep recall order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from loomctx.errors import ConfigError, check_unit
from loomctx.retrieval.candidates import Candidate
from loomctx.retrieval.signals import Signal, default_signals, is_weight

__all__ = ["Reranker", "dedupe"]


def _dense(c: Candidate) -> float:
    """The vector score, below any real one when dense search did not find the candidate."""
    return -math.inf if c.vector_score is None else c.vector_score


def dedupe(candidates: Sequence[Candidate]) -> list[Candidate]:
    """One candidate per fingerprint, the one with the higher vector score (the first on a
    tie), in the order of first appearance."""
    kept: dict[str, Candidate] = {}
    for c in candidates:
        key = c.fingerprint
        seen = kept.get(key)
        if seen is None or _dense(c) > _dense(seen):
            kept[key] = c  # a replaced value keeps its key's place: first appearance
    return list(kept.values())


class Reranker:
    """The one reranker every retrieval source goes through.

    `signals` default to `default_signals()`; `weights` overrides weights by signal name
    (``{"query_overlap": 0.5}``); `min_score` drops candidates whose final score is lower.
    """

    def __init__(
        self,
        signals: Sequence[Signal] | None = None,
        *,
        weights: Mapping[str, float] | None = None,
        min_score: float = 0.0,
    ) -> None:
        self.signals = list(signals) if signals is not None else default_signals()
        names = [s.name for s in self.signals]
        if len(set(names)) != len(names):
            raise ConfigError(f"Reranker: two signals share a name in {names!r}")
        for name, weight in (weights or {}).items():
            if name not in names:
                raise ConfigError(f"Reranker: no signal named {name!r} to weigh; signals: {names}")
            if not is_weight(weight):
                raise ConfigError(f"Reranker: weight of {name!r} must be >= 0, got {weight!r}")
        self.weights = {s.name: float((weights or {}).get(s.name, s.weight)) for s in self.signals}
        if not self.signals or sum(self.weights.values()) <= 0:
            raise ConfigError("Reranker: needs at least one signal with a weight above 0")
        check_unit(min_score, "Reranker: `min_score`")
        self.min_score = min_score

    def rerank(self, query: str, candidates: Sequence[Candidate]) -> list[Candidate]:
        """Deduplicated candidates with `signals` and `score` set, best first."""
        unique = dedupe(candidates)
        if not unique:
            return []
        total = sum(self.weights.values())
        for signal in self.signals:
            signal.prepare(query, unique)
        for c in unique:
            c.signals = {s.name: s.score(c) for s in self.signals}
            c.score = sum(c.signals[n] * w for n, w in self.weights.items()) / total
        kept = [c for c in unique if c.score >= self.min_score]
        return sorted(kept, key=lambda c: -c.score)  # stable: ties keep recall order

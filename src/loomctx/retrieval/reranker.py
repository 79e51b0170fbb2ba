"""`Reranker` (seed 002): dedupe, score with weighted signals, filter and sort.

1. Dedupe by content fingerprint: the same text recalled twice (from memory and a knowledge
   base, or as a task and its summary) is one piece, the one with the higher vector score.
2. Score: each signal scores the whole pool (`Signal.score`, an array);
   ``final = sum(signal * weight) / sum(weight)``, summed signal by signal in their order.
3. Filter (`min_score`) and sort, best first; ties keep recall order. Each piece kept comes
   back as a new `Evidence` with its signals and its final ``score``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from loomctx.errors import ConfigError, check_unit
from loomctx.retrieval.evidence import Evidence
from loomctx.retrieval.signals import Scores, Signal, default_signals, is_weight

__all__ = ["Reranker", "dedupe"]


def _dense(e: Evidence) -> float:
    """The vector score, below any real one when dense search did not find the piece."""
    score = e.vector_score
    return -math.inf if score is None else score


def dedupe(pool: Sequence[Evidence]) -> list[Evidence]:
    """One piece per fingerprint, the one with the higher vector score (the first on a
    tie), in the order of first appearance."""
    kept: dict[str, Evidence] = {}
    for e in pool:
        key = e.fingerprint
        seen = kept.get(key)
        if seen is None or _dense(e) > _dense(seen):
            kept[key] = e  # a replaced value keeps its key's place: first appearance
    return list(kept.values())


class Reranker:
    """The one reranker every retrieval source goes through.

    `signals` default to `default_signals()`; `weights` overrides weights by signal name
    (``{"query_overlap": 0.5}``); `min_score` drops pieces whose final score is lower.
    """

    def __init__(
        self,
        signals: Sequence[Signal] | None = None,
        *,
        weights: Mapping[str, float] | None = None,
        min_score: float = 0.0,
    ) -> None:
        self.signals = list(signals) if signals is not None else default_signals()
        for signal in self.signals:
            _check_signal(signal)
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

    def rerank(self, query: str, pool: Sequence[Evidence]) -> list[Evidence]:
        """The deduplicated `pool` with signals and final ``score`` added, best first."""
        unique = dedupe(pool)
        if not unique:
            return []
        scored = {s.name: _scores(s, query, unique) for s in self.signals}
        final = np.zeros(len(unique))
        for name, weight in self.weights.items():
            final = final + scored[name] * weight
        final = final / sum(self.weights.values())
        keep = np.flatnonzero(final >= self.min_score)
        order = keep[np.argsort(-final[keep], kind="stable")]  # ties keep recall order
        names = list(scored)
        rows = np.column_stack([scored[n] for n in names]).tolist()  # one list per piece
        totals = final.tolist()
        return [
            unique[i].rescored({"score": totals[i]}, signals=dict(zip(names, rows[i], strict=True)))
            for i in order.tolist()
        ]


def _check_signal(signal: object) -> None:
    """A `ConfigError` for a signal written to the earlier protocol (``prepare`` then
    ``score(candidate)``): signals now score the whole pool in one call."""
    if hasattr(signal, "prepare"):
        raise ConfigError(
            f"Reranker: signal {getattr(signal, 'name', signal)!r} has `prepare`: signals "
            "now score the whole pool in one call, `score(query, pool) -> numpy array` (one "
            "0..1 score per piece, in the pool's order); move the work of `prepare` into it"
        )


def _scores(signal: Signal, query: str, pool: Sequence[Evidence]) -> Scores:
    values = np.asarray(signal.score(query, pool), dtype=np.float64)
    if values.shape != (len(pool),):
        raise ConfigError(
            f"Reranker: signal {signal.name!r} returned scores of shape {values.shape}; "
            f"`score(query, pool)` must return one score per piece of the pool ({len(pool)})"
        )
    return values

"""`Reranker` (seed 002): dedupe, score with weighted signals, filter and sort.

1. Dedupe by content fingerprint: the same text recalled twice (from memory and a knowledge
   base, or as a task and its summary) is one piece, the one with the higher vector score.
2. Score: each signal scores the whole pool (`Signal.score`, an array);
   ``final = sum(signal * weight) / sum(weight)``, summed signal by signal in their order.
3. Filter (`min_score`) and sort, best first; ties keep recall order. Each piece kept comes
   back as a new `Evidence` with its signals and its final ``score``.
4. Spread over sessions (`session_spread`, off at 0): a session's later pieces wait behind
   other sessions' best (`spread_sessions`), so that evidence spanning several sessions
   reaches the top few rather than a second and third turn of the one session that matched
   best. The order changes; no score does.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable, Mapping, Sequence

import numpy as np

from loomctx.errors import ConfigError, check_unit
from loomctx.retrieval.evidence import Evidence, fingerprint, new_evidence, session_of
from loomctx.retrieval.signals import Scores, Signal, default_signals, is_weight

__all__ = ["Reranker", "dedupe", "session_of", "spread_sessions"]


def _dense(e: Evidence) -> float:
    """The vector score, below any real one when dense search did not find the piece."""
    score = e.vector_score
    return -math.inf if score is None else score


def dedupe(pool: Sequence[Evidence]) -> list[Evidence]:
    """One piece per fingerprint, the one with the higher vector score (the first on a
    tie), in the order of first appearance."""
    kept: dict[str, Evidence] = {}
    for e in pool:
        key = fingerprint(e.text)  # (`Evidence.fingerprint`, without the property's call)
        seen = kept.get(key)
        if seen is None or _dense(e) > _dense(seen):
            kept[key] = e  # a replaced value keeps its key's place: first appearance
    return list(kept.values())


class Reranker:
    """The one reranker every retrieval source goes through.

    `signals` default to `default_signals()`; `weights` overrides weights by signal name
    (``{"query_overlap": 0.5}``); `min_score` drops pieces whose final score is lower;
    `session_spread` (0..1, 0: off) spreads the order over sessions (`spread_sessions`).
    """

    def __init__(
        self,
        signals: Sequence[Signal] | None = None,
        *,
        weights: Mapping[str, float] | None = None,
        min_score: float = 0.0,
        session_spread: float = 0.0,
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
        check_unit(session_spread, "Reranker: `session_spread`")
        self.session_spread = session_spread

    def rerank(self, query: str, pool: Sequence[Evidence]) -> list[Evidence]:
        """The deduplicated `pool` with signals and final ``score`` added, best first."""
        unique = dedupe(pool)
        if not unique:
            return []
        scored = {s.name: _scores(s, query, unique) for s in self.signals}
        final = np.zeros(len(unique))
        for name, weight in self.weights.items():
            final += scored[name] * weight  # (in place: the same sum, one array fewer)
        final /= sum(self.weights.values())
        keep = np.flatnonzero(final >= self.min_score)
        order = keep[np.argsort(-final[keep], kind="stable")]  # ties keep recall order
        names = tuple(scored)
        # A row of signal scores per piece, best first (one list per piece).
        rows = np.column_stack([scored[n] for n in names])[order].tolist()
        pieces = map(unique.__getitem__, order.tolist())
        ranked = [  # `Evidence.rescored`, inlined: one per piece of every pool
            new_evidence(
                e.id,
                e.origin,
                e.text,
                e.item,
                e.metadata,
                {**e.scores, "score": total},
                dict(zip(names, row, strict=False)),  # (a row: a score per name)
            )
            for e, total, row in zip(pieces, final[order].tolist(), rows, strict=False)
        ]
        return spread_sessions(ranked, self.session_spread) if self.session_spread else ranked


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


def spread_sessions(
    ranked: Sequence[Evidence],
    spread: float,
    *,
    session: Callable[[Evidence], Hashable | None] = session_of,
) -> list[Evidence]:
    """`ranked` (best first, by ``score``) in a new order: each piece competes with the score
    ``score * (1 - spread) ** n``, `n` the pieces of its session placed before it, taken
    greedily best first (ties: the earlier in `ranked`). `spread` 1: a session's second piece
    waits until every other session's best is in; 0: `ranked` as it is. Pieces of no session
    (`session` None) are never held back."""
    keep = 1.0 - check_unit(spread, "spread_sessions: `spread`")
    if keep == 1.0:
        return list(ranked)
    queues: dict[Hashable, list[int]] = {}
    for i, e in enumerate(ranked):
        queues.setdefault(("piece", i) if (s := session(e)) is None else s, []).append(i)
    # One entry per session: its next piece, at that piece's held-back score.
    heap = [(-ranked[q[0]].score, q[0], key, 0) for key, q in queues.items()]
    heapq.heapify(heap)
    out: list[Evidence] = []
    while heap:
        _, i, key, n = heapq.heappop(heap)
        out.append(ranked[i])
        queue = queues[key]
        if n + 1 < len(queue):
            j = queue[n + 1]
            held = ranked[j].score * keep ** (n + 1)
            heapq.heappush(heap, (-held, j, key, n + 1))
    return out

"""Hybrid search over arrays, below memory and knowledge: one fusion of the lexical and dense
rankings, boosts as array operations, the best rows picked without sorting a deep pool.

Callers map their hits to rows of a candidate table (one row per thing ranked: a task, a
chunk) and hand each ranker's rows and scores here as numpy arrays; only the rows that win
are decoded back into objects by the caller. See `loomctx.search._fusion`.
"""

from loomctx.search._fusion import (
    Ranking,
    best_first,
    first_hits,
    first_scores,
    min_max,
    neighbour_boost,
    ranking,
    relative,
    weighted,
)

__all__ = [
    "Ranking",
    "best_first",
    "first_hits",
    "first_scores",
    "min_max",
    "neighbour_boost",
    "ranking",
    "relative",
    "weighted",
]

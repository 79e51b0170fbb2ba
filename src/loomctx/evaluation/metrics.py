"""Ranking metrics against gold ids: recall at k and nDCG at k (binary relevance)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

__all__ = ["mean", "ndcg_at", "recall_at"]


def recall_at(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    """The fraction of `gold` found in the first `k` of `ranked` (0 for no gold)."""
    g = set(gold)
    return len(g & set(ranked[:k])) / len(g) if g else 0.0


def ndcg_at(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    """nDCG@k with binary relevance (each gold item counted once)."""
    g = set(gold)
    if not g:
        return 0.0
    seen: set[str] = set()
    dcg = 0.0
    for i, item in enumerate(ranked[:k]):
        if item in g and item not in seen:
            seen.add(item)
            dcg += 1.0 / math.log2(i + 2)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(g), k)))
    return dcg / ideal


def mean(values: Sequence[float]) -> float:
    """The mean of `values` (0 for none)."""
    return sum(values) / len(values) if values else 0.0

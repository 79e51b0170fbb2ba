"""The array operations of `loomctx.search` against plain-Python references of the same maths
(the dict-based fusion they replaced), bit for bit, on random inputs."""

from __future__ import annotations

import heapq
import random

import numpy as np
import pytest

from loomctx.search import (
    best_first,
    first_scores,
    min_max,
    neighbour_boost,
    ranking,
    relative,
    weighted,
)


def _reference_neighbours(
    fused: list[float], place: list[int], asks: list[bool], nw: float, aw: float
) -> list[float]:
    at = {p: i for i, p in enumerate(place) if p >= 0}
    out = []
    for i, score in enumerate(fused):
        n = place[i]
        if n >= 0:
            before, after = at.get(n - 1), at.get(n + 1)
            near: float = 0
            if before is not None:
                near += fused[before]
            if after is not None:
                near += fused[after]
            score += nw * near
            if aw and before is not None and asks[before]:
                score += aw * fused[before]
        out.append(score / (1 + 2 * nw + aw))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_neighbour_boost_is_the_loop_it_replaced(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 60)
    places = rng.sample(range(-1, 90), n)  # unique places; -1 at most once: no neighbours
    fused = [rng.random() for _ in range(n)]
    asks = [rng.random() < 0.3 for _ in range(n)]
    nw, aw = rng.choice([0.0, 0.3, 0.5]), rng.choice([0.0, 0.35])
    got = neighbour_boost(
        np.asarray(fused),
        np.asarray(places, dtype=np.int64),
        np.asarray(asks),
        neighbour_weight=nw,
        answer_weight=aw,
    )
    assert got.tolist() == _reference_neighbours(fused, places, asks, nw, aw)


@pytest.mark.parametrize("seed", range(20))
def test_best_first_is_a_full_sort_cut_at_limit(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 80)
    scores = [rng.choice([0.0, 0.25, 0.5, rng.random()]) for _ in range(n)]  # many ties
    keys = [(("ns",), f"t{rng.randint(0, 10**6)}-{i}") for i in range(n)]
    limit = rng.randint(1, n + 5)
    pairs = [(-s, k, i) for i, (s, k) in enumerate(zip(scores, keys, strict=True))]
    want = [i for _, _, i in heapq.nsmallest(limit, pairs)]
    assert best_first(np.asarray(scores), limit, keys) == want


def test_rescaling_and_first_hits_follow_the_rankers_order() -> None:
    r = ranking([2, 0, 2, 1], [4.0, 3.0, 2.0, 1.0], [4.0, 3.0, 2.0, 1.0, 0.5])
    assert relative(r, flat=0.0).tolist() == [1.0, 0.75, 0.5, 0.25]
    assert min_max(r).tolist() == [(s - 0.5) / 3.5 for s in (4.0, 3.0, 2.0, 1.0)]
    first = first_scores(r.rows, r.scores, 4)
    assert first[:3].tolist() == [3.0, 1.0, 4.0]  # row 2: its first (best) hit
    assert np.isnan(first[3])
    flat = ranking([0], [0.0], [0.0])
    assert relative(flat, flat=1.0).tolist() == [1.0]
    assert min_max(flat).tolist() == [1.0]


def test_weighted_counts_a_missing_part_as_zero() -> None:
    a = np.asarray([0.5, np.nan, 1.0])
    b = np.asarray([np.nan, 0.25, 1.0])
    got = weighted([(0.5, a), (0.3, b), (0.2, np.full(3, np.nan))], 1.0)
    want = [(0.5 * 0.5 + 0.0 + 0.0) / 1.0, (0.0 + 0.3 * 0.25 + 0.0) / 1.0, (0.5 + 0.3 + 0.0) / 1.0]
    assert got.tolist() == want

"""The array operations of `loomctx.search` against plain-Python references of the same maths
(the dict-based fusion they replaced), bit for bit, on random inputs."""

from __future__ import annotations

import heapq
import random

import numpy as np
import pytest

from loomctx.search import (
    best_first,
    first_hits,
    first_scores,
    min_max,
    neighbour_boost,
    ranking,
    relative,
    weighted,
)
from loomctx.search._fusion import firsts


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


def _searchsorted_neighbours(
    place: np.ndarray, asks: np.ndarray, fused: np.ndarray, nw: float, aw: float
) -> list[float]:
    """The neighbour boost as it was written with a stable argsort and binary searches."""
    n = fused.shape[0]
    placed = np.flatnonzero(place >= 0)
    before = np.full(n, -1, dtype=np.intp)
    after = np.full(n, -1, dtype=np.intp)
    if placed.size:
        order = placed[np.argsort(place[placed], kind="stable")]
        sorted_places = place[order]
        for shift, out in ((-1, before), (1, after)):
            want = sorted_places + shift
            at = np.searchsorted(sorted_places, want)
            at_ok = at < sorted_places.size
            hit = np.zeros(want.shape, dtype=bool)
            hit[at_ok] = sorted_places[at[at_ok]] == want[at_ok]
            out[order[hit]] = order[at[hit]]
    has_before, has_after = before >= 0, after >= 0
    from_before = np.where(has_before, fused[before], 0.0)
    near = from_before + np.where(has_after, fused[after], 0.0)
    score = np.where(place >= 0, fused + nw * near, fused)
    if aw:
        answered = has_before & asks[np.where(has_before, before, 0)]
        score = np.where(answered, score + aw * from_before, score)
    out_scores: list[float] = (score / (1 + 2 * nw + aw)).tolist()
    return out_scores


@pytest.mark.parametrize("seed", range(30))
def test_neighbour_boost_with_shared_places_is_the_binary_search_it_replaced(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 80)
    top = rng.choice([3, 20, 200, 1 << 45])  # few places: many rows share one
    places = np.asarray([rng.randint(-1, top) for _ in range(n)], dtype=np.int64)
    fused = np.asarray([rng.random() for _ in range(n)])
    asks = np.asarray([rng.random() < 0.3 for _ in range(n)])
    nw, aw = rng.choice([0.0, 0.3]), rng.choice([0.0, 0.35])
    got = neighbour_boost(fused, places, asks, neighbour_weight=nw, answer_weight=aw)
    assert got.tolist() == _searchsorted_neighbours(places, asks, fused, nw, aw)


@pytest.mark.parametrize("seed", range(20))
def test_firsts_is_numpys_unique_with_first_positions(seed: int) -> None:
    rng = np.random.default_rng(seed)
    top = [5, 1000, 1 << 61][seed % 3]  # the last too large to pack: numpy's own way
    keys = rng.integers(0, top, size=int(rng.integers(1, 300)))
    unique, first = firsts(keys)
    want_unique, want_first = np.unique(keys, return_index=True)
    assert unique.tolist() == want_unique.tolist()
    assert first.tolist() == want_first.tolist()
    rows = rng.integers(0, 40, size=keys.size)
    values = rng.random(keys.size)
    want = np.full(40, np.nan)
    u, f = np.unique(rows, return_index=True)
    want[u] = values[f]
    np.testing.assert_array_equal(first_scores(rows, values, 40), want)


@pytest.mark.parametrize("seed", range(10))
def test_first_hits_made_once_serve_every_value_of_a_ranking(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    # hits of a row each (as a dense ranking's), or several of a row (a task and its summary)
    rows = rng.permutation(n)[: int(rng.integers(0, n + 1))] if seed % 2 else rng.integers(0, n, 80)
    hits = first_hits(rows)
    for values in (rng.random(rows.size), rng.normal(size=rows.size)):
        want = np.full(n, np.nan)
        for position, row in enumerate(rows.tolist()):  # the first (best) hit of each row
            if np.isnan(want[row]):
                want[row] = values[position]
        np.testing.assert_array_equal(first_scores(rows, values, n, hits), want)
        np.testing.assert_array_equal(first_scores(rows, values, n), want)


def test_weighted_takes_an_infinite_part_as_nan_to_num_does() -> None:
    a = np.asarray([np.inf, -np.inf, np.nan, 0.5])
    b = np.asarray([0.25, 0.25, 0.25, 0.25])
    want = (0.5 * np.nan_to_num(a, nan=0.0) + 0.5 * b) / 1.0
    assert weighted([(0.5, a), (0.5, b)], 1.0).tolist() == want.tolist()


@pytest.mark.parametrize("seed", range(20))
def test_best_first_with_nan_scores_is_pythons_sort_of_the_pairs(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 40)
    scores = [rng.choice([0.5, float("nan"), rng.random()]) for _ in range(n)]
    keys = [f"k{rng.randint(0, 99)}-{i}" for i in range(n)]
    limit = rng.randint(1, n + 2)
    negative = (-np.asarray(scores)).tolist()
    if limit < n:
        kth = np.partition(-np.asarray(scores), limit - 1)[limit - 1]
        rows = np.flatnonzero(-np.asarray(scores) <= kth).tolist()
    else:
        rows = list(range(n))
    want = sorted(rows, key=lambda i: (negative[i], keys[i]))[:limit]
    assert best_first(np.asarray(scores), limit, keys) == want

"""`stores._top.best`: the kept rows are a function of the data alone, ties at the cut taken
by their key (what `np.argpartition` leaves to the CPU's kernel)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from loomctx.stores._top import best, ranked

SCORES = st.lists(st.integers(0, 4), min_size=0, max_size=60)


@given(SCORES, st.integers(1, 70), st.booleans(), st.randoms(use_true_random=False))
def test_the_best_are_the_reference_ones(
    values: list[int], limit: int, highest: bool, rng: object
) -> None:
    scores = np.array(values, dtype=np.float32)
    keys = np.arange(len(values), dtype=np.int64)
    rng.shuffle(keys)  # type: ignore[attr-defined]
    sign = -1 if highest else 1
    expected = sorted(range(len(values)), key=lambda i: (sign * values[i], keys[i]))[:limit]
    got = best(scores, keys, limit, highest=highest)
    assert sorted(got.tolist()) == sorted(expected)


def test_ties_at_the_cut_go_to_the_smaller_key() -> None:
    scores = np.array([0.5, 0.9, 0.5, 0.5, 0.1], dtype=np.float32)
    keys = np.array([40, 10, 30, 20, 50])
    assert sorted(best(scores, keys, 2).tolist()) == [1, 3]
    assert sorted(best(scores, keys, 2, highest=False).tolist()) == [3, 4]


@given(
    st.lists(st.sampled_from([0.0, -0.0, 0.25, 0.5, -1.0, float("nan"), 3.5]), max_size=60),
    st.sampled_from([np.float32, np.float64]),
    st.sampled_from([1, 1 << 40]),
    st.randoms(use_true_random=False),
)
def test_ranked_is_lexsort_by_score_then_id(
    values: list[float], dtype: type, scale: int, rng: object
) -> None:
    """`ranked` against the `np.lexsort` it replaced: the same ids and scores, in order
    (ties by id; NaN, and ids too large to pack, take numpy's way)."""
    scores = np.array(values, dtype=dtype)
    ids = np.arange(len(values), dtype=np.int64) * scale
    rng.shuffle(ids)  # type: ignore[attr-defined]
    order = np.lexsort((ids, -scores))
    got_ids, got_scores = ranked(scores, ids)
    assert got_ids.tolist() == ids[order].tolist()
    assert np.array_equal(got_scores, scores[order], equal_nan=True)
    assert np.signbit(got_scores).tolist() == np.signbit(scores[order]).tolist()
    assert got_scores.dtype == scores.dtype

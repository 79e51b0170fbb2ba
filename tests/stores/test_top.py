"""`stores._top.best`: the kept rows are a function of the data alone, ties at the cut taken
by their key (what `np.argpartition` leaves to the CPU's kernel); `ranked` orders them as
`np.lexsort` does."""

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
    st.lists(
        st.one_of(st.floats(-1, 1, width=32), st.sampled_from([0.5, 0.0, -0.0])),
        max_size=80,
    ),
    st.randoms(use_true_random=False),
)
def test_ranked_orders_as_lexsort_does(values: list[float], rng: object) -> None:
    ids = np.arange(len(values), dtype=np.int64) * 7 + 3
    rng.shuffle(ids)  # type: ignore[attr-defined]
    for dtype in (np.float32, np.float64):
        scores = np.array(values, dtype=dtype)
        assert ranked(scores, ids).tolist() == np.lexsort((ids, -scores)).tolist()


def test_ranked_of_distinct_scores_is_one_sort() -> None:
    scores = np.random.default_rng(0).permutation(1000).astype(np.float64) / 7
    ids = np.arange(1000)[::-1].copy()
    assert ranked(scores, ids).tolist() == np.argsort(-scores, kind="stable").tolist()

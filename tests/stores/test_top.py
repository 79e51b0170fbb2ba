"""`stores._top.best`: the kept rows are a function of the data alone, ties at the cut taken
by their key (what `np.argpartition` leaves to the CPU's kernel)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from loomctx.stores._top import best

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

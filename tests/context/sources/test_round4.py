"""`round4`, the injector's rounding of scores in arrays, against `round(v, 4)` bit for bit."""

from __future__ import annotations

import math
import struct

from hypothesis import given
from hypothesis import strategies as st

from loomctx.context.sources.retrieval import round4


def _bits(values: list[object]) -> list[object]:
    """Floats as their bytes (so -0.0 and 0.0, and NaNs, compare as they are), else as is."""
    return [struct.pack("<d", v) if type(v) is float else (type(v), v) for v in values]


def _reference(values: list[object]) -> list[object]:
    return [round(v, 4) for v in values]  # type: ignore[call-overload]


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True)))
def test_any_floats_round_as_round_does(values: list[float]) -> None:
    assert _bits(round4(values)) == _bits(_reference(values))


@given(st.lists(st.floats(min_value=-1.0, max_value=1.0), min_size=1, max_size=50))
def test_scores_round_as_round_does(values: list[float]) -> None:
    assert _bits(round4(values)) == _bits(_reference(values))


def test_ties_zeros_and_other_numbers_round_as_round_does() -> None:
    values: list[object] = [k / 20_000 for k in range(-20_001, 20_002)]  # every half-tie
    values += [0.0, -0.0, 5e-5, -5e-5, 4.9999e-5, -4.9999e-5, 1e-300, -1e-300, 1e13, -1e13]
    values += [math.inf, -math.inf, math.nan, 1, 0, True, 3]
    assert _bits(round4(values)) == _bits(_reference(values))
    assert round4([]) == []

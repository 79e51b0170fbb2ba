"""`loomctx._memo.Memo`: a function of an object, worked out once per object kept."""

from __future__ import annotations

from loomctx._memo import Memo


class Box:
    def __init__(self, value: int) -> None:
        self.value = value


def counting() -> tuple[list[int], Memo[Box, int]]:
    calls: list[int] = []

    def double(box: Box) -> int:
        calls.append(box.value)
        return 2 * box.value

    return calls, Memo(double, 2)


def test_an_object_kept_is_worked_out_once() -> None:
    calls, memo = counting()
    a = Box(1)
    assert (memo(a), memo(a)) == (2, 2)
    assert calls == [1]


def test_an_equal_but_other_object_is_worked_out_anew() -> None:
    calls, memo = counting()
    memo(Box(3))
    memo(Box(3))
    assert calls == [3, 3]


def test_the_oldest_leaves_past_the_size() -> None:
    calls, memo = counting()
    a, b, c = Box(1), Box(2), Box(3)
    for box in (a, b, c, c, b, a):
        memo(box)
    assert calls == [1, 2, 3, 1]  # `a` left when `c` came; `b` and `c` were kept


def test_size_zero_keeps_nothing() -> None:
    calls: list[int] = []
    memo: Memo[Box, int] = Memo(lambda box: calls.append(box.value) or box.value, 0)
    a = Box(5)
    assert (memo(a), memo(a)) == (5, 5)
    assert calls == [5, 5]

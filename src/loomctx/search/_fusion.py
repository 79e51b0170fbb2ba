"""Value fusion of rankings over a candidate table, in numpy.

A *ranking* is what one ranker (BM25, a dense model, a fast static model) found: `rows`,
each hit's row in the caller's candidate table (several hits may share a row: a task and
its summary), and their raw `scores`, best first. Fusion works on per-row arrays:

1. Each ranking's scores are rescaled within the ranking (`relative`: to the best score;
   `min_max`: between the worst and the best), over every hit it returned.
2. A row takes the rescaled score of its first (best) hit in each ranking (`first_scores`);
   NaN where the ranking did not find it.
3. The parts are summed by weight (`weighted`): ``(w1 * a + w2 * b + ...) / total``, a part
   counting 0 where it is NaN.
4. Memory adds its neighbours (`neighbour_boost`): each row gains a share of the fused score
   of the rows recorded just before and after it, and an answer a share of its question's.
5. `best_first`: the `limit` best rows, ties broken by the caller's keys.

Each step is the elementwise arithmetic the dict-based fusion did, in the same order of
operations, so scores are bit-for-bit those of that code (tests/search/test_golden.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "Ranking",
    "best_first",
    "first_hits",
    "first_scores",
    "firsts",
    "min_max",
    "neighbour_boost",
    "ranking",
    "relative",
    "weighted",
]

Floats = npt.NDArray[np.float64]
Rows = npt.NDArray[np.intp]


@dataclass(frozen=True, slots=True, kw_only=True)
class Ranking:
    """One ranker's hits: the candidate row of each (`rows`) and its raw score (`scores`),
    best first, both as long as the hits kept; `every` holds the scores of every hit the
    ranker returned, kept or not (rescaling reads them all)."""

    rows: Rows
    scores: Floats
    every: Floats


def ranking(
    rows: Sequence[int] | Rows,
    scores: Sequence[float] | Floats,
    every: Sequence[float] | Floats,
) -> Ranking:
    """A `Ranking` from plain sequences (or arrays)."""
    return Ranking(
        rows=np.asarray(rows, dtype=np.intp),
        scores=np.asarray(scores, dtype=np.float64),
        every=np.asarray(every, dtype=np.float64),
    )


def relative(r: Ranking, *, flat: float) -> Floats:
    """Each kept hit's score divided by the best score of the ranking; `flat` for every hit
    when the best is not above 0 (BM25 of a query whose words are everywhere)."""
    if not r.every.size:
        return r.scores.copy()
    best = float(r.every.max())
    if best > 0:
        # ``(s - 0.0) / best`` is ``s / best`` exactly.
        out: Floats = r.scores / best
        return out
    return np.full(r.scores.shape, flat)


def min_max(r: Ranking) -> Floats:
    """Each kept hit's score rescaled between the ranking's worst and best (1 for all when
    they are equal)."""
    if not r.every.size:
        return r.scores.copy()
    low = float(r.every.min())
    span = float(r.every.max()) - low
    if span > 0:
        out: Floats = (r.scores - low) / span
        return out
    return np.ones(r.scores.shape)


def first_scores(
    rows: Rows, values: Floats, n: int, hits: tuple[Rows, Rows | slice] | None = None
) -> Floats:
    """Per row of a table of `n`, the value of its first hit in `rows` (hits are best first);
    NaN for a row without a hit. `hits`: `first_hits(rows)`, for a ranking whose several
    values are spread over the rows (made here if not given)."""
    out = np.full(n, np.nan)
    if rows.size:
        found, first = first_hits(rows) if hits is None else hits
        out[found] = values[first]
    return out


def first_hits(rows: Rows) -> tuple[Rows, Rows | slice]:
    """The rows a ranking's hits found, each once, and the position of each one's first hit
    (hits are best first); ``(rows, slice(None))`` when each hit is of a row of its own (the
    usual case: no sort)."""
    if rows.size and int(np.bincount(rows).max()) > 1:
        return firsts(rows)
    return rows, slice(None)


def firsts(keys: npt.NDArray[np.integer]) -> tuple[npt.NDArray[np.int64], Rows]:
    """The distinct non-negative `keys`, ascending, and the position of the first of each:
    ``np.unique(keys, return_index=True)``, by one sort of the keys packed with their
    positions (numpy's stable argsort, which that call makes, costs several such sorts)."""
    m = keys.shape[0]
    if not m:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.intp)
    shift = max(m - 1, 1).bit_length()
    if int(keys.min()) < 0 or int(keys.max()) >= 1 << (62 - shift):  # too large to pack
        unique, first = np.unique(keys, return_index=True)
        return unique.astype(np.int64, copy=False), first
    packed = np.sort((keys.astype(np.int64) << shift) | np.arange(m))
    sorted_keys = packed >> shift
    start = np.empty(m, dtype=np.bool_)
    start[0] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=start[1:])
    return sorted_keys[start], (packed[start] & ((1 << shift) - 1)).astype(np.intp)


def weighted(parts: Sequence[tuple[float, Floats]], total: float) -> Floats:
    """``(w1 * p1 + w2 * p2 + ...) / total``, a NaN part counting 0 (an infinite one the
    largest finite float of its sign, as `np.nan_to_num`)."""
    acc: Floats | None = None
    for weight, part in parts:
        absent = np.isnan(part)
        clean = np.where(absent, 0.0, part) if absent.any() else part
        if np.isinf(clean).any():
            clean = np.nan_to_num(part, nan=0.0)
        term = weight * clean
        acc = term if acc is None else acc + term
    assert acc is not None, "weighted needs at least one part"
    out: Floats = acc / total
    return out


def neighbour_boost(
    fused: Floats,
    place: npt.NDArray[np.int64],
    asks: npt.NDArray[np.bool_],
    *,
    neighbour_weight: float,
    answer_weight: float,
) -> Floats:
    """Each row's score with its neighbours': ``(s + nw * (before + after) + aw * question)
    / (1 + 2 nw + aw)``.

    `place`: where each row was recorded, as an integer whose neighbours are ``place - 1``
    and ``place + 1`` (-1: nowhere, no neighbours: a summary, a task added to the archive
    directly). A neighbour counts only if it is a row of the table. `asks`: whether a row
    asks something; the row right after one that asks gains `answer_weight` times its score
    (the answer to a question that matches)."""
    n = fused.shape[0]
    norm = 1 + 2 * neighbour_weight + answer_weight
    placed = np.flatnonzero(place >= 0)
    before = np.full(n, -1, dtype=np.intp)
    after = np.full(n, -1, dtype=np.intp)
    if placed.size:
        order = placed[_stable_order(place[placed])]
        _neighbours(place[order], order, before, after)
    has_before, has_after = before >= 0, after >= 0
    from_before = np.where(has_before, fused[before], 0.0)
    from_after = np.where(has_after, fused[after], 0.0)
    # (the dict code summed an int 0 with each neighbour: ``0 + b`` is ``b`` exactly)
    near = from_before + from_after
    score: Floats = np.where(place >= 0, fused + neighbour_weight * near, fused)
    if answer_weight:
        answered = has_before & asks[np.where(has_before, before, 0)]
        score = np.where(answered, score + answer_weight * from_before, score)
    out_scores: Floats = score / norm
    return out_scores


def _neighbours(places: npt.NDArray[np.int64], rows: Rows, before: Rows, after: Rows) -> None:
    """For `rows` sorted by their `places` (ascending, ties in row order), set each row's
    `before` and `after` to the first row placed one below and one above it, where there is
    one: the walk over neighbours in the sorted order that a binary search for ``place - 1``
    and ``place + 1`` would make, without the searches."""
    m = places.shape[0]
    step = places[1:] - places[:-1]
    if step.all():  # distinct places (a table of tasks): a neighbour is the next in order
        close = np.flatnonzero(step == 1)
        before[rows[close + 1]] = rows[close]
        after[rows[close]] = rows[close + 1]
        return
    at = np.arange(m)
    new = np.concatenate(([True], step != 0))  # the first of a run of equal places
    first = np.maximum.accumulate(np.where(new, at, 0))  # of each one's run
    last = np.minimum.accumulate(np.where(np.concatenate((step != 0, [True])), at, m)[::-1])[::-1]
    below = first - 1  # the last of the run below
    ok = np.flatnonzero(below >= 0)
    ok = ok[places[below[ok]] == places[ok] - 1]
    before[rows[ok]] = rows[first[below[ok]]]
    above = last + 1  # the first of the run above
    ok = np.flatnonzero(above < m)
    ok = ok[places[above[ok]] == places[ok] + 1]
    after[rows[ok]] = rows[above[ok]]


def _stable_order(values: npt.NDArray[np.int64]) -> Rows:
    """``np.argsort(values, kind="stable")`` for non-negative integers, by one sort of the
    values packed with their positions where they fit (numpy's stable argsort of a few
    thousand values costs several times a sort of them)."""
    m = values.shape[0]
    shift = max(m - 1, 1).bit_length()
    if not m or int(values.min()) < 0 or int(values.max()) >= 1 << (62 - shift):
        return np.argsort(values, kind="stable")
    packed = np.sort((values << shift) | np.arange(m))
    out: Rows = (packed & ((1 << shift) - 1)).astype(np.intp)
    return out


def best_first(scores: Floats, limit: int, keys: Sequence[Any] | Callable[[int], Any]) -> list[int]:
    """The rows of the `limit` best `scores`, best first, ties by `keys` (comparable values,
    one per row; or a function of the row giving its value, for tables whose keys cost
    something to list): what ``sorted(zip(-scores, keys))[:limit]`` gives, without sorting
    a deep pool (only the rows at or above the `limit`-th score are sorted, and only rows
    tied on score are compared by key)."""
    n = scores.shape[0]
    if limit <= 0 or n == 0:
        return []
    negative = -scores
    if limit < n:
        kth = np.partition(negative, limit - 1)[limit - 1]
        rows = np.flatnonzero(negative <= kth)
    else:
        rows = np.arange(n)
    key_of = keys if callable(keys) else keys.__getitem__
    values = negative[rows]
    if np.isnan(negative).any():  # NaN compares unlike a number: Python's sort of the pairs
        listed, every = rows.tolist(), negative.tolist()
        listed.sort(key=lambda i: (every[i], key_of(i)))
        return listed[:limit]
    order = np.argsort(values, kind="stable")
    values = values[order]
    out: list[int] = rows[order].tolist()
    tied = values[1:] == values[:-1]
    if tied.any():  # each run of equal scores that reaches into the first `limit`, by key
        starts = np.flatnonzero(tied & ~np.concatenate(([False], tied[:-1])))
        ends = np.flatnonzero(tied & ~np.concatenate((tied[1:], [False]))) + 2
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            if start >= limit:
                break
            out[start:end] = sorted(out[start:end], key=key_of)
    return out[:limit]

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
    "first_scores",
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


def first_scores(rows: Rows, values: Floats, n: int) -> Floats:
    """Per row of a table of `n`, the value of its first hit in `rows` (hits are best first);
    NaN for a row without a hit."""
    out = np.full(n, np.nan)
    if rows.size:
        unique, first = np.unique(rows, return_index=True)
        out[unique] = values[first]
    return out


def weighted(parts: Sequence[tuple[float, Floats]], total: float) -> Floats:
    """``(w1 * p1 + w2 * p2 + ...) / total``, a NaN part counting 0."""
    acc: Floats | None = None
    for weight, part in parts:
        term = weight * np.nan_to_num(part, nan=0.0)
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
    from_after = np.where(has_after, fused[after], 0.0)
    # (the dict code summed an int 0 with each neighbour: ``0 + b`` is ``b`` exactly)
    near = from_before + from_after
    score: Floats = np.where(place >= 0, fused + neighbour_weight * near, fused)
    if answer_weight:
        answered = has_before & asks[np.where(has_before, before, 0)]
        score = np.where(answered, score + answer_weight * from_before, score)
    out_scores: Floats = score / norm
    return out_scores


def best_first(scores: Floats, limit: int, keys: Sequence[Any] | Callable[[int], Any]) -> list[int]:
    """The rows of the `limit` best `scores`, best first, ties by `keys` (comparable values,
    one per row; or a function of the row giving its value, for tables whose keys cost
    something to list): what ``sorted(zip(-scores, keys))[:limit]`` gives, without sorting
    a deep pool (only the rows at or above the `limit`-th score are sorted)."""
    n = scores.shape[0]
    if limit <= 0 or n == 0:
        return []
    negative = -scores
    if limit < n:
        kth = np.partition(negative, limit - 1)[limit - 1]
        rows = np.flatnonzero(negative <= kth).tolist()
    else:
        rows = list(range(n))
    values = negative.tolist()
    key_of = keys if callable(keys) else keys.__getitem__
    rows.sort(key=lambda i: (values[i], key_of(i)))
    return rows[:limit]

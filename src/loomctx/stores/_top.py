"""The `limit` best of an index's scored rows, the same on every machine.

`np.argpartition` keeps an arbitrary subset of the rows tied at the cut, and which one
depends on the CPU (numpy picks a vectorised kernel by the instruction set): a search's
results, and so a window, would differ between two machines holding the same store. Here
the cut is made by value (`np.partition` of the scores is exact), and the rows tied at it
are taken by their tie-break key (record id, or row order), so the kept set is a function
of the data alone. `ranked` then orders the kept rows, ties by record id.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = ["best", "ranked"]


def best(
    scores: npt.NDArray[np.floating] | npt.NDArray[np.integer],
    ties: npt.NDArray[np.integer],
    limit: int,
    *,
    highest: bool = True,
) -> npt.NDArray[np.intp]:
    """Positions of the `limit` best `scores` (the highest, else the lowest), ties broken by
    the smaller `ties` key; in no particular order."""
    n = len(scores)
    if n <= limit:
        return np.arange(n)
    keyed = -scores if highest else scores
    cut = np.partition(keyed, limit - 1)[limit - 1]
    inside = np.flatnonzero(keyed < cut)
    tied = np.flatnonzero(keyed == cut)
    if len(inside) + len(tied) > limit:
        tied = tied[np.argsort(ties[tied], kind="stable")[: limit - len(inside)]]
    return np.concatenate([inside, tied])


def ranked(
    scores: npt.NDArray[np.floating] | npt.NDArray[np.integer], ids: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.floating] | npt.NDArray[np.integer]]:
    """`ids` and `scores` best first, ties by the smaller id: ``np.lexsort((ids, -scores))``
    applied to both. By one unstable sort of the scores, then, where scores tie, one sort of
    the ids packed with the number of their run of equal scores (a run's scores are equal,
    so only its ids move): numpy's stable sorts, which `np.lexsort` makes, cost several.
    Where a score is NaN or -0.0 (which ties with 0.0 but is not the same float), or an id
    does not fit the packing, `np.lexsort` itself."""
    m = scores.shape[0]
    if m < 2:
        return ids, scores
    odd = np.isnan(scores).any() or ((scores == 0) & np.signbit(scores)).any()  # NaN, -0.0
    if odd or int(ids.min()) < 0 or int(ids.max()) >= _IDS:
        order = np.lexsort((ids, -scores))
        return ids[order], scores[order]
    order = np.argsort(-scores)
    ids, scores = ids[order], scores[order]
    change = scores[1:] != scores[:-1]
    if not change.all():
        run = np.zeros(m, dtype=np.int64)
        np.cumsum(change, out=run[1:])
        ids = np.sort((run << _ID_BITS) | ids) & (_IDS - 1)
    return ids, scores


_ID_BITS: Final = 32
_IDS: Final = 1 << _ID_BITS  # ids below this are packed with their run (m runs < 2**31)

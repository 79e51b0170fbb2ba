"""The `limit` best of an index's scored rows, the same on every machine.

`np.argpartition` keeps an arbitrary subset of the rows tied at the cut, and which one
depends on the CPU (numpy picks a vectorised kernel by the instruction set): a search's
results, and so a window, would differ between two machines holding the same store. Here
the cut is made by value (`np.partition` of the scores is exact), and the rows tied at it
are taken by their tie-break key (record id, or row order), so the kept set is a function
of the data alone.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["best"]


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

"""Record id -> row number for the in-memory indexes, in about 12 bytes per record.

A ``dict[int, int]`` costs about 100 bytes per entry at 100k records (two int objects and a
hash-table slot), 10 MB per index, and a store holds one lexical index and one vector index
per model. Here the map is a sorted array of ids beside their rows (`np.searchsorted` finds
one), plus a small dict of the changes since the last compaction: a write is a dict insert,
and the dict is folded into the arrays (a sort) once it holds an eighth of the entries, so
it never costs more than the arrays do. A look-up is slower than a dict's, but it is paid
only on writes (an upsert, a removal), never by search (`bench/store_bench.py` measures
both). Record ids are SQLite rowids, so they are exact integer keys: no hashing, and no
collisions to handle.

`SeqsById` keeps each found record's `seq` for search, in a flat array indexed by record id
(dense: SQLite hands out rowids from 1), so a search's few thousand hits are looked up with
one numpy indexing rather than a dict lookup each.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = ["RowMap", "SeqsById"]

_MIN_COMPACT: Final = 1024  # changes kept in the dict before folding (below, a dict is small)
_GONE: Final = -1  # in the change dict: the id was removed


class RowMap:
    """A mapping from record id to row, with `get`, `set` and `pop` like a dict's."""

    def __init__(self, ids: npt.NDArray[np.int64] | None = None) -> None:
        """A map of ``ids[row] -> row`` for every row of `ids` (distinct ids), or empty."""
        if ids is None:
            ids = np.empty(0, dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        self._keys: npt.NDArray[np.int64] = ids[order].astype(np.int64, copy=False)
        self._rows: npt.NDArray[np.int32] = order.astype(np.int32)
        self._changes: dict[int, int] = {}

    def get(self, record_id: int) -> int | None:
        """The row of `record_id`, or None if it has none."""
        row = self._changes.get(record_id)
        if row is None:
            at = int(np.searchsorted(self._keys, record_id))
            if at == len(self._keys) or self._keys[at] != record_id:
                return None
            row = int(self._rows[at])
        return None if row == _GONE else row

    def set(self, record_id: int, row: int) -> None:
        """Map `record_id` to `row` (a new entry, or a move)."""
        self._changes[record_id] = row
        self._maybe_compact()

    def pop(self, record_id: int) -> int | None:
        """Remove `record_id`; its row, or None if it had none."""
        row = self.get(record_id)
        if row is not None:
            self._changes[record_id] = _GONE
            self._maybe_compact()
        return row

    def _maybe_compact(self) -> None:
        if len(self._changes) >= max(_MIN_COMPACT, len(self._keys) // 8):
            self.compact()

    def compact(self) -> None:
        """Fold the changes into the sorted arrays."""
        if not self._changes:
            return
        changed = np.fromiter(self._changes, dtype=np.int64, count=len(self._changes))
        rows = np.fromiter(self._changes.values(), dtype=np.int64, count=len(self._changes))
        kept = ~np.isin(self._keys, changed, assume_unique=True)
        live = rows != _GONE
        keys = np.concatenate([self._keys[kept], changed[live]])
        order = np.argsort(keys, kind="stable")
        self._keys = keys[order]
        self._rows = np.concatenate([self._rows[kept], rows[live].astype(np.int32)])[order]
        self._changes = {}


class SeqsById:
    """Record id -> its `seq`, for the ids below `limit`, in a flat int64 array (8 bytes per
    id up to the largest id seen; -1: not known). `get` of many ids is one indexing."""

    def __init__(self, *, limit: int = 1 << 22) -> None:
        self.limit = limit
        self._seqs = np.full(0, -1, dtype=np.int64)

    def get(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The seq of each of `ids`, -1 where not known."""
        known = self._seqs
        inside = ids < known.shape[0]
        if inside.all():
            out: npt.NDArray[np.int64] = known[ids]
            return out
        if not known.shape[0]:
            return np.full(ids.shape, -1, dtype=np.int64)
        return np.where(inside, known[np.where(inside, ids, 0)], -1)

    def set(self, ids: npt.NDArray[np.int64], seqs: npt.NDArray[np.int64]) -> None:
        """Remember `seqs` for `ids` (ids at or above `limit` are not kept)."""
        keep = ids < self.limit
        ids, seqs = ids[keep], seqs[keep]
        if not ids.size:
            return
        top = int(ids.max()) + 1
        if top > self._seqs.shape[0]:
            grown = np.full(max(top, 2 * self._seqs.shape[0]), -1, dtype=np.int64)
            grown[: self._seqs.shape[0]] = self._seqs
            self._seqs = grown
        self._seqs[ids] = seqs

    def forget(self, record_id: int) -> None:
        """Drop what is known of `record_id` (its record changed or went)."""
        if 0 <= record_id < self._seqs.shape[0]:
            self._seqs[record_id] = -1

    def clear(self) -> None:
        """Forget every id."""
        self._seqs = np.full(0, -1, dtype=np.int64)

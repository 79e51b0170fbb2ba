"""What memory search reads of the records the store found, kept by record version.

`HitInfo` is what ranking reads of one found record; `Columns` keeps it, by the store's row
id, as numpy columns (what fusion reads of every hit) and in full (for the few rows that need
more); `rows_of` maps hits to the rows of the table of tasks found (`loomctx.memory._search`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

import numpy as np
import numpy.typing as npt

from loomctx.memory.timeref import NO_TIME, TimeSpan, micros

__all__ = [
    "OTHER",
    "SUMMARY_KIND",
    "TASK_KIND",
    "UNREAD",
    "Columns",
    "HitInfo",
    "Key",
    "named_micros",
    "rows_of",
]

Key = tuple[tuple[str, ...], str]  # (namespace, task id)
UNREAD: Final = object()  # a record's time that `_time_match` must read itself
HitInfo = tuple[str, int, bool, object, Key | None, tuple[int, ...], int, int]
# (the 4th: datetime | None | UNREAD)
"""What search's ranking reads of a found record: the task it stands for ("" for a record
that is not one of a memory's), its place in the write order (a task record's; -1 for others
and for tasks added straight to L3/L4), whether it asks something, when its task was recorded
(None: it does not say; `UNREAD`: its data is not as expected), the key search ranks its task
by (None if it stands for no task), the times the task names (`TIME_REFS`, as
`named_micros`), that key's number in this memory's search (-1 for None) and the record's
kind (`OTHER`, `TASK_KIND`, `SUMMARY_KIND`), made once per record version (its `seq`) rather
than once per hit."""
OTHER, TASK_KIND, SUMMARY_KIND = 0, 1, 2


def named_micros(spans: tuple[TimeSpan, ...]) -> tuple[int, ...]:
    """The starts of `spans` then their ends, as `micros`: what a time query compares them
    by (`loomctx.memory.timeref.meetings`)."""
    return (*(micros(s.start) for s in spans), *(micros(s.end) for s in spans))


class Columns:
    """What ranking reads of the records found (`HitInfo`), by the store's row id: numpy
    columns for what fusion reads of every hit, and the whole `HitInfo` for the rows that
    need more. An id's entries are those of the version `seq[id]` (-1: none): a hit reads
    them only while its version is that one, so a record changed since is read again."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Forget every record."""
        self.seq = np.full(0, -1, dtype=np.int64)
        self.number = np.full(0, -1, dtype=np.intp)
        self.kind = np.zeros(0, dtype=np.int8)
        self.place = np.full(0, -1, dtype=np.int64)
        self.asks = np.zeros(0, dtype=np.bool_)
        self.dated = np.zeros(0, dtype=np.bool_)
        self.when = np.full(0, NO_TIME, dtype=np.int64)
        self.unread = np.zeros(0, dtype=np.bool_)
        self.info: dict[int, HitInfo] = {}

    def known(
        self, ids: npt.NDArray[np.int64], seqs: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.bool_]:
        """Whether the columns hold each of `ids` at its version in `seqs`."""
        held = self.seq
        if not ids.size or int(ids.max()) < held.shape[0]:
            out: npt.NDArray[np.bool_] = held[ids] == seqs
            return out
        inside = ids < held.shape[0]
        out = np.zeros(ids.shape, dtype=np.bool_)
        out[inside] = held[ids[inside]] == seqs[inside]
        return out

    def numbers(
        self, ids: npt.NDArray[np.int64], known: npt.NDArray[np.bool_]
    ) -> npt.NDArray[np.intp]:
        """The number of the task each hit stands for; -1 for a hit of no task, or of a
        version the columns do not hold (not `known`, as `known` says)."""
        if known.all():
            every: npt.NDArray[np.intp] = self.number[ids]
            return every
        out = np.full(ids.shape, -1, dtype=np.intp)
        out[known] = self.number[ids[known]]
        return out

    def put(self, ids: list[int], seqs: list[int], infos: list[HitInfo]) -> None:
        """Record the `infos` of the versions `seqs` of the records at `ids`."""
        if not ids:
            return
        top = max(ids) + 1
        if top > self.seq.shape[0]:
            size = max(top, 2 * self.seq.shape[0])
            for name, fill in (
                ("number", -1),
                ("kind", 0),
                ("place", -1),
                ("asks", False),
                ("dated", False),
                ("when", NO_TIME),
                ("unread", False),
                ("seq", -1),  # last: a reader never sees a version without its entries
            ):
                old = getattr(self, name)
                grown = np.full(size, fill, dtype=old.dtype)
                grown[: old.shape[0]] = old
                setattr(self, name, grown)
        at = np.asarray(ids, dtype=np.intp)
        self.number[at] = [i[6] for i in infos]
        self.kind[at] = [i[7] for i in infos]
        self.place[at] = [i[1] for i in infos]
        self.asks[at] = [i[2] for i in infos]
        self.dated[at] = [bool(i[5]) for i in infos]
        self.when[at] = [micros(i[3]) if isinstance(i[3], datetime) else NO_TIME for i in infos]
        self.unread[at] = [i[3] is UNREAD for i in infos]
        self.info.update(zip(ids, infos, strict=True))
        self.seq[at] = seqs


def rows_of(
    numbers: npt.NDArray[np.intp], later: npt.NDArray[np.bool_]
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Each hit's row, the rank of its task number among those found (`np.unique`'s
    inverse), and each row's chosen hit: its first hit that is not `later` if any, else its
    first. One sort of the numbers packed with the flag and the hit's position (numpy's
    stable sorts, which `np.unique` and `np.lexsort` make, cost several)."""
    m = numbers.shape[0]
    shift = max(m - 1, 1).bit_length()
    if int(numbers.max()) >= 1 << (61 - shift):  # too large to pack
        _, rows = np.unique(numbers, return_inverse=True)
        pick = np.lexsort((np.arange(m), later, rows))
        return rows, pick[np.r_[True, rows[pick][1:] != rows[pick][:-1]]]
    packed = np.sort((((numbers.astype(np.int64) << 1) | later) << shift) | np.arange(m))
    at = packed & ((1 << shift) - 1)
    number = packed >> (shift + 1)
    start = np.empty(m, dtype=np.bool_)
    start[0] = True
    np.not_equal(number[1:], number[:-1], out=start[1:])
    rows = np.empty(m, dtype=np.intp)
    rows[at] = np.cumsum(start) - 1
    return rows, at[start].astype(np.intp)

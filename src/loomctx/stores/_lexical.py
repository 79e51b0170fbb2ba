"""The in-process BM25 index of the SQLite store, beside SQLite (which stays the truth).

Why not FTS5: an OR query ranked by FTS5's `bm25()` scores every matching row through the
auxiliary-function API, and a conversation's query of a few words matches a third of its
records, so ranking took an order of magnitude longer than a search may (docs/benchmarks.md,
"Design measurements"). Here the same ranking is flat numpy over precomputed postings (as
bm25s does): gather the query terms' postings, weight them, `bincount` into per-row scores,
keep the best (`_top.best`).

Layout. Each indexed record is a row (record id, namespace and kind codes, length, alive).
Postings are a CSR *base* (per term: rows and term frequencies, sorted by row) plus a flat
*tail* of postings added since the last merge; merging folds the tail into the base and
drops the rows of deleted or rewritten records. Merges happen when the tail or the dead rows
grow past a fraction of the index, so their cost per write stays small. Document frequencies
and the average length count live rows only, so scores never depend on when a merge ran.

Scoring is Okapi BM25 (k1 = 1.2, b = 0.75) with the non-negative IDF
``ln(1 + (N - df + 0.5) / (df + 0.5))``: every row that has a query term scores above zero.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import repeat
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from loomctx.stores._codes import Codes, row_mask
from loomctx.stores._rows import RowMap
from loomctx.stores._snapshot import read_snapshot, write_snapshot
from loomctx.stores._top import best

__all__ = ["LexicalIndex"]

K1: Final = 1.2
B: Final = 0.75
_MIN_MERGE: Final = 2_000  # tail rows (or dead rows) before a merge, at the least
_FORMAT: Final = 1  # of the side file; bump when its layout changes

_IntArray = npt.NDArray[np.int64]
_NO_IDS: Final[_IntArray] = np.empty(0, dtype=np.int64)
_NO_SCORES: Final[npt.NDArray[np.float64]] = np.empty(0, dtype=np.float64)


class LexicalIndex:
    """BM25 over the analyzed text of records, filtered by namespace prefix and kind."""

    def __init__(self, *, capacity: int = 1024) -> None:
        self.dirty = False  # changed since it was last saved to (or loaded from) a side file
        self._vocab: dict[str, int] = {}
        self._df: list[int] = []
        self._ns_codes = Codes()
        self._kind_codes = Codes()
        self._row = RowMap()
        self._n = 0
        self._live = 0
        self._total_len = 0
        capacity = max(capacity, 16)
        self._ids = np.empty(capacity, dtype=np.int64)
        self._ns = np.empty(capacity, dtype=np.int32)
        self._kind = np.empty(capacity, dtype=np.int32)
        self._len = np.zeros(capacity, dtype=np.float32)
        self._alive = np.zeros(capacity, dtype=np.bool_)
        # Base postings: term t's rows are _rows[_offsets[t] : _offsets[t + 1]].
        self._offsets = np.zeros(1, dtype=np.int64)
        self._rows = np.empty(0, dtype=np.int32)
        self._tfs = np.empty(0, dtype=np.float32)
        # Tail postings, unordered: (term, row, tf) triples in growable arrays, and where
        # each term's are (so a query reads only its own terms' postings).
        self._tail_by_term: dict[int, list[int]] = {}
        self._tail_n = 0
        self._tail_rows_added = 0
        self._tail = np.empty((3, 4096), dtype=np.int64)

    @property
    def count(self) -> int:
        """Live (indexed, not deleted) records."""
        return self._live

    # --- writes -------------------------------------------------------------------------------

    def add(self, record_id: int, namespace: str, kind: str, terms: Sequence[str]) -> None:
        """Index a record that is not in the index (`remove` it first if it is)."""
        if not terms:
            return
        row = self._n
        self._grow_rows(row + 1)
        self._n += 1
        self._row.set(record_id, row)
        self._ids[row] = record_id
        self._ns[row] = self._ns_codes.code(namespace)
        self._kind[row] = self._kind_codes.code(kind)
        self._len[row] = len(terms)
        self._alive[row] = True
        self._live += 1
        self._total_len += len(terms)
        counts = Counter(terms)
        start = self._tail_n
        end = start + len(counts)
        self._grow_tail(end)
        vocab, df, by_term = self._vocab, self._df, self._tail_by_term
        term_ids = []
        for position, term in enumerate(counts, start):
            term_id = vocab.get(term)
            if term_id is None:
                term_id = vocab[term] = len(df)
                df.append(0)
            df[term_id] += 1
            term_ids.append(term_id)
            by_term.setdefault(term_id, []).append(position)
        self._tail[0, start:end] = term_ids
        self._tail[1, start:end] = row
        self._tail[2, start:end] = list(counts.values())
        self._tail_n = end
        self._tail_rows_added += 1
        self.dirty = True
        if self._tail_rows_added >= max(_MIN_MERGE, self._live // 8):
            self.merge()

    def remove(self, record_id: int, terms: Iterable[str]) -> None:
        """Unindex a record; `terms` are those it was indexed with (its text's terms)."""
        row = self._row.pop(record_id)
        if row is None:
            return
        self._alive[row] = False
        self._live -= 1
        self._total_len -= int(self._len[row])
        for term in set(terms):
            self._df[self._vocab[term]] -= 1
        self.dirty = True
        if self._n - self._live >= max(_MIN_MERGE, self._live // 4):
            self.merge()

    def set_kind(self, record_id: int, kind: str) -> None:
        """Record that an indexed record's kind changed (its text did not)."""
        row = self._row.get(record_id)
        if row is not None:
            self._kind[row] = self._kind_codes.code(kind)
            self.dirty = True

    def _grow_rows(self, needed: int) -> None:
        capacity = len(self._ids)
        if needed <= capacity:
            return
        capacity = max(needed, capacity + capacity // 2)
        for name in ("_ids", "_ns", "_kind", "_len", "_alive"):
            old = getattr(self, name)
            new = np.zeros(capacity, dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)

    def _grow_tail(self, needed: int) -> None:
        capacity = self._tail.shape[1]
        if needed > capacity:
            tail = np.empty((3, max(needed, 2 * capacity)), dtype=np.int64)
            tail[:, : self._tail_n] = self._tail[:, : self._tail_n]
            self._tail = tail

    def merge(self) -> None:
        """Fold the tail into the base postings and drop dead rows (renumbering the rest)."""
        n = self._n
        keep = np.flatnonzero(self._alive[:n])
        renumber = np.full(max(n, 1), -1, dtype=np.int64)
        renumber[keep] = np.arange(len(keep))
        base_terms = np.repeat(
            np.arange(len(self._offsets) - 1, dtype=np.int64), np.diff(self._offsets)
        )
        tail = self._tail[:, : self._tail_n]
        terms = np.concatenate([base_terms, tail[0]])
        rows = renumber[np.concatenate([self._rows.astype(np.int64), tail[1]])]
        tfs = np.concatenate([self._tfs, tail[2].astype(np.float32)])
        live = rows >= 0
        self._set_postings(terms[live], rows[live], tfs[live])
        for name in ("_ids", "_ns", "_kind", "_len"):
            array = getattr(self, name)
            array[: len(keep)] = array[keep]
        self._alive[:n] = False
        self._alive[: len(keep)] = True
        self._n = len(keep)
        self._row = RowMap(self._ids[: self._n])
        self._tail_n = 0
        self._tail_by_term = {}
        self._tail_rows_added = 0

    def _set_postings(
        self, terms: _IntArray, rows: _IntArray, tfs: npt.NDArray[np.float32]
    ) -> None:
        order = np.lexsort((rows, terms))
        self._rows = rows[order].astype(np.int32)
        self._tfs = tfs[order]
        counts = np.bincount(terms, minlength=len(self._df))
        self._offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    # --- search -------------------------------------------------------------------------------

    def search(
        self,
        terms: Sequence[str],
        *,
        prefix: str,
        kind: str | None,
        limit: int,
        exact: bool = False,
    ) -> list[tuple[int, float]]:
        """`top` as (record id, BM25 score) pairs."""
        ids, scores = self.top(terms, prefix=prefix, kind=kind, limit=limit, exact=exact)
        return list(zip(ids.tolist(), scores.tolist(), strict=True))

    def top(
        self,
        terms: Sequence[str],
        *,
        prefix: str,
        kind: str | None,
        limit: int,
        exact: bool = False,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """The record ids and BM25 scores of up to `limit` records, best first (ties: older
        record first), having any of `terms`, under `prefix` (an encoded namespace prefix,
        "" for all; exactly that namespace if `exact`) and of `kind` (any if None)."""
        term_ids = [self._vocab[t] for t in dict.fromkeys(terms) if t in self._vocab]
        n = self._n
        if not term_ids or limit <= 0 or self._live == 0:
            return _NO_IDS, _NO_SCORES
        mask = row_mask(
            self._ns_codes,
            self._ns[:n],
            self._kind_codes,
            self._kind[:n],
            prefix=prefix,
            kind=kind,
            exact=exact,
        )
        if mask is False:
            return _NO_IDS, _NO_SCORES
        rows, tfs, weights = self._postings(term_ids)
        if len(rows) == 0:
            return _NO_IDS, _NO_SCORES
        average = self._total_len / self._live
        norm = K1 * (1 - B + B * self._len[rows] / average)
        scores = np.bincount(rows, weights * tfs * (K1 + 1) / (tfs + norm), minlength=n)
        hit = scores > 0
        if self._live < n:  # else every row is alive
            hit &= self._alive[:n]
        if mask is not True:
            hit &= mask
        candidates = np.flatnonzero(hit)
        candidates = candidates[best(scores[candidates], self._ids[candidates], limit)]
        ids = self._ids[candidates]
        found = scores[candidates]
        order = np.lexsort((ids, -found))
        return ids[order].astype(np.int64, copy=False), found[order].astype(np.float64, copy=False)

    def _postings(
        self, term_ids: list[int]
    ) -> tuple[_IntArray, npt.NDArray[np.float32], npt.NDArray[np.float64]]:
        """Rows, term frequencies and IDF weights of every posting of `term_ids`: the base
        postings of each term in turn, then the tail's (the order `bincount` sums in)."""
        df = np.array([self._df[t] for t in term_ids], dtype=np.int64)
        idf = np.log(1 + (self._live - df + 0.5) / (df + 0.5))  # one per term, as float64
        parts_rows: list[npt.NDArray[Any]] = []
        parts_tfs: list[npt.NDArray[Any]] = []
        weighted: list[int] = []  # per part: the position of its term in `term_ids`
        lengths: list[int] = []
        # Each term's base postings (none for a term first seen since the last merge).
        base_terms = len(self._offsets) - 1
        ids = np.array(term_ids, dtype=np.int64)
        starts = self._offsets[np.minimum(ids, base_terms)].tolist()
        stops = self._offsets[np.minimum(ids + 1, base_terms)].tolist()
        for i, (lo, hi) in enumerate(zip(starts, stops, strict=True)):
            if hi > lo:
                parts_rows.append(self._rows[lo:hi])
                parts_tfs.append(self._tfs[lo:hi])
                weighted.append(i)
                lengths.append(hi - lo)
        for i, t in enumerate(term_ids):
            positions = self._tail_by_term.get(t)
            if positions:
                parts_rows.append(self._tail[1, positions])
                parts_tfs.append(self._tail[2, positions].astype(np.float32))
                weighted.append(i)
                lengths.append(len(positions))
        if not parts_rows:
            empty = np.empty(0)
            return empty.astype(np.int64), empty.astype(np.float32), empty
        return (
            np.concatenate(parts_rows).astype(np.int64, copy=False),
            np.concatenate(parts_tfs),
            np.repeat(idf[weighted], lengths),
        )

    # --- bulk load and side files ---------------------------------------------------------

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[int, str, str, Sequence[str]]]) -> LexicalIndex:
        """An index of `rows` (record id, namespace, kind, terms), built in one pass."""
        index = cls()
        vocab = index._vocab
        # Machine integers, not lists of int objects: 8 bytes a posting instead of ~40.
        terms_flat = array("q")
        rows_flat = array("q")
        for record_id, namespace, kind, terms in rows:
            if not terms:
                continue
            row = index._n
            index._grow_rows(row + 1)
            index._n += 1
            index._ids[row] = record_id
            index._ns[row] = index._ns_codes.code(namespace)
            index._kind[row] = index._kind_codes.code(kind)
            index._len[row] = len(terms)
            index._alive[row] = True
            index._total_len += len(terms)
            for term in terms:
                term_id = vocab.get(term)
                if term_id is None:
                    term_id = vocab[term] = len(vocab)
                terms_flat.append(term_id)
            rows_flat.extend(repeat(row, len(terms)))
        index._live = index._n
        index._row = RowMap(index._ids[: index._n])
        if terms_flat:
            # One posting per (term, row), its count being the term frequency.
            keys = np.frombuffer(terms_flat, dtype=np.int64) * max(index._n, 1)
            keys += np.frombuffer(rows_flat, dtype=np.int64)
            unique, tf = np.unique(keys, return_counts=True)
            posting_terms = unique // max(index._n, 1)
            index._df = np.bincount(posting_terms, minlength=len(vocab)).tolist()
            index._set_postings(posting_terms, unique % max(index._n, 1), tf.astype(np.float32))
        index.dirty = True
        return index

    def save(self, path: Path, *, stamp: dict[str, Any]) -> None:
        """Write the merged index to `path` atomically, with `stamp` (what it must match in
        SQLite to be reused)."""
        self.merge()
        n = self._n
        manifest = {
            "format": _FORMAT,
            **stamp,
            "vocab": list(self._vocab),
            "namespaces": self._ns_codes.names,
            "kinds": self._kind_codes.names,
            "total_len": self._total_len,
        }
        write_snapshot(
            path,
            manifest,
            {
                "ids": self._ids[:n],
                "namespaces": self._ns[:n],
                "kinds": self._kind[:n],
                "lengths": self._len[:n],
                "df": np.array(self._df, dtype=np.int64),
                "offsets": self._offsets,
                "rows": self._rows,
                "tfs": self._tfs,
            },
        )
        self.dirty = False

    @classmethod
    def load(cls, path: Path, *, stamp: dict[str, Any]) -> LexicalIndex | None:
        """The index saved at `path` if its stamp equals `stamp`, else None."""
        found = read_snapshot(path, {"format": _FORMAT, **stamp})
        if found is None:
            return None  # missing, truncated, foreign or stale: rebuilt from SQLite
        manifest, saved = found
        n = len(saved["ids"])
        index = cls(capacity=n)
        index._ids[:n] = saved["ids"]
        index._ns[:n] = saved["namespaces"]
        index._kind[:n] = saved["kinds"]
        index._len[:n] = saved["lengths"]
        index._df = saved["df"].tolist()
        index._offsets = saved["offsets"]
        index._rows = saved["rows"]
        index._tfs = saved["tfs"]
        index._alive[:n] = True
        index._n = index._live = n
        index._total_len = int(manifest["total_len"])
        index._row = RowMap(index._ids[:n])
        index._vocab = {term: term_id for term_id, term in enumerate(manifest["vocab"])}
        index._ns_codes = Codes(manifest["namespaces"])
        index._kind_codes = Codes(manifest["kinds"])
        return index

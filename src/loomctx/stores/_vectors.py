"""The in-process vector index of one embedding model, beside SQLite (which stays the truth).

Rows are unit-normalised float32 vectors with, per row, the record id and codes for the
record's namespace and kind, so that a namespace prefix or a kind becomes an exact boolean
mask over rows (DESIGN.md invariant 6 never depends on an approximation).

Search is exact (one matrix-vector product and a partition) while the candidate rows are
few enough to score cheaply (`EXACT_ROWS`). Above that, scoring every float32 row is memory
bound and slower than a search may be. So a first pass ranks rows by the Hamming distance of
their sign bits (1 bit per dimension, 1/32 of the bytes, `np.bitwise_count`), and the best
`RERANK` rows are then scored exactly. On clustered vectors, as real embeddings are, the
shortlist finds the exact top k, and on random vectors (the hard case) more of it than the
approximate indexes of faiss and usearch did, with nothing to build; those measurements, and
the variants tried and not kept, are in docs/benchmarks.md ("Design measurements").

The sign bits are taken around the mean vector (embedding models do not centre their output
at zero), computed when the bits are first needed.

Past `CODES_FROM` rows each vector is held as int16 codes with one float32 scale per row
(symmetric: code = round(v / max|v| * 32767)), half the bytes of float32. Scores are computed
from the codes, converted to float32 `_CHUNK` rows at a time (chunks that stay in the cache)
and multiplied by the row's scale. A score moves by at most sqrt(dim) * max|v| / 65534
(3e-4 at 384-d), so a ranking changes only between near-ties, and scoring the shortlist gets
faster, as it reads half the bytes. int8 codes lost retrieval quality. Below `CODES_FROM`
rows memory does not matter, and float32 rows are scored in place without a conversion.

Rows are removed by moving the last row into the hole, so arrays stay dense.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final, TypeVar

import numpy as np
import numpy.typing as npt

from loomctx.stores._codes import Codes, row_mask
from loomctx.stores._rows import RowMap
from loomctx.stores._snapshot import read_snapshot, write_snapshot
from loomctx.stores._top import best

__all__ = ["CODES_FROM", "EXACT_ROWS", "RERANK", "VectorIndex"]

EXACT_ROWS: Final = 16_384
"""Up to this many rows, search scores every one exactly (cheap at 384-d); above, a
selection of at most `RERANK` rows (a small namespace) is still scored exactly."""

RERANK: Final = 2048
"""Rows the sign-bit pass hands to exact scoring (at least 32 per requested hit)."""

CODES_FROM: Final = 16_384
"""An index that grows past this many rows (or is built or loaded with more) holds int16
codes instead of float32 vectors; tests set it to 0 to run the code path on small indexes."""

_FORMAT: Final = 2  # of the side files; bump when their layout changes (2: int16 codes)
_CHUNK: Final = 1024  # rows converted from codes to float32 at a time (stays in cache)
_SCALE: Final = 32767  # the largest code
_NO_IDS: Final[npt.NDArray[np.int64]] = np.empty(0, dtype=np.int64)
_NO_SCORES: Final[npt.NDArray[np.float64]] = np.empty(0, dtype=np.float64)


class VectorIndex:
    """Unit vectors of one model, searchable by cosine similarity under a namespace mask.

    `count` and `high_seq` mirror the model's row in SQLite's ``vector_sets`` as long as every
    change goes through `upsert` / `remove` / `touch`; a mismatch means the index is stale."""

    def __init__(self, model: str, dim: int, *, capacity: int = 64) -> None:
        self.model = model
        self.dim = dim
        self.high_seq = 0
        self.dirty = False  # changed since it was last saved to (or loaded from) a side file
        self._n = 0
        capacity = max(capacity, 16)
        # float32 unit vectors; or, past `CODES_FROM`, int16 codes with `_scales` (per row,
        # the float32 value of code 1).
        self._vecs: npt.NDArray[np.float32] | npt.NDArray[np.int16]
        self._scales: npt.NDArray[np.float32] | None = None
        if capacity > CODES_FROM:
            self._vecs = np.empty((capacity, dim), dtype=np.int16)
            self._scales = np.empty(capacity, dtype=np.float32)
        else:
            self._vecs = np.empty((capacity, dim), dtype=np.float32)
        self._ids = np.empty(capacity, dtype=np.int64)
        self._ns = np.empty(capacity, dtype=np.int32)
        self._kind = np.empty(capacity, dtype=np.int32)
        self._row = RowMap()
        self._ns_codes = Codes()
        self._kind_codes = Codes()
        # Sign bits around `_center`, built on first need; transposed (one contiguous array
        # of rows per 64-bit word) so the Hamming pass reads memory in order.
        self._center: npt.NDArray[np.float32] | None = None
        self._bits: npt.NDArray[np.uint64] | None = None

    @property
    def count(self) -> int:
        """Rows in the index."""
        return self._n

    # --- writes -------------------------------------------------------------------------------

    def upsert(
        self, record_id: int, vector: npt.NDArray[np.float32], namespace: str, kind: str, seq: int
    ) -> None:
        """Insert or replace the vector of `record_id` (`vector` need not be normalised)."""
        row = self._row.get(record_id)
        if row is None:
            row = self._n
            self._grow(row + 1)
            self._n += 1
            self._row.set(record_id, row)
            self._ids[row] = record_id
        self._put(row, _normalise(vector.reshape(1, -1)))
        self._ns[row] = self._ns_codes.code(namespace)
        self._kind[row] = self._kind_codes.code(kind)
        if self._bits is not None:
            self._bits[:, row] = self._signs(self._units(row, row + 1))[0]
        self.high_seq = max(self.high_seq, seq)
        self.dirty = True

    def touch(self, record_id: int, kind: str, seq: int) -> None:
        """Record that `record_id`'s kind is now `kind` (its vector was kept, at `seq`)."""
        row = self._row.get(record_id)
        if row is not None:
            self._kind[row] = self._kind_codes.code(kind)
            self.high_seq = max(self.high_seq, seq)
            self.dirty = True

    def remove(self, record_id: int) -> None:
        """Drop the vector of `record_id`, if any."""
        row = self._row.pop(record_id)
        if row is None:
            return
        last = self._n - 1
        if row != last:
            moved = int(self._ids[last])
            self._row.set(moved, row)
            for array in (self._vecs, self._scales, self._ids, self._ns, self._kind):
                if array is not None:
                    array[row] = array[last]
            if self._bits is not None:
                self._bits[:, row] = self._bits[:, last]
        self._n = last
        self.dirty = True

    def _grow(self, needed: int) -> None:
        capacity = len(self._ids)
        if needed <= capacity:
            return
        capacity = max(needed, capacity + capacity // 2)
        if self._scales is None and needed > CODES_FROM:
            self._to_codes(capacity)
        else:
            self._vecs = _resized(self._vecs, capacity)
            if self._scales is not None:
                self._scales = _resized(self._scales, capacity)
        self._ids = _resized(self._ids, capacity)
        self._ns = _resized(self._ns, capacity)
        self._kind = _resized(self._kind, capacity)
        if self._bits is not None:
            bits = np.empty((self._bits.shape[0], capacity), dtype=np.uint64)
            bits[:, : self._bits.shape[1]] = self._bits
            self._bits = bits

    def _to_codes(self, capacity: int) -> None:
        """Switch to int16 codes, in arrays of `capacity` rows, a chunk of rows at a time."""
        floats = self._vecs
        self._vecs = np.empty((capacity, self.dim), dtype=np.int16)
        self._scales = np.empty(capacity, dtype=np.float32)
        for start in range(0, self._n, _CHUNK):
            self._put(start, floats[start : min(self._n, start + _CHUNK)])  # type: ignore[arg-type]

    def _put(self, start: int, units: npt.NDArray[np.float32]) -> None:
        """Store `units` (unit vectors) in the rows from `start` on."""
        stop = start + len(units)
        if self._scales is None:
            self._vecs[start:stop] = units
            return
        peaks = np.abs(units).max(axis=1)
        peaks[peaks == 0] = 1  # a zero vector: zero codes
        self._vecs[start:stop] = np.rint(units * (_SCALE / peaks)[:, None])
        self._scales[start:stop] = peaks / _SCALE

    def _units(self, start: int, stop: int) -> npt.NDArray[np.float32]:
        """The vectors of rows `start` to `stop` as float32 (decoded, if held as codes)."""
        if self._scales is None:
            return self._vecs[start:stop]  # type: ignore[return-value]
        units: npt.NDArray[np.float32] = self._vecs[start:stop].astype(np.float32)
        units *= self._scales[start:stop, None]
        return units

    def _scores(
        self, unit: npt.NDArray[np.float32], rows: npt.NDArray[np.intp] | None
    ) -> npt.NDArray[np.float32]:
        """Cosine similarity of `unit` with `rows` (every row if None), in that order."""
        if self._scales is None:
            floats = self._vecs[: self._n] if rows is None else self._vecs[rows]
            return _dot(floats, unit)  # type: ignore[arg-type]  # float32 without scales
        total = self._n if rows is None else len(rows)
        scores = np.empty(total, dtype=np.float32)
        for start in range(0, total, _CHUNK):
            stop = min(total, start + _CHUNK)
            part = slice(start, stop) if rows is None else rows[start:stop]
            scores[start:stop] = _dot(self._vecs[part].astype(np.float32), unit)
            scores[start:stop] *= self._scales[part]
        return scores

    # --- search -------------------------------------------------------------------------------

    def search(
        self,
        query: npt.NDArray[np.float32],
        *,
        prefix: str,
        kind: str | None,
        limit: int,
        exact: bool = False,
    ) -> list[tuple[int, float]]:
        """`top` as (record id, cosine similarity) pairs."""
        ids, scores = self.top(query, prefix=prefix, kind=kind, limit=limit, exact=exact)
        return list(zip(ids.tolist(), scores.tolist(), strict=True))

    def top(
        self,
        query: npt.NDArray[np.float32],
        *,
        prefix: str,
        kind: str | None,
        limit: int,
        exact: bool = False,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """The record ids and cosine similarities of up to `limit` rows, best first (ties by
        id), among rows whose namespace starts with `prefix` (an encoded namespace prefix, ""
        for all; is that namespace, if `exact`) and whose kind is `kind` (any if None)."""
        n = self._n
        if n == 0 or limit <= 0:
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
        unit = _normalise(query.reshape(1, -1))[0]
        rows: npt.NDArray[np.intp] | None = None
        only: npt.NDArray[np.bool_] | None = None  # the rows searched, if not every row
        selected = n
        if mask is not True:
            rows = np.flatnonzero(mask)
            selected = len(rows)
            if selected == 0:
                return _NO_IDS, _NO_SCORES
            if selected == n:  # every row (one namespace, searched exactly): read in place
                rows = None
            else:
                only = mask
        want = max(RERANK, 32 * limit)
        if n <= EXACT_ROWS:  # score every row in place (no copy), keep the selected ones
            if rows is None:
                return self._top(None, self._scores(unit, None), limit)
            candidates = rows
            scores = self._scores(unit, None)[candidates]
        elif rows is not None and selected <= want:  # few rows: copy them out, score exactly
            candidates = rows
            scores = self._scores(unit, rows)
        else:
            candidates = self._shortlist(unit, only, want)
            scores = self._scores(unit, candidates)
        return self._top(candidates, scores, limit)

    def _shortlist(
        self, unit: npt.NDArray[np.float32], mask: npt.NDArray[np.bool_] | None, want: int
    ) -> npt.NDArray[np.intp]:
        """About `want` rows (of `mask`) nearest to `unit` by the Hamming distance of their
        sign bits."""
        bits = self._ensure_bits()
        n = self._n
        qbits = self._signs(unit.reshape(1, -1))[0]
        # One contiguous pass per 64-bit word beats a row-wise sum over 6 words.
        distance = np.bitwise_count(bits[0, :n] ^ qbits[0]).astype(np.uint16)
        for word in range(1, bits.shape[0]):
            distance += np.bitwise_count(bits[word, :n] ^ qbits[word])
        if mask is not None:
            distance[~mask] = np.iinfo(np.uint16).max
        # The `want`-th smallest distance by counting (cheaper than argpartition on 100k).
        histogram = np.bincount(distance, minlength=self.dim + 2)[: self.dim + 1]
        cutoff = int(np.searchsorted(np.cumsum(histogram), want))
        chosen = np.flatnonzero(distance <= cutoff)
        if len(chosen) > 2 * want:  # many ties at the cutoff: keep the nearest `want`
            chosen = chosen[best(distance[chosen], chosen, want, highest=False)]
        return chosen

    def _ensure_bits(self) -> npt.NDArray[np.uint64]:
        if self._bits is None:
            n = self._n
            total = np.zeros(self.dim, dtype=np.float64)
            for start in range(0, n, _CHUNK):  # bound the decoded and boolean temporaries
                total += self._units(start, min(n, start + _CHUNK)).sum(axis=0)
            self._center = (total / max(n, 1)).astype(np.float32)
            bits = np.empty((_words(self.dim), len(self._ids)), dtype=np.uint64)
            for start in range(0, n, _CHUNK):
                stop = min(n, start + _CHUNK)
                bits[:, start:stop] = self._signs(self._units(start, stop)).T
            self._bits = bits
        return self._bits

    def _signs(self, units: npt.NDArray[np.float32]) -> npt.NDArray[np.uint64]:
        assert self._center is not None
        packed = np.packbits(units > self._center, axis=1)
        width = _words(self.dim) * 8
        if packed.shape[1] != width:
            packed = np.pad(packed, ((0, 0), (0, width - packed.shape[1])))
        return np.ascontiguousarray(packed).view(np.uint64)

    def _top(
        self, rows: npt.NDArray[np.intp] | None, scores: npt.NDArray[np.float32], limit: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """The `limit` best of `rows` (None: every row, read in place) by their `scores`."""
        ids = self._ids[: self._n] if rows is None else self._ids[rows]
        keep = best(scores, ids, limit)
        ids, scores = ids[keep], scores[keep]
        order = np.lexsort((ids, -scores))
        # float32 -> float64 is exact: the scores `float()` gave one at a time
        return ids[order].astype(np.int64, copy=False), scores[order].astype(np.float64)

    # --- bulk load and side files ---------------------------------------------------------

    @classmethod
    def from_rows(
        cls,
        model: str,
        dim: int,
        rows: Iterable[tuple[int, str, str, bytes, int]],
        *,
        expected: int,
    ) -> VectorIndex:
        """An index of `rows` (record id, namespace, kind, float32 vector bytes, seq), its
        vectors normalised (and encoded) a chunk at a time: building holds no second copy."""
        index = cls(model, dim, capacity=expected)
        blobs: list[bytes] = []
        for record_id, namespace, kind, blob, seq in rows:
            row = index._n
            index._grow(row + 1)
            index._n += 1
            index._ids[row] = record_id
            index._ns[row] = index._ns_codes.code(namespace)
            index._kind[row] = index._kind_codes.code(kind)
            index.high_seq = max(index.high_seq, seq)
            blobs.append(blob)
            if len(blobs) == _CHUNK:
                index._put_blobs(index._n - len(blobs), blobs)
                blobs = []
        index._put_blobs(index._n - len(blobs), blobs)
        index._row = RowMap(index._ids[: index._n])
        index.dirty = True
        return index

    def _put_blobs(self, start: int, blobs: list[bytes]) -> None:
        if blobs:
            raw = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), self.dim)
            self._put(start, _normalise(raw))

    def save(self, path: Path, *, store_id: str) -> None:
        """Write the index to `path` atomically (a temporary file, then a rename)."""
        n = self._n
        manifest = {
            "format": _FORMAT,
            "store_id": store_id,
            "model": self.model,
            "dim": self.dim,
            "count": n,
            "high_seq": self.high_seq,
            "namespaces": self._ns_codes.names,
            "kinds": self._kind_codes.names,
        }
        write_snapshot(
            path,
            manifest,
            {
                "vectors": self._vecs[:n],  # float32, or int16 codes with their scales
                **({} if self._scales is None else {"scales": self._scales[:n]}),
                "ids": self._ids[:n],
                "namespaces": self._ns[:n],
                "kinds": self._kind[:n],
            },
        )
        self.dirty = False

    @classmethod
    def load(
        cls, path: Path, *, store_id: str, model: str, dim: int, count: int, high_seq: int
    ) -> VectorIndex | None:
        """The index saved at `path` if it is this store's and current (its model, dim, count
        and high-water seq match SQLite's), else None: the caller rebuilds from SQLite."""
        expected = {"format": _FORMAT, "store_id": store_id, "model": model, "dim": dim,
                    "count": count, "high_seq": high_seq}  # fmt: skip
        found = read_snapshot(path, expected)
        if found is None:
            return None  # missing, truncated, foreign or stale: rebuilt from SQLite
        manifest, saved = found
        vectors, scales = saved["vectors"], saved.get("scales")
        coded = np.dtype(np.int16) if scales is not None else np.dtype(np.float32)
        if vectors.shape != (count, dim) or vectors.dtype != coded:
            return None  # arrays that disagree with their manifest: rebuilt from SQLite
        index = cls(model, dim, capacity=0)
        # The arrays read are used as they are (no copy to hold twice), in the form they were
        # saved in: float32, or codes with their scales.
        index._vecs = vectors
        index._scales = scales
        index._ids = saved["ids"]
        index._ns = saved["namespaces"]
        index._kind = saved["kinds"]
        index._n = count
        index.high_seq = high_seq
        index._row = RowMap(index._ids)
        index._ns_codes = Codes(manifest["namespaces"])
        index._kind_codes = Codes(manifest["kinds"])
        return index


def _dot(vecs: npt.NDArray[np.float32], unit: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    # einsum's own SIMD loop, not BLAS: a threaded sgemv waits for worker threads to wake,
    # which on a busy machine made the product several times slower.
    scores: npt.NDArray[np.float32] = np.einsum("ij,j->i", vecs, unit)
    return scores


def _words(dim: int) -> int:
    return (dim + 63) // 64


def _normalise(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    vectors = np.asarray(vectors, dtype=np.float32)
    # What `np.linalg.norm(vectors, axis=1, keepdims=True)` computes, to the bit, without
    # its argument handling (a search normalises its query on every call).
    norms = np.sqrt(np.add.reduce(vectors * vectors, axis=1, keepdims=True))
    norms[norms == 0] = 1  # a zero vector stays zero: it scores 0 against everything
    unit: npt.NDArray[np.float32] = (vectors / norms).astype(np.float32, copy=False)
    return unit


_Array = TypeVar("_Array", bound="np.ndarray[Any, Any]")


def _resized(array: _Array, length: int) -> _Array:
    out: _Array = np.empty((length, *array.shape[1:]), dtype=array.dtype)  # type: ignore[assignment]
    out[: len(array)] = array
    return out

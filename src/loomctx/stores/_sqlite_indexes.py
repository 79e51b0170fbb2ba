"""The in-process indexes beside SQLite, as a part of `SQLiteStore`.

SQLite holds every record and vector; search runs on a lexical index and one vector index
per embedding model, built from it on first use (`loomctx.stores._lexical`,
`loomctx.stores._vectors`). This mixin finds them: in memory, else from their side files
(``<file>.index/``) if those still match SQLite, else rebuilt from SQLite, inside the batch
that needs them (so a rollback drops what it loaded: `SQLiteBatch.touched_*`). It notices
other connections' commits (``PRAGMA data_version``) and saves what changed on close.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loomctx.stores._dispatch import BatchState
from loomctx.stores._lexical import LexicalIndex
from loomctx.stores._rows import SeqsById
from loomctx.stores._vectors import VectorIndex
from loomctx.stores.base import Record
from loomctx.text import terms

__all__ = ["SQLiteBatch", "SideIndexes"]


@dataclass(slots=True)
class SQLiteBatch(BatchState):
    """What one `batch` call changes, to undo in memory if its transaction rolls back."""

    touched_models: set[str] = field(default_factory=set)  # vector indexes changed or loaded
    touched_lexical: bool = False


class SideIndexes:
    """The indexes of a `SQLiteStore` and how they are loaded, checked and saved."""

    _store_id: str
    _analyzer: str
    _data_version: int
    _index_dir: Path | None
    _lexical: LexicalIndex | None
    _vectors: dict[str, VectorIndex]
    _records: OrderedDict[int, Record]
    _seq_of: SeqsById
    # "lexical" or a model -> "file" | "sqlite": where its index was last loaded from
    _index_origin: dict[str, str]

    def _lexical_index(self, conn: sqlite3.Connection, state: SQLiteBatch) -> LexicalIndex:
        """The lexical index: in memory, else from its side file if current, else SQLite."""
        if self._lexical is not None:
            return self._lexical
        state.touched_lexical = True  # built inside this batch's transaction
        index = None
        if self._index_dir is not None:
            index = LexicalIndex.load(
                self._index_dir / "lexical.npz", stamp=self._lexical_stamp(conn)
            )
        if index is not None:
            self._index_origin["lexical"] = "file"
        else:
            rows = conn.execute("SELECT id, namespace, kind, text FROM records WHERE text != ''")
            index = LexicalIndex.from_rows(
                (record_id, namespace, kind, terms(text))
                for record_id, namespace, kind, text in rows
            )
            self._index_origin["lexical"] = "sqlite"
        self._lexical = index
        return index

    def _lexical_stamp(self, conn: sqlite3.Connection) -> dict[str, Any]:
        """What a saved lexical index must have been made from to be reused."""
        count, high_seq = conn.execute(
            "SELECT count(*), coalesce(max(seq), 0) FROM records"
        ).fetchone()
        return {
            "store_id": self._store_id,
            "analyzer": self._analyzer,
            "count": count,
            "high_seq": high_seq,
        }

    @staticmethod
    def _model_dim(conn: sqlite3.Connection, model: str) -> int | None:
        row = conn.execute(
            "SELECT dim FROM vector_sets WHERE model = ? AND count > 0", (model,)
        ).fetchone()
        return None if row is None else int(row[0])

    def _vector_index(
        self, conn: sqlite3.Connection, state: SQLiteBatch, model: str, dim: int
    ) -> VectorIndex:
        """The model's index: in memory, else from its side file if current, else SQLite."""
        index = self._vectors.get(model)
        if index is not None:
            return index
        state.touched_models.add(model)  # built inside this batch's transaction
        count, high_seq = conn.execute(
            "SELECT count, high_seq FROM vector_sets WHERE model = ?", (model,)
        ).fetchone()
        loaded = None
        path = self._vector_path(model)
        if path is not None:
            loaded = VectorIndex.load(
                path,
                store_id=self._store_id,
                model=model,
                dim=dim,
                count=count,
                high_seq=high_seq,
            )
        if loaded is not None:
            self._index_origin[model] = "file"
        else:
            rows = conn.execute(
                "SELECT v.record_id, r.namespace, r.kind, v.vector, v.seq FROM vectors AS v "
                "JOIN records AS r ON r.id = v.record_id WHERE v.model = ?",
                (model,),
            )
            loaded = VectorIndex.from_rows(model, dim, rows, expected=count)
            self._index_origin[model] = "sqlite"
        self._vectors[model] = loaded
        return loaded

    def _vector_path(self, model: str) -> Path | None:
        if self._index_dir is None:
            return None
        name = hashlib.blake2b(model.encode(), digest_size=12).hexdigest()
        return self._index_dir / f"vectors-{name}.npz"

    def _check_external_writes(self, conn: sqlite3.Connection) -> None:
        """Drop indexes that another connection's commits made stale."""
        (version,) = conn.execute("PRAGMA data_version").fetchone()
        if version == self._data_version:
            return
        self._data_version = version
        self._lexical = None  # cheaper to rebuild than to find what changed
        self._records.clear()
        self._seq_of.clear()
        current = {
            model: (count, high_seq)
            for model, count, high_seq in conn.execute(
                "SELECT model, count, high_seq FROM vector_sets"
            )
        }
        for model, index in list(self._vectors.items()):
            if current.get(model) != (index.count, index.high_seq):
                del self._vectors[model]

    def _save_indexes(self, conn: sqlite3.Connection) -> None:
        """Save the indexes that changed since loaded, if they still match SQLite."""
        assert self._index_dir is not None
        # Only caches: if one cannot be written, the next open rebuilds it from SQLite.
        with contextlib.suppress(OSError, sqlite3.Error):
            conn.execute("BEGIN")
            try:
                stamp = self._lexical_stamp(conn)  # also starts the snapshot checked below
                self._check_external_writes(conn)
            finally:
                conn.execute("COMMIT")
            for model, index in self._vectors.items():
                path = self._vector_path(model)
                if path is not None and index.dirty:
                    index.save(path, store_id=self._store_id)
            if self._lexical is not None and self._lexical.dirty:
                self._lexical.save(self._index_dir / "lexical.npz", stamp=stamp)

"""`SQLiteStore`: the embedded default `MemoryStore`, one SQLite file and no server.

Durability. The file runs in WAL mode. With ``durability="normal"`` (``synchronous=NORMAL``)
a transaction that committed, that is a `batch` that returned, survives a crash of the
process (SIGKILL included); the last transactions may be lost if the machine loses power.
``durability="full"`` (``synchronous=FULL``) syncs the log on every commit, so commits also
survive power loss, at the cost of one disk sync per `batch`. ``":memory:"`` gives a private
in-memory store for tests: nothing of it is durable.

Concurrency. The store holds one connection, guarded by a lock, so it may be shared between
threads; `abatch` runs `batch` in a worker thread and never blocks the event loop. Other
processes may open the same file (``busy_timeout`` waits for their write lock); the
in-process indexes notice their commits (``PRAGMA data_version``) and reload.

Indexes beside SQLite. SQLite holds every record and vector and is the only truth. Search
runs on two in-process indexes built from it on first use and kept up to date by every
write, in the same `batch` (so a record is searchable as soon as `batch` returns):

- lexical: BM25 over the terms of `loomctx.text.terms` (English words, CJK bigrams), a query
  being an OR of its terms (`loomctx.stores._lexical`; FTS5 measured 47 ms at 100k records);
- vectors: cosine similarity per embedding model (`loomctx.stores._vectors`): exact up to
  16,384 rows, above that a sign-bit shortlist re-scored exactly (exact numpy measured
  10-21 ms at 100k x 384; the shortlist 1.7 ms).

Both filter by namespace (exactly, or by prefix) and kind exactly, with a boolean mask
over rows. For a file
store they are saved beside the database (``<file>.index/``) on `close` and reused on the
next open only if they match SQLite (same store, same analyzer version, same row count and
high-water seq); otherwise they are rebuilt from SQLite. A crash loses nothing but the time
to rebuild them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt

from loomctx.errors import ConfigError, ConflictError, StoreClosedError, StoreError
from loomctx.stores._lexical import LexicalIndex
from loomctx.stores._migrations import migrate
from loomctx.stores._vectors import VectorIndex
from loomctx.stores.base import (
    BaseStore,
    Delete,
    Expect,
    Get,
    Hit,
    Namespace,
    NamespaceVersion,
    Op,
    Put,
    PutVectors,
    Record,
    Scan,
    Search,
    StoreContext,
    Unembedded,
    VectorSearch,
    Version,
    check_namespace,
)
from loomctx.text import terms

__all__ = ["ANALYZER_VERSION", "SQLiteStore"]

ANALYZER_VERSION: Final = 1
"""The version of the text analysis behind the lexical index (`loomctx.text.terms`): bump it
when that changes. A saved lexical index made under another version is not reused: the
index is rebuilt from ``records`` when the store is opened. (A fingerprint of `terms` on a
probe text is part of the version, so an analyzer change that forgot the bump is caught.)"""

_PROBE: Final = (
    "The quick brown fox's get_weather() call, HTTP/2 & naïve café in 2024 — "
    "我们的数据库在北京，请帮我查一下天气。日本語のテキストも。Ünïcödé ＡＢＣ"
)
_COLUMNS: Final = "namespace, key, kind, text, data, seq, created_at, updated_at"
_WRITES: Final = (Put, Delete, PutVectors)
_SCAN_WINDOW: Final = 2_048  # newest rows a limited Scan looks at before sorting a range


def _analyzer_version() -> str:
    probe = hashlib.blake2b(" ".join(terms(_PROBE)).encode(), digest_size=8).hexdigest()
    return f"{ANALYZER_VERSION}:{probe}"


# --- namespaces as strings -------------------------------------------------------------------


def _encode(namespace: Namespace) -> str:
    """``('t', 'a')`` -> ``'t/a/'``: a part-wise prefix is then a string prefix."""
    return "".join(f"{part}/" for part in namespace)


@functools.lru_cache(maxsize=4096)  # a search reads thousands of records of a few namespaces
def _decode(encoded: str) -> Namespace:
    return tuple(encoded[:-1].split("/"))


def _prefix_range(prefix: Namespace) -> tuple[str, str] | None:
    """Bounds with ``low <= namespace < high`` exactly for namespaces under `prefix`."""
    if not prefix:
        return None
    low = _encode(prefix)
    return low, low[:-1] + chr(ord("/") + 1)


# --- a batch in progress ---------------------------------------------------------------------


@dataclass(slots=True)
class _Batch:
    """What one `batch` call changes, to undo in memory if its transaction rolls back."""

    seq: int
    now: float
    touched_models: set[str] = field(default_factory=set)  # vector indexes changed or loaded
    touched_lexical: bool = False
    # Namespace versions the batch moved (encoded namespace -> seq), written before commit.
    changed: dict[str, int] = field(default_factory=dict)
    deleted: dict[str, int] = field(default_factory=dict)


class SQLiteStore(BaseStore):
    """The embedded `MemoryStore`: one SQLite file in WAL mode, or ``":memory:"`` for tests.

    `durability`: ``"normal"`` (default) keeps every returned write through a process crash;
    ``"full"`` also through power loss (one disk sync per batch). `record_cache`: how many
    records search keeps decoded for its next hits (0: none; see `_hits`). See the module
    docstring for concurrency, search and the vector index. Use it as a context manager, or
    call `close`."""

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        durability: Literal["normal", "full"] = "normal",
        record_cache: int = 16_384,
    ) -> None:
        if durability not in ("normal", "full"):
            raise ConfigError(f"`durability` must be 'normal' or 'full', got {durability!r}")
        if isinstance(record_cache, bool) or not isinstance(record_cache, int) or record_cache < 0:
            raise ConfigError(f"`record_cache` must be an int >= 0, got {record_cache!r}")
        self.record_cache = record_cache
        self._records: OrderedDict[int, Record] = OrderedDict()  # by record id, oldest first
        self.path = str(path)
        self._memory = self.path == ":memory:"
        self._lock = threading.RLock()
        self._vectors: dict[str, VectorIndex] = {}
        self._lexical: LexicalIndex | None = None
        self._index_dir = None if self._memory else Path(self.path + ".index")
        self._analyzer = _analyzer_version()
        self._data_version = 0
        # "lexical" or a model -> "file" | "sqlite": where its index was last loaded from
        self._index_origin: dict[str, str] = {}
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as error:
            raise StoreError(
                f"cannot open the SQLite store at {self.path!r}: {error}; check that the "
                f"directory exists and is writable"
            ) from error
        try:
            self._configure(conn, durability)
            migrate(conn, where=repr(self.path))
            self._store_id = self._meta(conn, "store_id")
            (self._data_version,) = conn.execute("PRAGMA data_version").fetchone()
        except ValueError as error:
            conn.close()
            raise StoreError(str(error)) from error
        except sqlite3.Error as error:
            conn.close()
            raise StoreError(
                f"cannot open the SQLite store at {self.path!r}: {error}; is it a Loom "
                f"SQLite database that no other program holds locked?"
            ) from error
        self._conn: sqlite3.Connection | None = conn

    # --- opening --------------------------------------------------------------------------

    @staticmethod
    def _configure(conn: sqlite3.Connection, durability: str) -> None:
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("PRAGMA journal_mode = WAL")  # ":memory:" keeps its own "memory" mode
        conn.execute(f"PRAGMA synchronous = {'FULL' if durability == 'full' else 'NORMAL'}")
        conn.execute("PRAGMA foreign_keys = ON")

    @staticmethod
    def _meta(conn: sqlite3.Connection, key: str) -> str:
        (value,) = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return str(value)

    # --- the contract -----------------------------------------------------------------------

    def batch(self, ops: Sequence[Op], *, ctx: StoreContext | None = None) -> list[Any]:
        """Run `ops` in order in one transaction and return one result per op.

        Writes are all or nothing: if an op fails, nothing of the batch is written and the
        error names the op's index. A `ctx.deadline` that passes between ops fails the batch
        the same way."""
        ops = list(ops)
        deadline = ctx.deadline if ctx is not None else None
        with self._lock:
            conn = self._require_open()
            writes = any(isinstance(op, _WRITES) for op in ops)
            try:
                conn.execute("BEGIN IMMEDIATE" if writes else "BEGIN")
            except sqlite3.Error as error:
                raise StoreError(
                    f"cannot start a transaction on {self.path!r}: {error}; another process "
                    f"may hold the write lock for longer than the 5 s busy timeout"
                ) from error
            state = _Batch(seq=0, now=time.time())
            try:
                # The first read starts the snapshot the indexes are then checked against.
                state.seq = start_seq = int(self._meta(conn, "seq"))
                self._check_external_writes(conn)
                results = [
                    self._run_op(conn, state, index, op, deadline) for index, op in enumerate(ops)
                ]
                if state.seq != start_seq:
                    conn.execute("UPDATE meta SET value = ? WHERE key = 'seq'", (str(state.seq),))
                self._save_versions(conn, state)
                conn.execute("COMMIT")
            except BaseException as error:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                # Indexes changed (or loaded) in the batch are rebuilt from SQLite when needed,
                # and records it read may be ones it wrote.
                self._records.clear()
                for model in state.touched_models:
                    self._vectors.pop(model, None)
                if state.touched_lexical:
                    self._lexical = None
                if isinstance(error, sqlite3.Error):
                    raise StoreError(
                        f"the batch on {self.path!r} failed to commit: {error}; nothing of "
                        f"it was written"
                    ) from error
                raise
            return results

    async def abatch(self, ops: Sequence[Op], *, ctx: StoreContext | None = None) -> list[Any]:
        """`batch` in a worker thread, so the event loop keeps running."""
        return await asyncio.to_thread(self.batch, list(ops), ctx=ctx)

    def close(self) -> None:
        """Save the indexes beside a file store and close the connection. Using the
        store afterwards raises `StoreError`; closing twice is harmless."""
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is None:
                return
            try:
                if self._index_dir is not None:
                    self._save_indexes(conn)
            finally:
                self._vectors.clear()
                self._records.clear()
                self._lexical = None
                conn.close()

    def _require_open(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreClosedError(
                f"the SQLiteStore at {self.path!r} is closed; open a new `SQLiteStore` to use it"
            )
        return self._conn

    # --- dispatch -------------------------------------------------------------------------

    def _run_op(
        self,
        conn: sqlite3.Connection,
        state: _Batch,
        index: int,
        op: Op,
        deadline: float | None,
    ) -> Any:
        where = f"batch op #{index} ({type(op).__name__})"
        try:
            if deadline is not None and time.monotonic() > deadline:
                raise StoreError(
                    "the deadline of the `StoreContext` passed before it ran; nothing of the "
                    "batch was written (give the call more time or a smaller batch)"
                )
            if isinstance(op, Put):
                return self._put(conn, state, op)
            if isinstance(op, Get):
                return self._get(conn, op)
            if isinstance(op, Delete):
                return self._delete(conn, state, op)
            if isinstance(op, Scan):
                return self._scan(conn, op)
            if isinstance(op, Search):
                return self._search(conn, state, op)
            if isinstance(op, VectorSearch):
                return self._vector_search(conn, state, op)
            if isinstance(op, PutVectors):
                return self._put_vectors(conn, state, op)
            if isinstance(op, Unembedded):
                return self._unembedded(conn, op)
            if isinstance(op, Version):
                return self._version(conn, state, op.namespace)
            if isinstance(op, Expect):
                return self._expect(conn, state, op)
            raise ConfigError(
                f"unknown operation {op!r}; a batch takes the op classes of `loomctx.stores.base`"
            )
        except ConfigError as error:
            raise ConfigError(f"{where} failed: {error}") from error
        except ConflictError as error:
            raise ConflictError(f"{where} failed: {error}") from error
        except UnicodeEncodeError as error:
            raise ConfigError(f"{where} failed: {_unencodable('a string', error)}") from error
        except StoreError as error:
            raise StoreError(f"{where} failed: {error}") from error
        except sqlite3.Error as error:
            raise StoreError(f"{where} failed in SQLite: {error}") from error

    # --- writes ---------------------------------------------------------------------------

    def _put(self, conn: sqlite3.Connection, state: _Batch, op: Put) -> Record:
        record = op.record
        namespace = check_namespace(record.namespace)
        encoded, data_json = _checked(record, namespace)
        state.seq += 1
        seq, now = state.seq, state.now
        state.changed[encoded] = seq
        row = conn.execute(
            "SELECT id, kind, text, text_seq, created_at FROM records "
            "WHERE namespace = ? AND key = ?",
            (encoded, record.key),
        ).fetchone()
        if row is None:
            (record_id,) = conn.execute(
                "INSERT INTO records (namespace, key, kind, text, data, seq, text_seq, "
                "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (encoded, record.key, record.kind, record.text, data_json, seq, seq, now, now),
            ).fetchone()
            created_at = now
            if self._lexical is not None and record.text:
                self._lexical.add(record_id, encoded, record.kind, terms(record.text))
                state.touched_lexical = True
        else:
            record_id, old_kind, old_text, text_seq, created_at = row
            if record.text != old_text:
                text_seq = seq
                conn.execute("DELETE FROM vectors WHERE record_id = ?", (record_id,))
                for model, vectors in self._vectors.items():
                    vectors.remove(record_id)
                    state.touched_models.add(model)
            elif record.kind != old_kind:
                # The vectors stay; a new seq on them tells other processes' indexes
                # (and side files) that the kind they filter on changed.
                conn.execute("UPDATE vectors SET seq = ? WHERE record_id = ?", (seq, record_id))
                for model, vectors in self._vectors.items():
                    vectors.touch(record_id, record.kind, seq)
                    state.touched_models.add(model)
            conn.execute(
                "UPDATE records SET kind = ?, text = ?, data = ?, seq = ?, text_seq = ?, "
                "updated_at = ? WHERE id = ?",
                (record.kind, record.text, data_json, seq, text_seq, now, record_id),
            )
            self._records.pop(record_id, None)
            lexical = self._lexical
            if lexical is not None and record.text != old_text:
                lexical.remove(record_id, terms(old_text))
                lexical.add(record_id, encoded, record.kind, terms(record.text))
                state.touched_lexical = True
            elif lexical is not None and record.kind != old_kind:
                lexical.set_kind(record_id, record.kind)
                state.touched_lexical = True
        return Record(
            namespace=namespace,
            key=record.key,
            kind=record.kind,
            text=record.text,
            data=json.loads(data_json),
            seq=seq,
            created_at=created_at,
            updated_at=now,
        )

    def _delete(self, conn: sqlite3.Connection, state: _Batch, op: Delete) -> bool:
        namespace = check_namespace(op.namespace)
        row = conn.execute(
            "DELETE FROM records WHERE namespace = ? AND key = ? RETURNING id, text",
            (_encode(namespace), op.key),
        ).fetchone()
        if row is None:
            return False
        record_id, text = row
        encoded = _encode(namespace)
        state.seq += 1  # a delete changes the namespace: it takes a seq, for its version
        state.changed[encoded] = state.deleted[encoded] = state.seq
        self._records.pop(record_id, None)
        if self._lexical is not None:
            self._lexical.remove(record_id, terms(text))
            state.touched_lexical = True
        for model, vectors in self._vectors.items():  # SQLite cascades to `vectors`
            vectors.remove(record_id)
            state.touched_models.add(model)
        return True

    def _put_vectors(self, conn: sqlite3.Connection, state: _Batch, op: PutVectors) -> int:
        _check_str("model", op.model)
        vectors = _float32(op.vectors, "vectors")
        if vectors.ndim != 2 or vectors.shape[0] != len(op.items) or vectors.shape[1] < 1:
            raise ConfigError(
                f"`vectors` must be a 2-d array with one row per item ({len(op.items)} "
                f"items), got shape {vectors.shape}"
            )
        dim = int(vectors.shape[1])
        stored_dim = self._model_dim(conn, op.model)
        if stored_dim is not None and stored_dim != dim:
            raise StoreError(
                f"model {op.model!r} has {stored_dim}-d vectors in this store, got {dim}-d "
                f"ones; embed with the same model, or store these under another model name"
            )
        index = self._vectors.get(op.model)
        stored = 0
        for (namespace, key, read_seq), vector in zip(op.items, vectors, strict=True):
            check_namespace(namespace)
            row = conn.execute(
                "SELECT id, namespace, kind, text_seq FROM records WHERE namespace = ? AND key = ?",
                (_encode(namespace), key),
            ).fetchone()
            if row is None or row[3] > read_seq:
                continue  # deleted, or its text changed after the embedder read it
            record_id, encoded, kind, _ = row
            state.seq += 1
            conn.execute(
                "INSERT INTO vectors (record_id, model, dim, vector, seq) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (record_id, model) DO UPDATE SET vector = excluded.vector, "
                "seq = excluded.seq",
                (record_id, op.model, dim, vector.tobytes(), state.seq),
            )
            if index is not None:
                index.upsert(record_id, vector, encoded, kind, state.seq)
                state.touched_models.add(op.model)
            stored += 1
        return stored

    # --- reads ----------------------------------------------------------------------------

    def _get(self, conn: sqlite3.Connection, op: Get) -> Record | None:
        namespace = check_namespace(op.namespace)
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM records WHERE namespace = ? AND key = ?",
            (_encode(namespace), op.key),
        ).fetchone()
        return None if row is None else _record(row)

    def _version(
        self, conn: sqlite3.Connection, state: _Batch, namespace: Namespace
    ) -> NamespaceVersion:
        encoded = _encode(check_namespace(namespace))
        row = conn.execute(
            "SELECT seq, deleted_seq FROM namespaces WHERE namespace = ?", (encoded,)
        ).fetchone()
        seq, deleted = (0, 0) if row is None else row
        return NamespaceVersion(
            seq=state.changed.get(encoded, seq), deleted_seq=state.deleted.get(encoded, deleted)
        )

    def _expect(self, conn: sqlite3.Connection, state: _Batch, op: Expect) -> None:
        if isinstance(op.seq, bool) or not isinstance(op.seq, int):
            raise ConfigError(
                f"`Expect.seq` must be an int (a `NamespaceVersion.seq`), got {op.seq!r}"
            )
        current = self._version(conn, state, op.namespace).seq
        if current != op.seq:
            raise ConflictError(
                f"namespace {op.namespace!r} is at version {current}, not {op.seq} as expected: "
                f"another writer changed it; nothing of the batch was written (read it again "
                f"and retry)"
            )

    @staticmethod
    def _save_versions(conn: sqlite3.Connection, state: _Batch) -> None:
        if not state.changed:
            return
        conn.executemany(
            "INSERT INTO namespaces (namespace, seq, deleted_seq) VALUES (?, ?, ?) "
            "ON CONFLICT (namespace) DO UPDATE SET seq = excluded.seq, "
            "deleted_seq = max(deleted_seq, excluded.deleted_seq)",
            [(ns, seq, state.deleted.get(ns, 0)) for ns, seq in state.changed.items()],
        )

    def _scan(self, conn: sqlite3.Connection, op: Scan) -> list[Record]:
        prefix = check_namespace(op.prefix, prefix=not op.exact)
        clauses, params = _filters((), op.kind, column="")
        for name, value in op.where.items():
            if not isinstance(name, str) or not name or '"' in name or "\\" in name:
                raise ConfigError(
                    f"`where` keys must be non-empty strings without '\"' or '\\\\', got {name!r}"
                )
            if not isinstance(value, str | int | float):  # bool is an int
                raise ConfigError(
                    f"`where` values must be str, int, float or bool, got {value!r} for {name!r}"
                )
            clauses.append("json_extract(data, ?) = ?")
            params += [f'$."{name}"', value]
        order = "DESC" if op.newest_first else "ASC"
        since = "seq > ?" if op.after_seq else ""
        limit = None if op.limit is None else _check_limit(op.limit)
        tail = f" ORDER BY seq {order}" + ("" if limit is None else f" LIMIT {limit}")
        filters = "".join(f" AND {c}" for c in [*clauses, since] if c)
        if since:
            params.append(op.after_seq)
        bounds = _prefix_range(prefix)
        if bounds is None:
            sql = f"SELECT {_COLUMNS} FROM records WHERE 1{filters}{tail}"
            return [_record(row) for row in conn.execute(sql, params)]
        low, high = bounds
        # The prefix's own namespace walks the (namespace, seq) index and stops after `limit`
        # rows, so the recent records of a session cost the same however long it grows.
        own = f"SELECT {_COLUMNS} FROM records WHERE namespace = ?{filters}{tail}"
        rows = conn.execute(own, [low, *params]).fetchall()
        if op.exact:
            return [_record(row) for row in rows]
        # Namespaces below it: first look among the newest (or oldest) rows of the whole
        # store, which finds `limit` rows at once when they are dense; else sort the range.
        below = f"namespace > ? AND namespace < ?{filters}"
        found: list[Any] = []
        deeper = "SELECT 1 FROM records WHERE namespace > ? AND namespace < ? LIMIT 1"
        has_below = conn.execute(deeper, bounds).fetchone() is not None  # else a leaf
        if has_below and limit is not None:
            window = (
                f"SELECT * FROM records INDEXED BY records_seq WHERE 1"
                f"{' AND ' + since if since else ''} ORDER BY seq {order} LIMIT {_SCAN_WINDOW}"
            )
            sql = f"SELECT {_COLUMNS} FROM ({window}) WHERE {below}{tail}"
            window_params = [op.after_seq] if since else []
            found = conn.execute(sql, [*window_params, low, high, *params]).fetchall()
        if has_below and (limit is None or len(found) < limit):  # sparse, or all: sort
            sql = f"SELECT {_COLUMNS} FROM records WHERE {below}{tail}"
            found = conn.execute(sql, [low, high, *params]).fetchall()
        merged = sorted(rows + found, key=lambda row: row[5], reverse=op.newest_first)
        return [_record(row) for row in merged[:limit]]

    def _search(self, conn: sqlite3.Connection, state: _Batch, op: Search) -> list[Hit]:
        prefix = check_namespace(op.prefix, prefix=not op.exact)
        limit = _check_limit(op.limit)
        query_terms = terms(op.query)
        if not query_terms or limit == 0:
            return []
        found = self._lexical_index(conn, state).search(
            query_terms, prefix=_encode(prefix), kind=op.kind, limit=limit, exact=op.exact
        )
        return self._hits(conn, found, lazy=op.lazy)

    def _vector_search(
        self, conn: sqlite3.Connection, state: _Batch, op: VectorSearch
    ) -> list[Hit]:
        prefix = check_namespace(op.prefix, prefix=not op.exact)
        _check_str("model", op.model)
        limit = _check_limit(op.limit)
        query = _float32(op.vector, "vector")
        if query.ndim != 1:
            raise ConfigError(f"the query `vector` must be 1-d, got shape {query.shape}")
        dim = self._model_dim(conn, op.model)
        if dim is None or limit == 0:
            return []
        if query.shape[0] != dim:
            raise StoreError(
                f"the query vector has {query.shape[0]} dimensions but model {op.model!r} "
                f"stores {dim}-d vectors; embed the query with the same model"
            )
        index = self._vector_index(conn, state, op.model, dim)
        found = index.search(
            query, prefix=_encode(prefix), kind=op.kind, limit=limit, exact=op.exact
        )
        return self._hits(conn, found, lazy=op.lazy)

    def _hits(
        self, conn: sqlite3.Connection, found: list[tuple[int, float]], *, lazy: bool
    ) -> list[Hit]:
        """`Hit`s for (record id, score) pairs, in their order.

        Decoding a record's JSON is most of a search's time (a deep memory search reads ~370
        records to return 62), and the same records come back query after query: an agent
        re-retrieves before every model call. So the last `record_cache` records read are
        kept, by id. A write drops the record it changes; a rolled-back batch, or a commit by
        another connection, drops them all. Records are values: callers share them and must
        not change their `data`.

        With `lazy` (`Search.lazy`), records read now keep their data as JSON text until it
        is first read (`_JSONData`); a record the cache holds so is decoded for a caller that
        did not ask for `lazy` (and kept decoded)."""
        if not found:
            return []
        cache = self._records
        missing = [record_id for record_id, _ in found if record_id not in cache]
        fetched: dict[int, Record] = {}
        if missing:
            fetched = {
                row[0]: _record(row[1:], lazy=lazy)
                for row in conn.execute(
                    f"SELECT id, {_COLUMNS} FROM records WHERE id IN "
                    f"({','.join('?' * len(missing))})",
                    missing,
                )
            }
        hits = []
        recent = cache.move_to_end
        for record_id, score in found:
            record = fetched.get(record_id) if fetched else None
            if record is None:
                record = cache[record_id]
                recent(record_id)
                if not lazy and isinstance(record.data, _JSONData):
                    record = cache[record_id] = replace(record, data=record.data.decoded())
            hits.append(Hit(record=record, score=score))
        if self.record_cache:
            cache.update(fetched)
            while len(cache) > self.record_cache:
                cache.popitem(last=False)
        return hits

    def _unembedded(self, conn: sqlite3.Connection, op: Unembedded) -> list[Record]:
        prefix = check_namespace(op.prefix, prefix=not op.exact)
        _check_str("model", op.model)
        if isinstance(op.after_seq, bool) or not isinstance(op.after_seq, int):
            raise ConfigError(f"`after_seq` must be an int, got {op.after_seq!r}")
        clauses, params = _filters(prefix, None, column="r.", exact=op.exact)
        clauses.append("r.text != ''")
        if op.after_seq:
            clauses.append("r.seq > ?")
            params.append(op.after_seq)
        clauses.append(
            "NOT EXISTS (SELECT 1 FROM vectors AS v WHERE v.record_id = r.id AND v.model = ?)"
        )
        params += [op.model, _check_limit(op.limit)]
        sql = (
            f"SELECT {', '.join('r.' + c for c in _COLUMNS.split(', '))} FROM records AS r "
            f"WHERE {' AND '.join(clauses)} ORDER BY r.seq LIMIT ?"
        )
        return [_record(row) for row in conn.execute(sql, params)]

    # --- the indexes beside SQLite -----------------------------------------------------------

    def _lexical_index(self, conn: sqlite3.Connection, state: _Batch) -> LexicalIndex:
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
        self, conn: sqlite3.Connection, state: _Batch, model: str, dim: int
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


# --- helpers --------------------------------------------------------------------------------


# `data` is the store's own compact JSON: `raw_decode` skips `loads`' whitespace scans, a
# fifth of decoding the few hundred records a deep search reads.
_decode_json: Final = json.JSONDecoder().raw_decode


class _JSONData(Mapping[str, Any]):
    """A record's data, decoded from its JSON text when first read (`Search.lazy`)."""

    __slots__ = ("_data", "_text")

    def __init__(self, text: str) -> None:
        self._text: str | None = text
        self._data: dict[str, Any] | None = None

    def decoded(self) -> dict[str, Any]:
        """The data, decoded (once; threads may race to it, harmlessly)."""
        data = self._data
        if data is None:
            text = self._text
            if text is None:  # another thread decoded it since
                return self._data  # type: ignore[return-value]
            data = self._data = _decode_json(text)[0]
            self._text = None
        return data

    def __getitem__(self, key: str) -> Any:
        return self.decoded()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.decoded())

    def __len__(self) -> int:
        return len(self.decoded())

    def __contains__(self, key: object) -> bool:
        return key in self.decoded()

    def get(self, key: str, default: Any = None) -> Any:
        return self.decoded().get(key, default)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _JSONData):
            other = other.decoded()
        return self.decoded() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self.decoded())

    def __reduce__(self) -> tuple[Any, ...]:  # copies and pickles are plain dicts
        return (dict, (self.decoded(),))


def _record(row: Sequence[Any], *, lazy: bool = False) -> Record:
    namespace, key, kind, text, data, seq, created_at, updated_at = row
    return Record(
        namespace=_decode(namespace),
        key=key,
        kind=kind,
        text=text,
        data=_JSONData(data) if lazy else _decode_json(data)[0],
        seq=seq,
        created_at=created_at,
        updated_at=updated_at,
    )


def _filters(
    prefix: Namespace, kind: str | None, *, column: str, exact: bool = False
) -> tuple[list[str], list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    bounds = _prefix_range(prefix)
    if exact:
        clauses.append(f"{column}namespace = ?")
        params.append(_encode(prefix))
    elif bounds is not None:
        clauses.append(f"{column}namespace >= ? AND {column}namespace < ?")
        params += bounds
    if kind is not None:
        clauses.append(f"{column}kind = ?")
        params.append(kind)
    return clauses, params


def _float32(value: object, name: str) -> npt.NDArray[np.float32]:
    """`value` as a little-endian float32 array of finite numbers, else a `ConfigError`."""
    try:
        array: npt.NDArray[np.float32] = np.asarray(value, dtype="<f4")
    except (TypeError, ValueError) as error:
        raise ConfigError(f"`{name}` must be an array of numbers: {error}") from error
    if not np.isfinite(array).all():
        raise ConfigError(f"`{name}` contains NaN or infinity; check the embedder's output")
    return array


def _unencodable(what: str, error: UnicodeEncodeError) -> str:
    bad = error.object[error.start : error.end]
    return (
        f"{what} cannot be stored: it holds {bad!r} at position {error.start}, which is not "
        f"valid Unicode text (a lone surrogate, as decoding bytes with "
        f"errors='surrogateescape' leaves); decode the bytes with errors='replace', or "
        f"clean the string with `s.encode('utf-8', 'replace').decode('utf-8')`"
    )


def _checked(record: Record, namespace: Namespace) -> tuple[str, str]:
    """The encoded namespace and the `data` JSON of a record to write (every store's checks):
    `ConfigError` for a key, kind or text that is not a string, `data` that is not JSON, or
    a field that is not valid Unicode. A store stores UTF-8: a lone surrogate (from bytes
    decoded with "surrogateescape") cannot be written, and the error names the field rather
    than let a UnicodeEncodeError escape."""
    _check_str("key", record.key)
    _check_str("kind", record.kind)
    if not isinstance(record.text, str):
        raise ConfigError(f"`text` must be a string, got {type(record.text).__name__}")
    try:
        data_json = json.dumps(
            dict(record.data), ensure_ascii=False, separators=(",", ":"), allow_nan=False
        )
    except (TypeError, ValueError) as error:
        raise ConfigError(
            f"`data` of record {record.key!r} must be JSON-serializable (strings, numbers, "
            f"booleans, None, lists and dicts with string keys): {error}"
        ) from error
    encoded = _encode(namespace)
    fields = (("namespace", encoded), ("key", record.key), ("kind", record.kind))
    for name, value in (*fields, ("text", record.text), ("data", data_json)):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ConfigError(
                _unencodable(f"the `{name}` of record {record.key!r}", error)
            ) from error
    return encoded, data_json


def _check_str(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise ConfigError(f"`{name}` must be a string, got {value!r}")


def _check_limit(limit: object) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise ConfigError(f"`limit` must be an int >= 0, got {limit!r}")
    return limit

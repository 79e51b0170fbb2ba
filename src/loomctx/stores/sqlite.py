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
  being an OR of its terms (`loomctx.stores._lexical`; FTS5 ranked too slowly);
- vectors: cosine similarity per embedding model (`loomctx.stores._vectors`): exact up to
  16,384 rows, above that a sign-bit shortlist re-scored exactly.

Both filter by namespace (exactly, or by prefix) and kind exactly, with a boolean mask
over rows. For a file
store they are saved beside the database (``<file>.index/``) on `close` and reused on the
next open only if they match SQLite (same store, same analyzer version, same row count and
high-water seq); otherwise they are rebuilt from SQLite. A crash loses nothing but the time
to rebuild them (`loomctx.stores._sqlite_indexes`).
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt

from loomctx.errors import ConfigError, StoreClosedError, StoreError
from loomctx.stores._codec import (
    COLUMNS,
    JSONData,
    check_limit,
    check_seq,
    check_str,
    check_vectors,
    check_where,
    checked,
    encode,
    prefix_range,
    query_vector,
    record_from_row,
    stored,
    wrong_dim,
)
from loomctx.stores._dispatch import NOTHING_FOUND, WRITES, OpDispatcher, check_record_cache
from loomctx.stores._lexical import LexicalIndex
from loomctx.stores._migrations import migrate
from loomctx.stores._rows import SeqsById
from loomctx.stores._sqlite_indexes import SideIndexes, SQLiteBatch
from loomctx.stores._vectors import VectorIndex
from loomctx.stores.base import (
    BaseStore,
    Delete,
    Found,
    Namespace,
    Op,
    Put,
    PutVectors,
    Record,
    Scan,
    Search,
    StoreContext,
    Unembedded,
    VectorSearch,
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
_SCAN_WINDOW: Final = 2_048  # newest rows a limited Scan looks at before sorting a range


def _analyzer_version() -> str:
    probe = hashlib.blake2b(" ".join(terms(_PROBE)).encode(), digest_size=8).hexdigest()
    return f"{ANALYZER_VERSION}:{probe}"


class SQLiteStore(BaseStore, SideIndexes, OpDispatcher[sqlite3.Connection, SQLiteBatch]):
    """The embedded `MemoryStore`: one SQLite file in WAL mode, or ``":memory:"`` for tests.

    `durability`: ``"normal"`` (default) keeps every returned write through a process crash;
    ``"full"`` also through power loss (one disk sync per batch). `record_cache`: how many
    records search keeps decoded for its next hits (0: none; see `_hits`). See the module
    docstring for concurrency, search and the vector index. Use it as a context manager, or
    call `close`."""

    engine = "SQLite"
    engine_error = sqlite3.Error

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        durability: Literal["normal", "full"] = "normal",
        record_cache: int = 16_384,
    ) -> None:
        if durability not in ("normal", "full"):
            raise ConfigError(f"`durability` must be 'normal' or 'full', got {durability!r}")
        self.record_cache = check_record_cache(record_cache)
        self._records: OrderedDict[int, Record] = OrderedDict()  # by record id, oldest first
        self._seq_of = SeqsById()  # record id -> seq, for search (`_seqs`)
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
            writes = any(isinstance(op, WRITES) for op in ops)
            try:
                conn.execute("BEGIN IMMEDIATE" if writes else "BEGIN")
            except sqlite3.Error as error:
                raise StoreError(
                    f"cannot start a transaction on {self.path!r}: {error}; another process "
                    f"may hold the write lock for longer than the 5 s busy timeout"
                ) from error
            state = SQLiteBatch(seq=0, now=time.time())
            try:
                # Only writes hand out seqs. In a read-only batch, the first read (the
                # ``PRAGMA data_version`` of `_check_external_writes`) starts the snapshot
                # the indexes are checked against.
                start_seq = int(self._meta(conn, "seq")) if writes else 0
                state.seq = start_seq
                self._check_external_writes(conn)
                results = [
                    self.run_op(conn, state, index, op, deadline) for index, op in enumerate(ops)
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
                self._seq_of.clear()
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
                self._seq_of.clear()
                self._lexical = None
                conn.close()

    def _require_open(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreClosedError(
                f"the SQLiteStore at {self.path!r} is closed; open a new `SQLiteStore` to use it"
            )
        return self._conn

    # --- writes ---------------------------------------------------------------------------

    def _put(self, conn: sqlite3.Connection, state: SQLiteBatch, op: Put) -> Record:
        record = op.record
        namespace = check_namespace(record.namespace)
        encoded, data_json = checked(record, namespace)
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
            self._seq_of.forget(record_id)
            lexical = self._lexical
            if lexical is not None and record.text != old_text:
                lexical.remove(record_id, terms(old_text))
                lexical.add(record_id, encoded, record.kind, terms(record.text))
                state.touched_lexical = True
            elif lexical is not None and record.kind != old_kind:
                lexical.set_kind(record_id, record.kind)
                state.touched_lexical = True
        return stored(record, namespace, data_json, seq=seq, created_at=created_at, now=now)

    def _delete(self, conn: sqlite3.Connection, state: SQLiteBatch, op: Delete) -> bool:
        namespace = check_namespace(op.namespace)
        row = conn.execute(
            "DELETE FROM records WHERE namespace = ? AND key = ? RETURNING id, text",
            (encode(namespace), op.key),
        ).fetchone()
        if row is None:
            return False
        record_id, text = row
        encoded = encode(namespace)
        state.seq += 1  # a delete changes the namespace: it takes a seq, for its version
        state.changed[encoded] = state.deleted[encoded] = state.seq
        self._records.pop(record_id, None)
        self._seq_of.forget(record_id)
        if self._lexical is not None:
            self._lexical.remove(record_id, terms(text))
            state.touched_lexical = True
        for model, vectors in self._vectors.items():  # SQLite cascades to `vectors`
            vectors.remove(record_id)
            state.touched_models.add(model)
        return True

    def _put_vectors(self, conn: sqlite3.Connection, state: SQLiteBatch, op: PutVectors) -> int:
        vectors = check_vectors(op)
        dim = int(vectors.shape[1])
        stored_dim = self._model_dim(conn, op.model)
        if stored_dim is not None and stored_dim != dim:
            raise wrong_dim(op.model, stored_dim, dim, query=False)
        index = self._vectors.get(op.model)
        count = 0
        for (namespace, key, read_seq), vector in zip(op.items, vectors, strict=True):
            check_namespace(namespace)
            row = conn.execute(
                "SELECT id, namespace, kind, text_seq FROM records WHERE namespace = ? AND key = ?",
                (encode(namespace), key),
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
            count += 1
        return count

    @staticmethod
    def _save_versions(conn: sqlite3.Connection, state: SQLiteBatch) -> None:
        if not state.changed:
            return
        conn.executemany(
            "INSERT INTO namespaces (namespace, seq, deleted_seq) VALUES (?, ?, ?) "
            "ON CONFLICT (namespace) DO UPDATE SET seq = excluded.seq, "
            "deleted_seq = max(deleted_seq, excluded.deleted_seq)",
            [(ns, seq, state.deleted.get(ns, 0)) for ns, seq in state.changed.items()],
        )

    def _scan(self, conn: sqlite3.Connection, state: SQLiteBatch, op: Scan) -> list[Record]:
        prefix = check_namespace(op.prefix, prefix=not op.exact)
        clauses, params = _filters((), op.kind, column="")
        for name, value in op.where.items():
            check_where(name, value)
            clauses.append("json_extract(data, ?) = ?")
            params += [f'$."{name}"', value]
        order = "DESC" if op.newest_first else "ASC"
        since = "seq > ?" if op.after_seq else ""
        limit = None if op.limit is None else check_limit(op.limit)
        tail = f" ORDER BY seq {order}" + ("" if limit is None else f" LIMIT {limit}")
        filters = "".join(f" AND {c}" for c in [*clauses, since] if c)
        if since:
            params.append(op.after_seq)
        bounds = prefix_range(prefix)
        if bounds is None:
            sql = f"SELECT {COLUMNS} FROM records WHERE 1{filters}{tail}"
            return [record_from_row(row) for row in conn.execute(sql, params)]
        low, high = bounds
        # The prefix's own namespace walks the (namespace, seq) index and stops after `limit`
        # rows, so the recent records of a session cost the same however long it grows.
        if op.exact:
            own = f"SELECT id, {COLUMNS} FROM records WHERE namespace = ?{filters}{tail}"
            return self._kept_records(conn.execute(own, [low, *params]).fetchall())
        own = f"SELECT {COLUMNS} FROM records WHERE namespace = ?{filters}{tail}"
        rows = conn.execute(own, [low, *params]).fetchall()
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
            sql = f"SELECT {COLUMNS} FROM ({window}) WHERE {below}{tail}"
            window_params = [op.after_seq] if since else []
            found = conn.execute(sql, [*window_params, low, high, *params]).fetchall()
        if has_below and (limit is None or len(found) < limit):  # sparse, or all: sort
            sql = f"SELECT {COLUMNS} FROM records WHERE {below}{tail}"
            found = conn.execute(sql, [low, high, *params]).fetchall()
        merged = sorted(rows + found, key=lambda row: row[5], reverse=op.newest_first)
        return [record_from_row(row) for row in merged[:limit]]

    def _lexical_found(self, conn: sqlite3.Connection, state: SQLiteBatch, op: Search) -> Found:
        prefix = check_namespace(op.prefix, prefix=not op.exact)
        limit = check_limit(op.limit)
        query_terms = terms(op.query)
        if not query_terms or limit == 0:
            return NOTHING_FOUND
        ids, scores = self._lexical_index(conn, state).top(
            query_terms, prefix=encode(prefix), kind=op.kind, limit=limit, exact=op.exact
        )
        return Found(ids=ids, seqs=self._seqs(conn, ids), scores=scores)

    def _vector_found(
        self, conn: sqlite3.Connection, state: SQLiteBatch, op: VectorSearch
    ) -> Found:
        prefix = check_namespace(op.prefix, prefix=not op.exact)
        query, limit = query_vector(op)
        index = self._vectors.get(op.model)
        # An index in memory matches SQLite's rows (checked at the batch's start, kept by its
        # writes), so a non-empty one knows the model's dimension without a query.
        dim = index.dim if index is not None and index.count else self._model_dim(conn, op.model)
        if dim is None or limit == 0:
            return NOTHING_FOUND
        if query.shape[0] != dim:
            raise wrong_dim(op.model, dim, query.shape[0], query=True)
        if index is None:
            index = self._vector_index(conn, state, op.model, dim)
        ids, scores = index.top(
            query, prefix=encode(prefix), kind=op.kind, limit=limit, exact=op.exact
        )
        return Found(ids=ids, seqs=self._seqs(conn, ids), scores=scores)

    def _seqs(self, conn: sqlite3.Connection, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The `seq` of the records at `ids` (every one exists: the indexes hold live rows
        only). Kept by id (`_seq_of`), as the records are: dropped by the writes that
        change them, all of them by a rolled-back batch or another connection's commit."""
        seqs = self._seq_of.get(ids)
        unknown = seqs < 0
        if unknown.any():
            missing = ids[unknown].tolist()
            rows = conn.execute(
                f"SELECT id, seq FROM records WHERE id IN ({','.join('?' * len(missing))})",
                missing,
            ).fetchall()
            read = dict(rows)
            seqs[unknown] = [read.get(record_id, -1) for record_id in missing]
            self._seq_of.set(ids[unknown], seqs[unknown])
        return seqs

    def _kept_records(self, rows: Sequence[Any]) -> list[Record]:
        """The records of `rows` (``id`` then `COLUMNS`), each taken from the records kept
        (see `_records_at`) when it is there, else decoded and kept: a conversation's newest
        records are scanned again after every turn (`LoomMemory.recent_tasks`)."""
        cache = self._records
        out: list[Record] = []
        for row in rows:
            record = cache.get(row[0])
            if record is None or record.seq != row[6]:
                record = record_from_row(row[1:])
                if self.record_cache:
                    cache[row[0]] = record
            elif isinstance(record.data, JSONData):
                record = cache[row[0]] = replace(record, data=record.data.decoded())
            out.append(record)
        while len(cache) > self.record_cache:
            cache.popitem(last=False)
        return out

    def _records_at(
        self,
        conn: sqlite3.Connection,
        state: SQLiteBatch,
        ids: list[int],
        seqs: list[int],
        *,
        lazy: bool,
    ) -> dict[int, Record]:
        """The records at `ids`, by id.

        Decoding a record's JSON is most of reading it, and the same records come back
        query after query: an agent re-retrieves before every model call. So the last
        `record_cache` records read are kept, by id. A write drops the record it changes; a
        rolled-back batch, or a commit by another connection, drops them all (so a kept
        record is the current one, whatever `seqs` says). Records are values: callers share
        them and must not change their `data`.

        With `lazy` (`Search.lazy`), records read now keep their data as JSON text until it
        is first read (`JSONData`); a record the cache holds so is decoded for a caller that
        did not ask for `lazy` (and kept decoded)."""
        cache = self._records
        missing = [record_id for record_id in ids if record_id not in cache]
        fetched: dict[int, Record] = {}
        if missing:
            fetched = {
                row[0]: record_from_row(row[1:], lazy=lazy)
                for row in conn.execute(
                    f"SELECT id, {COLUMNS} FROM records WHERE id IN "
                    f"({','.join('?' * len(missing))})",
                    missing,
                )
            }
        out: dict[int, Record] = {}
        recent = cache.move_to_end
        for record_id in ids:
            record = fetched.get(record_id) if fetched else None
            if record is None:
                record = cache.get(record_id)
                if record is None:
                    continue  # deleted
                recent(record_id)
                if not lazy and isinstance(record.data, JSONData):
                    record = cache[record_id] = replace(record, data=record.data.decoded())
            out[record_id] = record
        if self.record_cache:
            cache.update(fetched)
            while len(cache) > self.record_cache:
                cache.popitem(last=False)
        return out

    def _unembedded(
        self, conn: sqlite3.Connection, state: SQLiteBatch, op: Unembedded
    ) -> list[Record]:
        prefix = check_namespace(op.prefix, prefix=not op.exact)
        check_str("model", op.model)
        check_seq(op.after_seq, "after_seq")
        clauses, params = _filters(prefix, None, column="r.", exact=op.exact)
        clauses.append("r.text != ''")
        if op.after_seq:
            clauses.append("r.seq > ?")
            params.append(op.after_seq)
        clauses.append(
            "NOT EXISTS (SELECT 1 FROM vectors AS v WHERE v.record_id = r.id AND v.model = ?)"
        )
        params += [op.model, check_limit(op.limit)]
        sql = (
            f"SELECT {', '.join('r.' + c for c in COLUMNS.split(', '))} FROM records AS r "
            f"WHERE {' AND '.join(clauses)} ORDER BY r.seq LIMIT ?"
        )
        return [record_from_row(row) for row in conn.execute(sql, params)]


# --- helpers --------------------------------------------------------------------------------


def _filters(
    prefix: Namespace, kind: str | None, *, column: str, exact: bool = False
) -> tuple[list[str], list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    bounds = prefix_range(prefix)
    if exact:
        clauses.append(f"{column}namespace = ?")
        params.append(encode(prefix))
    elif bounds is not None:
        clauses.append(f"{column}namespace >= ? AND {column}namespace < ?")
        params += bounds
    if kind is not None:
        clauses.append(f"{column}kind = ?")
        params.append(kind)
    return clauses, params

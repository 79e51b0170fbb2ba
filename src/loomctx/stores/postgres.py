"""`PostgresStore`: the scale-out `MemoryStore`, on PostgreSQL with pgvector.

Many workers share one database; each holds a connection pool (psycopg 3, `psycopg_pool`).
Everything lives in PostgreSQL, nothing in the worker: a write that returned is committed,
and every worker sees it on its next read. Install with ``pip install 'loomctx[postgres]'``.

Batches. A `batch` is one transaction on one pooled connection. A batch that writes first
locks the store's seq counter (one row of ``loom_meta``), so write batches run one at a time
store-wide, as on SQLite: `seq` is then the commit order, which is what `Scan(after_seq=...)`
and `Version` promise (a sequence would hand out seqs out of commit order), and no two
writers can deadlock. Reads never wait for it. `abatch` runs `batch` in a worker thread on the
same pool, so the event loop keeps running and concurrent `abatch` calls use several
connections at once.

Search, in SQL, with the SQLite store's scores:

- lexical: BM25 over the terms of `loomctx.text.terms` (English words, CJK bigrams), kept in
  an inverted index table and ranked exactly, all at once when the query's postings are
  few, else by MaxScore (`loomctx.stores._pg_lexical`); the records found are read once and
  kept decoded while their `seq` holds (`_hits`);
- vectors: one table per embedding model with a ``vector(d)`` column of that model's
  dimension and an HNSW index over unit vectors (inner product = cosine similarity). A
  filtered search sets pgvector's iterative scan (``hnsw.iterative_scan = relaxed_order``),
  so that a selective namespace or kind filter still returns `limit` rows; the rows are then
  sorted exactly. HNSW is approximate: on a large model table a search may miss a true
  neighbour that SQLite's exact scan would find (``hnsw.ef_search`` is 100).

Every read filters by namespace (exactly, or by part-wise prefix as a byte range in the
``"C"`` collation) and kind in SQL, with parameters; every statement is parameterized (table
names of vector sets are identifiers made from an integer, never from user text).

Limits of PostgreSQL that SQLite does not have: text cannot hold the NUL character (U+0000),
so a record holding one is refused with a `ConfigError`; a term's count in a text is kept to
255 (a text repeating one word more often scores as if it had 255).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from loomctx.errors import ConfigError, ConflictError, StoreClosedError, StoreError
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
from loomctx.stores.sqlite import (
    _check_limit,
    _check_str,
    _checked,
    _decode,
    _encode,
    _float32,
    _prefix_range,
    _unencodable,
)
from loomctx.text import terms

try:
    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as error:  # pragma: no cover - exercised without the extra installed
    raise ImportError(
        f"`PostgresStore` needs the postgres extra: pip install 'loomctx[postgres]' ({error})"
    ) from error

from loomctx.stores import _pg_lexical
from loomctx.stores._pg_schema import migrate

__all__ = ["PostgresStore"]

_COLUMNS: Final = "namespace, key, kind, text, data, seq, created_at, updated_at"
_WRITES: Final = (Put, Delete, PutVectors)
_HNSW_MAX_DIM: Final = 2_000  # pgvector's limit for an HNSW index on `vector`
_MAX_TF: Final = 255
_EF_SEARCH: Final = 100  # HNSW candidates per search (pgvector's default: 40); > any usual limit

# A JSON text holds U+0000 as the escape \u0000, after an even number of backslashes.
_NUL_ESCAPE: Final = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


@dataclass(slots=True)
class _Batch:
    """What one `batch` changes, written back before it commits."""

    seq: int
    now: float
    locked: bool = False
    sent_commit: bool = False  # the batch's work is done: a failure now may be after COMMIT
    changed: dict[str, int] = field(default_factory=dict)
    deleted: dict[str, int] = field(default_factory=dict)
    df: Counter[str] = field(default_factory=Counter)  # pending document-frequency deltas
    # Per term, the largest count and the shortest text it occurs in (MaxScore's bounds).
    bounds: dict[str, tuple[int, int]] = field(default_factory=dict)
    texts: int = 0
    total_len: int = 0
    vector_sets: dict[str, tuple[int, int]] | None = None  # model -> (set id, dim)
    # The rows the batch's puts will find, read in one query up front (namespace, key) ->
    # (id, kind, text, text_seq, created_at), or None: no such record. Kept current by the
    # batch's own puts and deletes (no one else writes while it holds the write lock).
    existing: dict[tuple[str, str], tuple[Any, ...] | None] = field(default_factory=dict)
    # New records not inserted yet: (namespace, key, kind, text, data, seq, length, counts).
    pending: list[tuple[str, str, str, str, str, int, int, Counter[str]]] = field(
        default_factory=list
    )
    pending_keys: set[tuple[str, str]] = field(default_factory=set)


class PostgresStore(BaseStore):
    """The `MemoryStore` on PostgreSQL + pgvector, for many workers sharing one database.

    `url`: a libpq connection string or URL (``postgresql://user@host:5432/db``); the
    database must exist, and the first open creates the schema (and the ``vector``
    extension, which needs the privilege to create it, or an administrator to have run
    ``CREATE EXTENSION vector``). `min_connections` / `max_connections`: the pool's bounds
    per store object (each `batch` holds one connection while it runs). `connect_timeout`:
    seconds to wait for a connection (from the pool or the server) before a `StoreError`.
    `record_cache`: how many records search keeps decoded for its next hits (0: none; see
    `_hits`).
    See the module docstring for transactions and search. Use it as a context manager, or
    call `close`."""

    def __init__(
        self,
        url: str,
        *,
        min_connections: int = 1,
        max_connections: int = 8,
        connect_timeout: float = 10.0,
        record_cache: int = 16_384,
    ) -> None:
        if not isinstance(url, str) or not url:
            raise ConfigError(
                f"`url` must be a PostgreSQL URL such as 'postgresql://host/db', got {url!r}"
            )
        if not (isinstance(min_connections, int) and isinstance(max_connections, int)) or not (
            0 <= min_connections <= max_connections and max_connections >= 1
        ):
            raise ConfigError(
                f"need 0 <= `min_connections` <= `max_connections` and `max_connections` >= 1, "
                f"got {min_connections!r} and {max_connections!r}"
            )
        if not isinstance(connect_timeout, int | float) or connect_timeout <= 0:
            raise ConfigError(f"`connect_timeout` must be a number > 0, got {connect_timeout!r}")
        if isinstance(record_cache, bool) or not isinstance(record_cache, int) or record_cache < 0:
            raise ConfigError(f"`record_cache` must be an int >= 0, got {record_cache!r}")
        try:
            params = conninfo_to_dict(url)
        except psycopg.ProgrammingError as error:
            raise ConfigError(f"`url` is not a PostgreSQL connection URL: {error}") from error
        self.where = _describe(params)
        self._url = url
        self._timeout = float(connect_timeout)
        self._models: dict[str, tuple[int, int]] = {}  # model -> (vector set id, dim), read
        self._lock = threading.Lock()
        self.record_cache = record_cache
        self._records: OrderedDict[int, Record] = OrderedDict()  # by record id, oldest first
        self._cache_lock = threading.Lock()
        try:
            with psycopg.connect(
                url, autocommit=True, connect_timeout=max(1, round(connect_timeout))
            ) as conn:
                migrate(conn, where=self.where)
        except ValueError as error:
            raise StoreError(str(error)) from error
        except psycopg.Error as error:
            raise StoreError(
                f"cannot open the PostgreSQL store at {self.where}: {error}; check that the "
                f"server runs, the database exists and the user may create tables (and the "
                f"`vector` extension, or that it is installed)"
            ) from error
        self._pool: ConnectionPool[psycopg.Connection[tuple[Any, ...]]] | None = ConnectionPool(
            url,
            min_size=min_connections,
            max_size=max_connections,
            kwargs={"autocommit": True},
            configure=_configure,
            timeout=self._timeout,
            open=True,
            name=f"loom-{self.where}",
        )

    # --- the contract -----------------------------------------------------------------------

    def batch(self, ops: Sequence[Op], *, ctx: StoreContext | None = None) -> list[Any]:
        """Run `ops` in order in one transaction and return one result per op.

        Writes are all or nothing: if an op fails, nothing of the batch is written and the
        error names the op's index. A `ctx.deadline` that passes between ops fails the batch
        the same way."""
        ops = list(ops)
        if not ops:  # nothing to ask the server (memory's search asks for nothing, often)
            if self._pool is None:
                raise self._closed()
            return []
        deadline = ctx.deadline if ctx is not None else None
        writes = any(isinstance(op, _WRITES) for op in ops)
        guarded = writes or any(isinstance(op, Expect) for op in ops)
        for attempt in range(2):
            state = _Batch(seq=0, now=time.time())
            try:
                with self._connection() as conn:
                    if not guarded:
                        # Reads only: each statement on its own (no BEGIN / COMMIT round trips).
                        results = [
                            self._run_op(conn, state, index, op, deadline)
                            for index, op in enumerate(ops)
                        ]
                        state.sent_commit = True
                        return results
                    with conn.transaction():
                        state.seq = self._lock_seq(conn)
                        state.locked = True
                        if writes:
                            self._prefetch(conn, state, ops)
                        results = [
                            self._run_op(conn, state, index, op, deadline)
                            for index, op in enumerate(ops)
                        ]
                        self._finish(conn, state)
                        state.sent_commit = True
                    return results
            except psycopg.OperationalError as error:
                # The connection broke (server restart, failover, idle kill). Before COMMIT
                # was sent nothing was written: run the batch again, once, on a new
                # connection (the pool drops the broken one). A read-only batch is always
                # safe to run again.
                pool = self._pool
                if attempt == 0 and pool is not None and (not guarded or not state.sent_commit):
                    pool.check()  # the other idle connections may be as dead: replace them
                    continue
                raise StoreError(
                    f"the connection to {self.where} failed: {error}; "
                    + (
                        "the batch may or may not have committed (retry it: writes are by key)"
                        if guarded and state.sent_commit
                        else "nothing of the batch was written"
                    )
                ) from error
            except psycopg.Error as error:
                raise StoreError(
                    f"the batch on {self.where} failed to commit: {error}; nothing of it "
                    f"was written"
                ) from error
        raise AssertionError("unreachable")  # pragma: no cover

    async def abatch(self, ops: Sequence[Op], *, ctx: StoreContext | None = None) -> list[Any]:
        """`batch` in a worker thread on the same pool, so the event loop keeps running."""
        return await asyncio.to_thread(self.batch, list(ops), ctx=ctx)

    def close(self) -> None:
        """Close the pool's connections. Using the store afterwards raises `StoreError`;
        closing twice is harmless."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        pool = self._pool
        if pool is None:
            raise self._closed()
        try:
            with pool.connection() as conn:
                yield conn
        except PoolTimeout as error:
            raise StoreError(
                f"no connection to {self.where} within {self._timeout:g} s: {error}; is the "
                f"server up, and is `max_connections` large enough for the concurrent calls?"
            ) from error

    def _closed(self) -> StoreClosedError:
        return StoreClosedError(
            f"the PostgresStore at {self.where} is closed; open a new `PostgresStore` to use it"
        )

    # --- dispatch ---------------------------------------------------------------------------

    def _run_op(
        self,
        conn: psycopg.Connection[Any],
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
            self._flush_inserts(conn, state)  # what follows may read the new records
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
                return self._unembedded(conn, state, op)
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
        except psycopg.OperationalError:
            raise  # the connection: reported by `_connection`
        except psycopg.Error as error:
            raise StoreError(f"{where} failed in PostgreSQL: {error}") from error

    # --- the write lock and what a batch writes back ------------------------------------------

    @staticmethod
    def _lock_seq(conn: psycopg.Connection[Any]) -> int:
        row = conn.execute("SELECT value FROM loom_meta WHERE key = 'seq' FOR UPDATE").fetchone()
        assert row is not None
        return int(row[0])

    @staticmethod
    def _prefetch(conn: psycopg.Connection[Any], state: _Batch, ops: list[Op]) -> None:
        """Read the current rows of every record the batch puts, in one query."""
        wanted: set[tuple[str, str]] = set()
        for op in ops:
            if isinstance(op, Put):
                try:
                    wanted.add((_encode(check_namespace(op.record.namespace)), op.record.key))
                except StoreError:
                    continue  # the op itself reports it, with its index
        if len(wanted) < 2:
            return
        names, keys_ = [n for n, _ in wanted], [k for _, k in wanted]
        try:
            rows = conn.execute(
                "SELECT r.namespace, r.key, r.id, r.kind, r.text, r.text_seq, r.created_at "
                "FROM unnest(%s::text[], %s::text[]) AS w (namespace, key) "
                "JOIN records AS r ON r.namespace = w.namespace AND r.key = w.key",
                (names, keys_),
            ).fetchall()
        except (UnicodeEncodeError, psycopg.DataError):
            return  # a bad string: its put reports it, with its index
        state.existing = dict.fromkeys(wanted)
        for row in rows:
            state.existing[(row[0], row[1])] = tuple(row[2:])

    @staticmethod
    def _flush_inserts(conn: psycopg.Connection[Any], state: _Batch) -> None:
        """Insert the batch's pending new records and their postings, in one statement."""
        pending = state.pending
        if not pending:
            return
        post: list[list[Any]] = [[], [], [], [], [], []]
        for ns, _, kind, _, _, seq, length, counts in pending:
            for term, count in counts.items():
                for column, value in zip(
                    post, (seq, term, min(count, _MAX_TF), ns, kind, length), strict=True
                ):
                    column.append(value)
        rows = conn.execute(
            "WITH w AS (SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], "
            "%s::jsonb[], %s::bigint[], %s::int[]) AS w (ns, key, kind, text, data, seq, len)), "
            "r AS (INSERT INTO records (namespace, key, kind, text, data, seq, text_seq, "
            "created_at, updated_at, nterms) SELECT ns, key, kind, text, data, seq, seq, %s, %s, "
            "len FROM w RETURNING id, namespace, key, seq), "
            "p AS (INSERT INTO lexical_postings (term, record_id, namespace, kind, tf, nterms) "
            "SELECT u.term, r.id, u.ns, u.kind, u.tf, u.len FROM unnest(%s::bigint[], "
            "%s::text[], %s::real[], %s::text[], %s::text[], %s::int[]) AS u (seq, term, tf, ns, "
            "kind, len) JOIN r ON r.seq = u.seq) SELECT id, namespace, key, seq FROM r",
            (
                *([row[i] for row in pending] for i in range(7)),
                state.now,
                state.now,
                *post,
            ),
        ).fetchall()
        by_seq = {row[5]: row for row in pending}
        for record_id, ns, key, seq in rows:
            row = by_seq[seq]
            state.existing[(ns, key)] = (record_id, row[2], row[3], seq, state.now)
        state.pending = []
        state.pending_keys.clear()

    def _finish(self, conn: psycopg.Connection[Any], state: _Batch) -> None:
        self._flush_inserts(conn, state)
        self._flush_lexical(conn, state)
        conn.execute("UPDATE loom_meta SET value = %s WHERE key = 'seq'", (str(state.seq),))
        if state.changed:
            names = list(state.changed)
            conn.execute(
                "INSERT INTO namespaces (namespace, seq, deleted_seq) "
                "SELECT * FROM unnest(%s::text[], %s::bigint[], %s::bigint[]) "
                "ON CONFLICT (namespace) DO UPDATE SET seq = excluded.seq, "
                "deleted_seq = greatest(namespaces.deleted_seq, excluded.deleted_seq)",
                (
                    names,
                    [state.changed[n] for n in names],
                    [state.deleted.get(n, 0) for n in names],
                ),
            )

    @staticmethod
    def _flush_lexical(conn: psycopg.Connection[Any], state: _Batch) -> None:
        """Write the pending term statistics (before a search reads them, and at commit)."""
        deltas = sorted((t, d) for t, d in state.df.items() if d)
        if deltas:
            bounds = [state.bounds.get(t, (0, 2**31 - 1)) for t, _ in deltas]
            conn.execute(
                "INSERT INTO lexical_terms (term, df, max_tf, min_len) "
                "SELECT * FROM unnest(%s::text[], %s::bigint[], %s::int[], %s::int[]) "
                "ON CONFLICT (term) DO UPDATE SET df = lexical_terms.df + excluded.df, "
                "max_tf = greatest(lexical_terms.max_tf, excluded.max_tf), "
                "min_len = least(lexical_terms.min_len, excluded.min_len)",
                (
                    [t for t, _ in deltas],
                    [d for _, d in deltas],
                    [b[0] for b in bounds],
                    [b[1] for b in bounds],
                ),
            )
        state.df.clear()
        state.bounds.clear()
        if state.texts or state.total_len:
            conn.execute(
                "UPDATE loom_meta SET value = (value::bigint + CASE key WHEN 'texts' THEN %s "
                "ELSE %s END)::text WHERE key IN ('texts', 'total_len')",
                (state.texts, state.total_len),
            )
            state.texts = state.total_len = 0

    # --- writes -------------------------------------------------------------------------------

    def _put(self, conn: psycopg.Connection[Any], state: _Batch, op: Put) -> Record:
        record = op.record
        namespace = check_namespace(record.namespace)
        encoded, data_json = _checked(record, namespace)
        fields = {"namespace": encoded, "key": record.key, "kind": record.kind}
        for name, value in {**fields, "text": record.text, "data": data_json}.items():
            if "\x00" in value or (name == "data" and _NUL_ESCAPE.search(value)):
                raise ConfigError(
                    f"the `{name}` of record {record.key!r} holds the NUL character (U+0000), "
                    f"which PostgreSQL cannot store; remove it (s.replace('\\x00', ''))"
                )
        state.seq += 1
        seq, now = state.seq, state.now
        state.changed[encoded] = seq
        where = (encoded, record.key)
        if where in state.pending_keys:
            self._flush_inserts(conn, state)  # the same key twice in a batch
        if where in state.existing:
            row = state.existing[where]
        else:
            row = conn.execute(
                "SELECT id, kind, text, text_seq, created_at FROM records "
                "WHERE namespace = %s AND key = %s",
                where,
            ).fetchone()
        if row is None:
            # New records are inserted together, with their postings, in one statement
            # (`_flush_inserts`) before anything else reads or writes.
            counts, length = self._analyze(state, record.text)
            state.pending.append(
                (encoded, record.key, record.kind, record.text, data_json, seq, length, counts)
            )
            state.existing.pop(where, None)
            state.pending_keys.add(where)
            created_at = now
        else:
            record_id, old_kind, old_text, text_seq, created_at = row
            if record.text != old_text:
                text_seq = seq
                self._unindex_text(conn, state, record_id)
                for set_id, _ in self._vector_sets(conn, state).values():
                    conn.execute(
                        sql.SQL("DELETE FROM {} WHERE record_id = %s").format(_table(set_id)),
                        (record_id,),
                    )
            elif record.kind != old_kind:
                conn.execute(
                    "UPDATE lexical_postings SET kind = %s WHERE record_id = %s",
                    (record.kind, record_id),
                )
                for set_id, _ in self._vector_sets(conn, state).values():
                    conn.execute(
                        sql.SQL("UPDATE {} SET kind = %s, seq = %s WHERE record_id = %s").format(
                            _table(set_id)
                        ),
                        (record.kind, seq, record_id),
                    )
            conn.execute(
                "UPDATE records SET kind = %s, text = %s, data = %s::jsonb, seq = %s, "
                "text_seq = %s, updated_at = %s WHERE id = %s",
                (record.kind, record.text, data_json, seq, text_seq, now, record_id),
            )
            if record.text != old_text:
                self._index_text(conn, state, record_id, encoded, record.kind, record.text)
            state.existing[where] = (record_id, record.kind, record.text, text_seq, created_at)
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

    @staticmethod
    def _analyze(state: _Batch, text: str) -> tuple[Counter[str], int]:
        """The indexed terms of `text` with their counts, and its length; counted in the
        batch's pending statistics."""
        analyzed = terms(text) if text else []
        counts = _pg_lexical.term_counts(analyzed)
        if analyzed:
            state.df.update(dict.fromkeys(counts, 1))
            length = len(analyzed)
            bounds = state.bounds
            for term, count in counts.items():
                tf, shortest = bounds.get(term, (0, length))
                bounds[term] = (max(tf, min(count, _MAX_TF)), min(shortest, length))
            state.texts += 1
            state.total_len += len(analyzed)
        return counts, len(analyzed)

    def _index_text(
        self,
        conn: psycopg.Connection[Any],
        state: _Batch,
        record_id: int,
        namespace: str,
        kind: str,
        text: str,
    ) -> None:
        counts, length = self._analyze(state, text)
        if not length:
            return
        conn.execute(
            "INSERT INTO lexical_postings (term, record_id, namespace, kind, tf, nterms) "
            "SELECT t, %s, %s, %s, tf, %s FROM unnest(%s::text[], %s::real[]) AS u (t, tf)",
            (
                record_id,
                namespace,
                kind,
                length,
                list(counts),
                [min(c, _MAX_TF) for c in counts.values()],
            ),
        )
        conn.execute("UPDATE records SET nterms = %s WHERE id = %s", (length, record_id))

    @staticmethod
    def _unindex_text(conn: psycopg.Connection[Any], state: _Batch, record_id: int) -> None:
        rows = conn.execute(
            "DELETE FROM lexical_postings WHERE record_id = %s RETURNING term, nterms",
            (record_id,),
        ).fetchall()
        if not rows:
            return
        state.df.subtract(dict.fromkeys((term for term, _ in rows), 1))
        state.texts -= 1
        state.total_len -= int(rows[0][1])

    def _delete(self, conn: psycopg.Connection[Any], state: _Batch, op: Delete) -> bool:
        namespace = check_namespace(op.namespace)
        encoded = _encode(namespace)
        row = conn.execute(
            "SELECT id FROM records WHERE namespace = %s AND key = %s", (encoded, op.key)
        ).fetchone()
        if row is None:
            return False
        self._unindex_text(conn, state, row[0])
        conn.execute("DELETE FROM records WHERE id = %s", (row[0],))  # cascades to vectors
        state.existing[(encoded, op.key)] = None
        state.seq += 1  # a delete changes the namespace: it takes a seq, for its version
        state.changed[encoded] = state.deleted[encoded] = state.seq
        return True

    def _vector_sets(
        self, conn: psycopg.Connection[Any], state: _Batch
    ) -> dict[str, tuple[int, int]]:
        if state.vector_sets is None:
            state.vector_sets = {
                model: (set_id, dim)
                for model, set_id, dim in conn.execute("SELECT model, id, dim FROM vector_sets")
            }
        return state.vector_sets

    def _put_vectors(self, conn: psycopg.Connection[Any], state: _Batch, op: PutVectors) -> int:
        _check_str("model", op.model)
        vectors = _float32(op.vectors, "vectors")
        if vectors.ndim != 2 or vectors.shape[0] != len(op.items) or vectors.shape[1] < 1:
            raise ConfigError(
                f"`vectors` must be a 2-d array with one row per item ({len(op.items)} "
                f"items), got shape {vectors.shape}"
            )
        dim = int(vectors.shape[1])
        for namespace, _, _ in op.items:
            check_namespace(namespace)
        set_id = self._vector_set(conn, state, op.model, dim)
        if not op.items:
            return 0
        found = conn.execute(
            "SELECT i.n, r.id, r.namespace, r.kind, r.text_seq FROM "
            "unnest(%s::text[], %s::text[], %s::bigint[]) WITH ORDINALITY AS i (ns, key, read, n) "
            "JOIN records AS r ON r.namespace = i.ns AND r.key = i.key "
            "WHERE r.text_seq <= i.read ORDER BY i.n",
            (
                [_encode(ns) for ns, _, _ in op.items],
                [key for _, key, _ in op.items],
                [read for _, _, read in op.items],
            ),
        ).fetchall()
        if not found:
            return 0
        units = _normalise(vectors)
        rows = []
        for n, record_id, namespace, kind, _ in found:
            state.seq += 1
            rows.append((record_id, namespace, kind, units[n - 1], state.seq))
        with conn.cursor() as cur:
            cur.executemany(
                sql.SQL(
                    "INSERT INTO {} (record_id, namespace, kind, embedding, seq) "
                    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (record_id) DO UPDATE SET "
                    "embedding = excluded.embedding, seq = excluded.seq"
                ).format(_table(set_id)),
                rows,
            )
        return len(rows)

    def _vector_set(
        self, conn: psycopg.Connection[Any], state: _Batch, model: str, dim: int
    ) -> int:
        """The id of `model`'s vector table, created (or re-dimensioned while empty) so
        that it holds `dim`-d vectors."""
        sets = self._vector_sets(conn, state)
        known = sets.get(model)
        if known is not None:
            set_id, stored_dim = known
            if stored_dim == dim:
                return set_id
            table = _table(set_id)
            if conn.execute(sql.SQL("SELECT 1 FROM {} LIMIT 1").format(table)).fetchone():
                raise StoreError(
                    f"model {model!r} has {stored_dim}-d vectors in this store, got {dim}-d "
                    f"ones; embed with the same model, or store these under another model name"
                )
            conn.execute(sql.SQL("DROP TABLE {}").format(table))
            conn.execute("DELETE FROM vector_sets WHERE model = %s", (model,))
            self._models.pop(model, None)
        row = conn.execute(
            "INSERT INTO vector_sets (model, dim) VALUES (%s, %s) RETURNING id", (model, dim)
        ).fetchone()
        assert row is not None
        set_id = int(row[0])
        table = _table(set_id)
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (record_id bigint PRIMARY KEY REFERENCES records (id) "
                'ON DELETE CASCADE, namespace text COLLATE "C" NOT NULL, kind text NOT NULL, '
                "embedding vector({}) NOT NULL, seq bigint NOT NULL)"
            ).format(table, sql.Literal(dim))
        )
        conn.execute(sql.SQL("CREATE INDEX ON {} (namespace)").format(table))
        if dim <= _HNSW_MAX_DIM:
            conn.execute(
                sql.SQL("CREATE INDEX ON {} USING hnsw (embedding vector_ip_ops)").format(table)
            )
        sets[model] = (set_id, dim)
        return set_id

    # --- reads --------------------------------------------------------------------------------

    def _get(self, conn: psycopg.Connection[Any], op: Get) -> Record | None:
        namespace = check_namespace(op.namespace)
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM records WHERE namespace = %s AND key = %s",
            (_encode(namespace), op.key),
        ).fetchone()
        return None if row is None else _record(row)

    def _version(
        self, conn: psycopg.Connection[Any], state: _Batch, namespace: Namespace
    ) -> NamespaceVersion:
        encoded = _encode(check_namespace(namespace))
        row = conn.execute(
            "SELECT seq, deleted_seq FROM namespaces WHERE namespace = %s", (encoded,)
        ).fetchone()
        seq, deleted = (0, 0) if row is None else row
        return NamespaceVersion(
            seq=state.changed.get(encoded, seq), deleted_seq=state.deleted.get(encoded, deleted)
        )

    def _expect(self, conn: psycopg.Connection[Any], state: _Batch, op: Expect) -> None:
        if isinstance(op.seq, bool) or not isinstance(op.seq, int):
            raise ConfigError(
                f"`Expect.seq` must be an int (a `NamespaceVersion.seq`), got {op.seq!r}"
            )
        assert state.locked  # a batch with a guard takes the write lock first (`batch`)
        current = self._version(conn, state, op.namespace).seq
        if current != op.seq:
            raise ConflictError(
                f"namespace {op.namespace!r} is at version {current}, not {op.seq} as expected: "
                f"another writer changed it; nothing of the batch was written (read it again "
                f"and retry)"
            )

    def _scan(self, conn: psycopg.Connection[Any], op: Scan) -> list[Record]:
        prefix = check_namespace(op.prefix, prefix=not op.exact)
        clauses, params = _filters(prefix, op.kind, exact=op.exact)
        for name, value in op.where.items():
            if not isinstance(name, str) or not name or '"' in name or "\\" in name:
                raise ConfigError(
                    f"`where` keys must be non-empty strings without '\"' or '\\\\', got {name!r}"
                )
            if not isinstance(value, str | int | float):  # bool is an int
                raise ConfigError(
                    f"`where` values must be str, int, float or bool, got {value!r} for {name!r}"
                )
            # As SQLite's json_extract compares: true and false are 1 and 0.
            matches = [json.dumps(value)]
            if not isinstance(value, str) and value in (0, 1):
                matches = ["true" if value else "false", "1" if value else "0"]
            clauses.append(
                sql.SQL("data -> {} = ANY({}::jsonb[])").format(
                    sql.Placeholder(), sql.Placeholder()
                )
            )
            params += [name, matches]
        if op.after_seq:
            if isinstance(op.after_seq, bool) or not isinstance(op.after_seq, int):
                raise ConfigError(f"`after_seq` must be an int, got {op.after_seq!r}")
            clauses.append(sql.SQL("seq > %s"))
            params.append(op.after_seq)
        query = sql.SQL("SELECT {} FROM records{} ORDER BY seq {}").format(
            sql.SQL(_COLUMNS), _where(clauses), sql.SQL("DESC" if op.newest_first else "ASC")
        )
        if op.limit is not None:
            query += sql.SQL(" LIMIT %s")
            params.append(_check_limit(op.limit))
        return [_record(row) for row in conn.execute(query, params)]

    def _search(self, conn: psycopg.Connection[Any], state: _Batch, op: Search) -> list[Hit]:
        prefix = check_namespace(op.prefix, prefix=not op.exact)
        limit = _check_limit(op.limit)
        query_terms = [t for t in terms(op.query) if t in _pg_lexical.term_counts([t])]
        if not query_terms or limit == 0:
            return []
        self._flush_lexical(conn, state)  # the batch's own writes count
        clauses, params = _filters(prefix, op.kind, exact=op.exact)
        named: dict[str, Any] = {f"f{i}": value for i, value in enumerate(params)}
        filters = "".join(
            " AND " + clause.format(*(f"%(f{i})s" for i in range(n0, n1)))
            for clause, (n0, n1) in _spans(clauses)
        )
        found = _pg_lexical.search_ids(
            conn, query_terms, filters=filters, params=named, limit=limit, local=op.exact
        )
        return self._hits(conn, state, found)

    def _vector_search(
        self, conn: psycopg.Connection[Any], state: _Batch, op: VectorSearch
    ) -> list[Hit]:
        prefix = check_namespace(op.prefix, prefix=not op.exact)
        _check_str("model", op.model)
        limit = _check_limit(op.limit)
        query = _float32(op.vector, "vector")
        if query.ndim != 1:
            raise ConfigError(f"the query `vector` must be 1-d, got shape {query.shape}")
        known = self._model(conn, state, op.model)
        if known is not None and known[1] != query.shape[0] and op.model in self._models:
            # Known from an earlier read: the model may have been re-made since (see
            # `_vector_set`); look again before calling the query wrong.
            del self._models[op.model]
            known = self._model(conn, state, op.model)
        if known is None or limit == 0:
            return []
        set_id, dim = known
        if query.shape[0] != dim:
            raise StoreError(
                f"the query vector has {query.shape[0]} dimensions but model {op.model!r} "
                f"stores {dim}-d vectors; embed the query with the same model"
            )
        clauses, params = _filters(prefix, op.kind, exact=op.exact)
        unit = _normalise(query.reshape(1, -1))[0]
        # Relaxed order: the index may hand rows slightly out of order; sort them exactly.
        columns = sql.SQL(", ").join(sql.SQL("r." + c) for c in _COLUMNS.split(", "))
        query_sql = sql.SQL(
            "SELECT {}, v.score FROM (SELECT record_id, -(embedding <#> %s) AS score FROM {}{} "
            "ORDER BY embedding <#> %s LIMIT %s) AS v JOIN records AS r ON r.id = v.record_id "
            "ORDER BY v.score DESC, r.id"
        ).format(columns, _table(set_id), _where(clauses))
        try:
            rows = conn.execute(query_sql, [unit, *params, unit, limit]).fetchall()
        except psycopg.errors.UndefinedTable:
            # Another worker re-made the model's (empty) table: look it up again.
            self._models.pop(op.model, None)
            if state.locked:
                raise
            return self._vector_search(conn, state, op)
        return [Hit(record=_record(row[:-1]), score=float(row[-1])) for row in rows]

    def _model(
        self, conn: psycopg.Connection[Any], state: _Batch, model: str
    ) -> tuple[int, int] | None:
        """(vector set id, dim) of `model`, or None. Writers read it under the write lock;
        readers keep what they found (a set changes only while empty: see `_vector_set`)."""
        if state.locked:
            return self._vector_sets(conn, state).get(model)
        known = self._models.get(model)
        if known is None:
            row = conn.execute(
                "SELECT id, dim FROM vector_sets WHERE model = %s", (model,)
            ).fetchone()
            if row is None:
                return None
            known = self._models[model] = (int(row[0]), int(row[1]))
        return known

    def _hits(
        self, conn: psycopg.Connection[Any], state: _Batch, found: list[tuple[int, float, int]]
    ) -> list[Hit]:
        """`Hit`s for (record id, score, seq) triples, in their order.

        Reading and decoding the records was a quarter of a window build's store time, and
        the same records come back search after search (an agent re-retrieves before every
        model call). So the last `record_cache` records read are kept decoded, by id, and
        one is used only while its `seq` is the one the search found: every write gives a
        record a new seq, whichever worker made it, so a record changed since is read
        again. Only committed records are kept (not those read inside a write batch's
        transaction, whose seqs a rollback would hand out again)."""
        if not found:
            return []
        cache = self._records
        with self._cache_lock:
            known = {}
            for record_id, _, seq in found:
                record = cache.get(record_id)
                if record is not None and record.seq == seq:
                    known[record_id] = record
                    cache.move_to_end(record_id)
        missing = [record_id for record_id, _, _ in found if record_id not in known]
        if missing:
            rows = conn.execute(
                f"SELECT id, {_COLUMNS} FROM records WHERE id = ANY(%s::bigint[])", (missing,)
            ).fetchall()
            fetched = {row[0]: _record(row[1:]) for row in rows}
            known |= fetched
            if self.record_cache and not state.locked:
                with self._cache_lock:
                    cache.update(fetched)
                    while len(cache) > self.record_cache:
                        cache.popitem(last=False)
        # A record deleted since the search found it is left out.
        return [Hit(record=known[r], score=s) for r, s, _ in found if r in known]

    def _unembedded(
        self, conn: psycopg.Connection[Any], state: _Batch, op: Unembedded
    ) -> list[Record]:
        prefix = check_namespace(op.prefix, prefix=not op.exact)
        _check_str("model", op.model)
        if isinstance(op.after_seq, bool) or not isinstance(op.after_seq, int):
            raise ConfigError(f"`after_seq` must be an int, got {op.after_seq!r}")
        clauses, params = _filters(prefix, None, exact=op.exact, column="r.")
        clauses.append(sql.SQL("r.text != ''"))
        if op.after_seq:
            clauses.append(sql.SQL("r.seq > %s"))
            params.append(op.after_seq)
        known = self._model(conn, state, op.model)
        if known is not None:
            clauses.append(
                sql.SQL("NOT EXISTS (SELECT 1 FROM {} AS v WHERE v.record_id = r.id)").format(
                    _table(known[0])
                )
            )
        params.append(_check_limit(op.limit))
        columns = sql.SQL(", ").join(sql.SQL("r." + c) for c in _COLUMNS.split(", "))
        query = sql.SQL("SELECT {} FROM records AS r{} ORDER BY r.seq LIMIT %s").format(
            columns, _where(clauses)
        )
        return [_record(row) for row in conn.execute(query, params)]


# --- helpers --------------------------------------------------------------------------------


def _configure(conn: psycopg.Connection[Any]) -> None:
    """Set up a new pooled connection: pgvector's types, and iterative index scans so that
    a filtered vector search still returns `limit` rows (pgvector >= 0.8)."""
    register_vector(conn)
    conn.execute("SET hnsw.iterative_scan = relaxed_order")
    conn.execute(sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(_EF_SEARCH)))


def _table(set_id: int) -> sql.Identifier:
    return sql.Identifier(f"vectors_{int(set_id)}")


def _describe(params: dict[str, Any]) -> str:
    """Where a connection goes, for messages: never the password."""
    host = params.get("host") or "localhost"
    port = params.get("port")
    database = params.get("dbname") or params.get("user") or "postgres"
    return f"postgresql://{host}{f':{port}' if port else ''}/{database}"


def _record(row: Sequence[Any]) -> Record:
    namespace, key, kind, text, data, seq, created_at, updated_at = row
    return Record(
        namespace=_decode(namespace),
        key=key,
        kind=kind,
        text=text,
        data=data,
        seq=seq,
        created_at=created_at,
        updated_at=updated_at,
    )


def _filters(
    prefix: Namespace, kind: str | None, *, exact: bool, column: str = ""
) -> tuple[list[sql.Composable], list[Any]]:
    """Conditions (each with ``%s`` placeholders, in order) on namespace and kind."""
    clauses: list[sql.Composable] = []
    params: list[Any] = []
    bounds = _prefix_range(prefix)
    if exact:
        clauses.append(sql.SQL(f"{column}namespace = %s"))
        params.append(_encode(prefix))
    elif bounds is not None:
        clauses.append(sql.SQL(f"{column}namespace >= %s AND {column}namespace < %s"))
        params += bounds
    if kind is not None:
        _check_str("kind", kind)
        clauses.append(sql.SQL(f"{column}kind = %s"))
        params.append(kind)
    return clauses, params


def _where(clauses: list[sql.Composable]) -> sql.Composable:
    if not clauses:
        return sql.SQL("")
    return sql.SQL(" WHERE ") + sql.SQL(" AND ").join(clauses)


def _spans(clauses: list[sql.Composable]) -> Iterator[tuple[str, tuple[int, int]]]:
    """Each clause of `_filters` as text with its ``%s`` turned into ``{}``, and the index
    range of its parameters, to name them for a query that takes named parameters."""
    start = 0
    for clause in clauses:
        assert isinstance(clause, sql.SQL)
        text = clause.as_string()
        count = text.count("%s")
        yield text.replace("%s", "{}"), (start, start + count)
        start += count


def _normalise(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Unit rows (a zero row stays zero: it scores 0 against everything), as SQLite's index."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1
    unit: npt.NDArray[np.float32] = (vectors / norms).astype(np.float32, copy=False)
    return unit

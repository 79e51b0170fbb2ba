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
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from loomctx.errors import ConfigError, StoreClosedError, StoreError
from loomctx.stores._codec import (
    COLUMNS,
    check_limit,
    check_seq,
    check_str,
    check_vectors,
    check_where,
    checked,
    encode,
    query_vector,
    record_from_row,
    stored,
    wrong_dim,
)
from loomctx.stores._dispatch import NOTHING_FOUND, WRITES, OpDispatcher, check_record_cache, found
from loomctx.stores.base import (
    BaseStore,
    Delete,
    Expect,
    Found,
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

try:
    import pgvector.psycopg  # noqa: F401  (used by `_pg_sql`: checked here, with the extra's name)
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as error:  # pragma: no cover - exercised without the extra installed
    raise ImportError(
        f"`PostgresStore` needs the postgres extra: pip install 'loomctx[postgres]' ({error})"
    ) from error

from loomctx.stores import _pg_lexical, _pg_sql
from loomctx.stores._pg_batch import (
    PgBatch,
    analyze,
    finish,
    flush_inserts,
    flush_lexical,
    index_text,
    lock_seq,
    prefetch,
    unindex_text,
    vector_sets,
)
from loomctx.stores._pg_schema import migrate

__all__ = ["PostgresStore"]


class PostgresStore(BaseStore, OpDispatcher["psycopg.Connection[Any]", PgBatch]):
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
        check_record_cache(record_cache)
        try:
            params = conninfo_to_dict(url)
        except psycopg.ProgrammingError as error:
            raise ConfigError(f"`url` is not a PostgreSQL connection URL: {error}") from error
        self.where = _pg_sql.describe(params)
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
            configure=_pg_sql.configure,
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
        writes = any(isinstance(op, WRITES) for op in ops)
        guarded = writes or any(isinstance(op, Expect) for op in ops)
        for attempt in range(2):
            state = PgBatch(seq=0, now=time.time())
            try:
                with self._connection() as conn:
                    if not guarded:
                        # Reads only: each statement on its own (no BEGIN / COMMIT round trips).
                        results = [
                            self.run_op(conn, state, index, op, deadline)
                            for index, op in enumerate(ops)
                        ]
                        state.sent_commit = True
                        return results
                    with conn.transaction():
                        state.seq = lock_seq(conn)
                        state.locked = True
                        if writes:
                            prefetch(conn, state, ops)
                        results = [
                            self.run_op(conn, state, index, op, deadline)
                            for index, op in enumerate(ops)
                        ]
                        finish(conn, state)
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

    # --- dispatch (`OpDispatcher`) ----------------------------------------------------------

    engine = "PostgreSQL"
    engine_error = psycopg.Error
    passthrough = (psycopg.OperationalError,)  # the connection: reported by `batch`
    param = "%s"
    fetch_checks_seqs = True

    def _before_op(self, conn: psycopg.Connection[Any], state: PgBatch, op: Op) -> None:
        if not isinstance(op, Put):
            flush_inserts(conn, state)  # what follows may read the new records

    def _record(self, row: Any) -> Record:
        return record_from_row(row, json_text=False)  # psycopg decodes ``jsonb``

    def _put(self, conn: psycopg.Connection[Any], state: PgBatch, op: Put) -> Record:
        record = op.record
        namespace = check_namespace(record.namespace)
        encoded, data_json = checked(record, namespace)
        _pg_sql.check_nul(record, encoded, data_json)
        state.seq += 1
        seq, now = state.seq, state.now
        state.changed[encoded] = seq
        where = (encoded, record.key)
        if where in state.pending_keys:
            flush_inserts(conn, state)  # the same key twice in a batch
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
            counts, length = analyze(state, record.text)
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
                unindex_text(conn, state, record_id)
                for set_id, _ in vector_sets(conn, state).values():
                    conn.execute(
                        sql.SQL("DELETE FROM {} WHERE record_id = %s").format(
                            _pg_sql.table(set_id)
                        ),
                        (record_id,),
                    )
            elif record.kind != old_kind:
                conn.execute(
                    "UPDATE lexical_postings SET kind = %s WHERE record_id = %s",
                    (record.kind, record_id),
                )
                for set_id, _ in vector_sets(conn, state).values():
                    conn.execute(
                        sql.SQL("UPDATE {} SET kind = %s, seq = %s WHERE record_id = %s").format(
                            _pg_sql.table(set_id)
                        ),
                        (record.kind, seq, record_id),
                    )
            conn.execute(
                "UPDATE records SET kind = %s, text = %s, data = %s::jsonb, seq = %s, "
                "text_seq = %s, updated_at = %s WHERE id = %s",
                (record.kind, record.text, data_json, seq, text_seq, now, record_id),
            )
            if record.text != old_text:
                index_text(conn, state, record_id, encoded, record.kind, record.text)
            state.existing[where] = (record_id, record.kind, record.text, text_seq, created_at)
        return stored(record, namespace, data_json, seq=seq, created_at=created_at, now=now)

    def _delete(self, conn: psycopg.Connection[Any], state: PgBatch, op: Delete) -> bool:
        namespace = check_namespace(op.namespace)
        encoded = encode(namespace)
        row = conn.execute(
            "SELECT id FROM records WHERE namespace = %s AND key = %s", (encoded, op.key)
        ).fetchone()
        if row is None:
            return False
        unindex_text(conn, state, row[0])
        conn.execute("DELETE FROM records WHERE id = %s", (row[0],))  # cascades to vectors
        state.existing[(encoded, op.key)] = None
        state.seq += 1  # a delete changes the namespace: it takes a seq, for its version
        state.changed[encoded] = state.deleted[encoded] = state.seq
        return True

    def _put_vectors(self, conn: psycopg.Connection[Any], state: PgBatch, op: PutVectors) -> int:
        vectors = check_vectors(op)
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
                [encode(ns) for ns, _, _ in op.items],
                [key for _, key, _ in op.items],
                [read for _, _, read in op.items],
            ),
        ).fetchall()
        if not found:
            return 0
        units = _pg_sql.normalise(vectors)
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
                ).format(_pg_sql.table(set_id)),
                rows,
            )
        return len(rows)

    def _vector_set(
        self, conn: psycopg.Connection[Any], state: PgBatch, model: str, dim: int
    ) -> int:
        """The id of `model`'s vector table, created (or re-dimensioned while empty) so
        that it holds `dim`-d vectors."""
        sets = vector_sets(conn, state)
        known = sets.get(model)
        if known is not None:
            set_id, stored_dim = known
            if stored_dim == dim:
                return set_id
            table = _pg_sql.table(set_id)
            if conn.execute(sql.SQL("SELECT 1 FROM {} LIMIT 1").format(table)).fetchone():
                raise wrong_dim(model, stored_dim, dim, query=False)
            conn.execute(sql.SQL("DROP TABLE {}").format(table))
            conn.execute("DELETE FROM vector_sets WHERE model = %s", (model,))
            self._models.pop(model, None)
        set_id = _pg_sql.create_vector_table(conn, model, dim)
        sets[model] = (set_id, dim)
        return set_id

    # --- reads --------------------------------------------------------------------------------

    def _scan(self, conn: psycopg.Connection[Any], state: PgBatch, op: Scan) -> list[Record]:
        prefix = check_namespace(op.prefix, prefix=not op.exact)
        clauses, params = _pg_sql.filters(prefix, op.kind, exact=op.exact)
        for name, value in op.where.items():
            check_where(name, value)
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
            check_seq(op.after_seq, "after_seq")
            clauses.append(sql.SQL("seq > %s"))
            params.append(op.after_seq)
        query = sql.SQL("SELECT {} FROM records{} ORDER BY seq {}").format(
            sql.SQL(COLUMNS), _pg_sql.where(clauses), sql.SQL("DESC" if op.newest_first else "ASC")
        )
        if op.limit is not None:
            query += sql.SQL(" LIMIT %s")
            params.append(check_limit(op.limit))
        return [self._record(row) for row in conn.execute(query, params)]

    def _lexical_found(self, conn: psycopg.Connection[Any], state: PgBatch, op: Search) -> Found:
        prefix = check_namespace(op.prefix, prefix=not op.exact)
        limit = check_limit(op.limit)
        query_terms = [t for t in terms(op.query) if t in _pg_lexical.term_counts([t])]
        if not query_terms or limit == 0:
            return NOTHING_FOUND
        flush_lexical(conn, state)  # the batch's own writes count
        clauses, params = _pg_sql.filters(prefix, op.kind, exact=op.exact)
        named: dict[str, Any] = {f"f{i}": value for i, value in enumerate(params)}
        filters = "".join(
            " AND " + clause.format(*(f"%(f{i})s" for i in range(n0, n1)))
            for clause, (n0, n1) in _pg_sql.spans(clauses)
        )
        hits = _pg_lexical.search_ids(
            conn, query_terms, filters=filters, params=named, limit=limit, local=op.exact
        )
        return found([h[0] for h in hits], [h[2] for h in hits], [h[1] for h in hits])

    def _vector_found(
        self, conn: psycopg.Connection[Any], state: PgBatch, op: VectorSearch
    ) -> Found:
        prefix = check_namespace(op.prefix, prefix=not op.exact)
        query, limit = query_vector(op)
        known = self._model(conn, state, op.model)
        if known is not None and known[1] != query.shape[0] and op.model in self._models:
            # Known from an earlier read: the model may have been re-made since (see
            # `_vector_set`); look again before calling the query wrong.
            del self._models[op.model]
            known = self._model(conn, state, op.model)
        if known is None or limit == 0:
            return NOTHING_FOUND
        set_id, dim = known
        if query.shape[0] != dim:
            raise wrong_dim(op.model, dim, query.shape[0], query=True)
        clauses, params = _pg_sql.filters(prefix, op.kind, exact=op.exact)
        unit = _pg_sql.normalise(query.reshape(1, -1))[0]
        # Relaxed order: the index may hand rows slightly out of order; sort them exactly.
        query_sql = sql.SQL(
            "SELECT r.id, r.seq, v.score FROM (SELECT record_id, -(embedding <#> %s) AS score "
            "FROM {}{} ORDER BY embedding <#> %s LIMIT %s) AS v JOIN records AS r "
            "ON r.id = v.record_id ORDER BY v.score DESC, r.id"
        ).format(_pg_sql.table(set_id), _pg_sql.where(clauses))
        try:
            rows = conn.execute(query_sql, [unit, *params, unit, limit]).fetchall()
        except psycopg.errors.UndefinedTable:
            # Another worker re-made the model's (empty) table: look it up again.
            self._models.pop(op.model, None)
            if state.locked:
                raise
            return self._vector_found(conn, state, op)
        return found([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])

    def _model(
        self, conn: psycopg.Connection[Any], state: PgBatch, model: str
    ) -> tuple[int, int] | None:
        """(vector set id, dim) of `model`, or None. Writers read it under the write lock;
        readers keep what they found (a set changes only while empty: see `_vector_set`)."""
        if state.locked:
            return vector_sets(conn, state).get(model)
        known = self._models.get(model)
        if known is None:
            row = conn.execute(
                "SELECT id, dim FROM vector_sets WHERE model = %s", (model,)
            ).fetchone()
            if row is None:
                return None
            known = self._models[model] = (int(row[0]), int(row[1]))
        return known

    def _records_at(
        self,
        conn: psycopg.Connection[Any],
        state: PgBatch,
        ids: list[int],
        seqs: list[int],
        *,
        lazy: bool,
    ) -> dict[int, Record]:
        """The records at `ids`, by id (`lazy` is not needed: reading is the cost here).

        Reading and decoding the records was a quarter of a window build's store time, and
        the same records come back search after search (an agent re-retrieves before every
        model call). So the last `record_cache` records read are kept decoded, by id, and
        one is used only while its `seq` is the one the search found: every write gives a
        record a new seq, whichever worker made it, so a record changed since is read
        again. Only committed records are kept (not those read inside a write batch's
        transaction, whose seqs a rollback would hand out again)."""
        cache = self._records
        with self._cache_lock:
            known = {}
            for record_id, seq in zip(ids, seqs, strict=True):
                record = cache.get(record_id)
                if record is not None and record.seq == seq:
                    known[record_id] = record
                    cache.move_to_end(record_id)
        missing = [record_id for record_id in ids if record_id not in known]
        if missing:
            rows = conn.execute(
                f"SELECT id, {COLUMNS} FROM records WHERE id = ANY(%s::bigint[])", (missing,)
            ).fetchall()
            fetched = {row[0]: self._record(row[1:]) for row in rows}
            known |= fetched
            if self.record_cache and not state.locked:
                with self._cache_lock:
                    cache.update(fetched)
                    while len(cache) > self.record_cache:
                        cache.popitem(last=False)
        return known

    def _unembedded(
        self, conn: psycopg.Connection[Any], state: PgBatch, op: Unembedded
    ) -> list[Record]:
        prefix = check_namespace(op.prefix, prefix=not op.exact)
        check_str("model", op.model)
        check_seq(op.after_seq, "after_seq")
        clauses, params = _pg_sql.filters(prefix, None, exact=op.exact, column="r.")
        clauses.append(sql.SQL("r.text != ''"))
        if op.after_seq:
            clauses.append(sql.SQL("r.seq > %s"))
            params.append(op.after_seq)
        known = self._model(conn, state, op.model)
        if known is not None:
            clauses.append(
                sql.SQL("NOT EXISTS (SELECT 1 FROM {} AS v WHERE v.record_id = r.id)").format(
                    _pg_sql.table(known[0])
                )
            )
        params.append(check_limit(op.limit))
        columns = sql.SQL(", ").join(sql.SQL("r." + c) for c in COLUMNS.split(", "))
        query = sql.SQL("SELECT {} FROM records AS r{} ORDER BY r.seq LIMIT %s").format(
            columns, _pg_sql.where(clauses)
        )
        return [self._record(row) for row in conn.execute(query, params)]

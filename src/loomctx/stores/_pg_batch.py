"""What a write batch of `PostgresStore` collects, and writes back in few statements.

A write batch holds the store's write lock (`lock_seq`), so nothing else changes the rows
it reads: it reads the records its puts will find in one query (`prefetch`), inserts its new
records with their postings in one statement (`flush_inserts`, before any other op reads),
and adds its term statistics up and writes them once (`flush_lexical`, before a search and
at commit), with the namespace versions it moved (`finish`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

import psycopg

from loomctx.errors import StoreError
from loomctx.stores import _pg_lexical
from loomctx.stores._codec import encode
from loomctx.stores._dispatch import BatchState
from loomctx.stores.base import Op, Put, check_namespace
from loomctx.text import terms

__all__ = [
    "MAX_TF",
    "PgBatch",
    "analyze",
    "finish",
    "flush_inserts",
    "flush_lexical",
    "index_text",
    "lock_seq",
    "prefetch",
    "unindex_text",
    "vector_sets",
]

MAX_TF: Final = 255  # a term's count in a text is kept to this (``tf`` is a small int)


@dataclass(slots=True)
class PgBatch(BatchState):
    """What one `batch` changes, written back before it commits."""

    locked: bool = False
    sent_commit: bool = False  # the batch's work is done: a failure now may be after COMMIT
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


def lock_seq(conn: psycopg.Connection[Any]) -> int:
    """Take the store-wide write lock (the seq counter's row); the last seq handed out."""
    row = conn.execute("SELECT value FROM loom_meta WHERE key = 'seq' FOR UPDATE").fetchone()
    assert row is not None
    return int(row[0])


def prefetch(conn: psycopg.Connection[Any], state: PgBatch, ops: list[Op]) -> None:
    """Read the current rows of every record the batch puts, in one query."""
    wanted: set[tuple[str, str]] = set()
    for op in ops:
        if isinstance(op, Put):
            try:
                wanted.add((encode(check_namespace(op.record.namespace)), op.record.key))
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


def flush_inserts(conn: psycopg.Connection[Any], state: PgBatch) -> None:
    """Insert the batch's pending new records and their postings, in one statement."""
    pending = state.pending
    if not pending:
        return
    post: list[list[Any]] = [[], [], [], [], [], []]
    for ns, _, kind, _, _, seq, length, counts in pending:
        for term, count in counts.items():
            for column, value in zip(
                post, (seq, term, min(count, MAX_TF), ns, kind, length), strict=True
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


def finish(conn: psycopg.Connection[Any], state: PgBatch) -> None:
    flush_inserts(conn, state)
    flush_lexical(conn, state)
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


def flush_lexical(conn: psycopg.Connection[Any], state: PgBatch) -> None:
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


def analyze(state: PgBatch, text: str) -> tuple[Counter[str], int]:
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
            bounds[term] = (max(tf, min(count, MAX_TF)), min(shortest, length))
        state.texts += 1
        state.total_len += len(analyzed)
    return counts, len(analyzed)


def index_text(
    conn: psycopg.Connection[Any],
    state: PgBatch,
    record_id: int,
    namespace: str,
    kind: str,
    text: str,
) -> None:
    counts, length = analyze(state, text)
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
            [min(c, MAX_TF) for c in counts.values()],
        ),
    )
    conn.execute("UPDATE records SET nterms = %s WHERE id = %s", (length, record_id))


def unindex_text(conn: psycopg.Connection[Any], state: PgBatch, record_id: int) -> None:
    rows = conn.execute(
        "DELETE FROM lexical_postings WHERE record_id = %s RETURNING term, nterms",
        (record_id,),
    ).fetchall()
    if not rows:
        return
    state.df.subtract(dict.fromkeys((term for term, _ in rows), 1))
    state.texts -= 1
    state.total_len -= int(rows[0][1])


def vector_sets(conn: psycopg.Connection[Any], state: PgBatch) -> dict[str, tuple[int, int]]:
    if state.vector_sets is None:
        state.vector_sets = {
            model: (set_id, dim)
            for model, set_id, dim in conn.execute("SELECT model, id, dim FROM vector_sets")
        }
    return state.vector_sets

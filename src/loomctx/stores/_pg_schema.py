"""The PostgreSQL store's schema, as an ordered list of migrations (as `_migrations` is for
SQLite).

Migration *i* (0-based) moves a database from schema version *i* to *i + 1* (the version is
the ``schema`` row of ``loom_meta``). They run in order, in one transaction, under a
transaction-level advisory lock, so several workers opening the same database at once apply
each migration exactly once. A migration is never edited once released: a schema change is a
new function appended to `MIGRATIONS`, and `tests/stores/test_postgres_schema.py` pins the
resulting schema.

The layout (migration 1):

- ``records``: one row per (namespace, key), as on SQLite: `namespace` is the parts joined by
  ``/`` with a trailing ``/``, in the byte-order collation ``"C"``, so that a part-wise prefix
  is a plain range that the ``(namespace, seq)`` index answers. `nterms` is the number of the
  text's terms by `loomctx.text.terms` (Loom's bilingual analyzer: English words, CJK
  bigrams): the BM25 document length.
- ``lexical_postings``: the inverted index of those terms, one row per (term, record) with
  the term's count in the text, the record's namespace, kind and length repeated so that the
  candidates of a query come from one index range per term, and scoring needs no join.
  ``lexical_terms`` holds each term's document frequency (and, as bounds for MaxScore, the
  largest count and the shortest text it was ever indexed with), ``loom_meta`` the number of texts
  and their total length: BM25 (the formula of `_lexical`) is computed from them in SQL, so
  scores equal the SQLite store's. (A ``simple`` tsvector with a GIN index was measured
  first: ranking its matches in SQL took seconds at 100k records; see `_pg_lexical`.)
- ``namespaces``: `NamespaceVersion` per namespace, as on SQLite.
- ``vector_sets``: per embedding model, its dimension and the table of its vectors.
  Every model has a table of its own (created by its first `PutVectors`), with a ``vector(d)``
  column of that model's fixed dimension (no padding) and an HNSW index (cosine, over unit
  vectors: inner product); the table repeats the record's namespace and kind so that a
  filtered search needs no join (pgvector's iterative scan filters as it walks the graph).
- ``loom_meta``: the last seq given out (its row is the store-wide write lock), the
  corpus statistics, and a random `store_id`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import psycopg

__all__ = ["MIGRATIONS", "MIGRATION_LOCK", "migrate"]

MIGRATION_LOCK: Final = 7_403_914_214_662_031
"""The advisory lock key migrations run under (any fixed number; ours)."""


def _m001_initial(conn: psycopg.Connection) -> None:
    statements = [
        "CREATE EXTENSION IF NOT EXISTS vector",
        """
        CREATE TABLE records (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            namespace text COLLATE "C" NOT NULL,
            key text NOT NULL,
            kind text NOT NULL,
            text text NOT NULL,
            data jsonb NOT NULL,
            seq bigint NOT NULL,
            text_seq bigint NOT NULL,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            nterms integer NOT NULL,
            UNIQUE (namespace, key)
        )
        """,
        "CREATE UNIQUE INDEX records_seq ON records (seq)",
        "CREATE INDEX records_namespace_seq ON records (namespace, seq)",
        """
        CREATE TABLE lexical_postings (
            term text COLLATE "C" NOT NULL,
            record_id bigint NOT NULL REFERENCES records (id) ON DELETE CASCADE,
            namespace text COLLATE "C" NOT NULL,
            kind text NOT NULL,
            tf real NOT NULL,
            nterms integer NOT NULL,
            PRIMARY KEY (record_id, term) INCLUDE (tf, nterms)
        )
        """,
        "CREATE INDEX lexical_postings_term ON lexical_postings (term, namespace) "
        "INCLUDE (record_id, kind, tf, nterms)",
        """
        CREATE TABLE lexical_terms (
            term text COLLATE "C" PRIMARY KEY,
            df bigint NOT NULL,
            max_tf integer NOT NULL,
            min_len integer NOT NULL
        )
        """,
        """
        CREATE TABLE namespaces (
            namespace text COLLATE "C" PRIMARY KEY,
            seq bigint NOT NULL,
            deleted_seq bigint NOT NULL
        )
        """,
        """
        CREATE TABLE vector_sets (
            model text PRIMARY KEY,
            id integer GENERATED ALWAYS AS IDENTITY UNIQUE,
            dim integer NOT NULL
        )
        """,
        "INSERT INTO loom_meta (key, value) VALUES ('seq', '0'), ('texts', '0'), "
        "('total_len', '0'), ('store_id', md5(random()::text || clock_timestamp()::text))",
    ]
    for sql in statements:
        conn.execute(sql)


MIGRATIONS: Final[list[Callable[[psycopg.Connection], None]]] = [_m001_initial]
"""Every migration, oldest first; the applied count is ``loom_meta``'s ``schema``."""


def migrate(conn: psycopg.Connection, *, where: str) -> int:
    """Apply the migrations the database of `conn` is missing, in one transaction; the
    number applied.

    Raises `ValueError` (which the store turns into a `StoreError`) when the database was
    written by a newer Loom, one with more migrations than this one knows."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS loom_meta (key text PRIMARY KEY, value text NOT NULL)"
        )
        row = conn.execute("SELECT value FROM loom_meta WHERE key = 'schema'").fetchone()
        version = 0 if row is None else int(row[0])
        if version > len(MIGRATIONS):
            raise ValueError(
                f"the database {where} has schema version {version}, but this Loom knows "
                f"only {len(MIGRATIONS)}: it was written by a newer Loom; upgrade "
                f"`loomctx` to open it"
            )
        for migration in MIGRATIONS[version:]:
            migration(conn)
        conn.execute(
            "INSERT INTO loom_meta (key, value) VALUES ('schema', %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(len(MIGRATIONS)),),
        )
    return len(MIGRATIONS) - version

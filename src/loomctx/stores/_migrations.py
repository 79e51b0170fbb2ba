"""The SQLite store's schema, as an ordered list of migrations (simonw/llm style).

Migration *i* (0-based) moves a database from `PRAGMA user_version` *i* to *i + 1*. They run
in order, each in the caller's transaction, so opening a file applies only the missing ones.
A migration is never edited once released: a schema change is a new function appended to
`MIGRATIONS`, and `tests/stores/test_sqlite_schema.py` pins the resulting schema.

The layout (migration 1):

- ``records``: one row per (namespace, key). `namespace` is the parts joined by ``/`` with a
  trailing ``/`` (parts cannot contain ``/``), so a part-wise prefix is a plain string range.
  `seq` is the store-wide write order; `text_seq` the seq at which `text` last changed (what
  `PutVectors` compares against to skip vectors computed from an older text).
- ``vectors``: float32 vectors per (record, embedding model), the source of truth for the
  in-process vector index; `seq` comes from the same counter as the records'.
- ``vector_sets``: per model, its dimension, row count and highest vector seq, kept by
  triggers; the vector index compares them with its own to know whether it is stale.
- ``meta``: key/value settings: the last seq given out, and a random `store_id` that tells
  this database's index side files from another's at the same path.

Migration 2 adds ``namespaces``: per namespace, the seq of the last write or delete of a
record in it and the seq of the last delete (`NamespaceVersion`), so that `Version` is one
primary-key lookup and `Expect` can guard a batch. Deletes take a seq of their own from then
on, so that a delete moves the version too.

There is no full-text table: lexical search is an in-process BM25 index built from
``records`` (see `loomctx.stores._lexical` for why FTS5 was too slow).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Final

__all__ = ["MIGRATIONS", "migrate"]


def _m001_initial(conn: sqlite3.Connection) -> None:
    statements = [
        """
        CREATE TABLE meta (
            key TEXT PRIMARY KEY,
            value TEXT NOT NULL
        ) WITHOUT ROWID
        """,
        """
        CREATE TABLE records (
            id INTEGER PRIMARY KEY,
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            kind TEXT NOT NULL,
            text TEXT NOT NULL,
            data TEXT NOT NULL,
            seq INTEGER NOT NULL,
            text_seq INTEGER NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            UNIQUE (namespace, key)
        )
        """,
        "CREATE UNIQUE INDEX records_seq ON records (seq)",
        "CREATE INDEX records_namespace_seq ON records (namespace, seq)",
        """
        CREATE TABLE vectors (
            record_id INTEGER NOT NULL REFERENCES records (id) ON DELETE CASCADE,
            model TEXT NOT NULL,
            dim INTEGER NOT NULL,
            vector BLOB NOT NULL,
            seq INTEGER NOT NULL,
            PRIMARY KEY (record_id, model)
        ) WITHOUT ROWID
        """,
        "CREATE INDEX vectors_model_record ON vectors (model, record_id)",
        """
        CREATE TABLE vector_sets (
            model TEXT PRIMARY KEY,
            dim INTEGER NOT NULL,
            count INTEGER NOT NULL,
            high_seq INTEGER NOT NULL
        ) WITHOUT ROWID
        """,
        """
        CREATE TRIGGER vectors_insert AFTER INSERT ON vectors BEGIN
            INSERT OR IGNORE INTO vector_sets (model, dim, count, high_seq)
                VALUES (NEW.model, NEW.dim, 0, 0);
            UPDATE vector_sets SET dim = NEW.dim, count = count + 1,
                high_seq = max(high_seq, NEW.seq) WHERE model = NEW.model;
        END
        """,
        """
        CREATE TRIGGER vectors_update AFTER UPDATE ON vectors BEGIN
            UPDATE vector_sets SET high_seq = max(high_seq, NEW.seq) WHERE model = NEW.model;
        END
        """,
        """
        CREATE TRIGGER vectors_delete AFTER DELETE ON vectors BEGIN
            UPDATE vector_sets SET count = count - 1 WHERE model = OLD.model;
        END
        """,
        """
        INSERT INTO meta (key, value) VALUES
            ('seq', '0'), ('store_id', lower(hex(randomblob(16))))
        """,
    ]
    for sql in statements:
        conn.execute(sql)


def _m002_namespace_versions(conn: sqlite3.Connection) -> None:
    conn.execute(
        """
        CREATE TABLE namespaces (
            namespace TEXT PRIMARY KEY,
            seq INTEGER NOT NULL,
            deleted_seq INTEGER NOT NULL
        ) WITHOUT ROWID
        """
    )
    # What was deleted before this migration is unknown; it is as old as the oldest version.
    conn.execute(
        "INSERT INTO namespaces (namespace, seq, deleted_seq) "
        "SELECT namespace, max(seq), 0 FROM records GROUP BY namespace"
    )


MIGRATIONS: Final[list[Callable[[sqlite3.Connection], None]]] = [
    _m001_initial,
    _m002_namespace_versions,
]
"""Every migration, oldest first; the applied count is the database's `PRAGMA user_version`."""


def migrate(conn: sqlite3.Connection, *, where: str) -> int:
    """Apply the migrations `conn` is missing, in one transaction; the number applied.

    Raises `ValueError` (which the store turns into a `StoreError`) when the database was
    written by a newer Loom, one with more migrations than this one knows."""
    if int(conn.execute("PRAGMA user_version").fetchone()[0]) == len(MIGRATIONS):
        return 0  # current: no need to wait for the write lock
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])  # under the lock
        if version > len(MIGRATIONS):
            raise ValueError(
                f"the database {where} has schema version {version}, but this Loom knows "
                f"only {len(MIGRATIONS)}: it was written by a newer Loom; upgrade "
                f"`loomctx` to open it"
            )
        for migration in MIGRATIONS[version:]:
            migration(conn)
        # PRAGMA takes no parameters; the value is an int we computed.
        conn.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return len(MIGRATIONS) - version

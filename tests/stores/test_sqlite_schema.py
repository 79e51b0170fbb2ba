"""The SQLite store's schema: migrations applied once, in order, to an exactly known schema;
files from a newer Loom refused; the lexical index rebuilt when the analyzer changes."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

import loomctx.stores.sqlite as sqlite_module
from loomctx.errors import StoreError
from loomctx.stores import _migrations
from loomctx.stores.base import Record
from loomctx.stores.sqlite import SQLiteStore

# Changing the schema is deliberate: append a migration, then update this literal.
EXPECTED_SCHEMA = [
    (
        "index",
        "records_namespace_seq",
        "CREATE INDEX records_namespace_seq ON records (namespace, seq)",
    ),
    ("index", "records_seq", "CREATE UNIQUE INDEX records_seq ON records (seq)"),
    ("index", "sqlite_autoindex_records_1", None),
    (
        "index",
        "vectors_model_record",
        "CREATE INDEX vectors_model_record ON vectors (model, record_id)",
    ),
    (
        "table",
        "meta",
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    ),
    (
        "table",
        "namespaces",
        "CREATE TABLE namespaces (namespace TEXT PRIMARY KEY, seq INTEGER NOT NULL, "
        "deleted_seq INTEGER NOT NULL) WITHOUT ROWID",
    ),
    (
        "table",
        "records",
        "CREATE TABLE records (id INTEGER PRIMARY KEY, namespace TEXT NOT NULL, key TEXT NOT NULL, "
        "kind TEXT NOT NULL, text TEXT NOT NULL, data TEXT NOT NULL, seq INTEGER NOT NULL, "
        "text_seq INTEGER NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL, "
        "UNIQUE (namespace, key))",
    ),
    (
        "table",
        "vector_sets",
        "CREATE TABLE vector_sets (model TEXT PRIMARY KEY, dim INTEGER NOT NULL, "
        "count INTEGER NOT NULL, high_seq INTEGER NOT NULL) WITHOUT ROWID",
    ),
    (
        "table",
        "vectors",
        "CREATE TABLE vectors (record_id INTEGER NOT NULL REFERENCES records (id) ON DELETE "
        "CASCADE, model TEXT NOT NULL, dim INTEGER NOT NULL, vector BLOB NOT NULL, "
        "seq INTEGER NOT NULL, PRIMARY KEY (record_id, model)) WITHOUT ROWID",
    ),
    (
        "trigger",
        "vectors_delete",
        "CREATE TRIGGER vectors_delete AFTER DELETE ON vectors BEGIN UPDATE vector_sets SET "
        "count = count - 1 WHERE model = OLD.model; END",
    ),
    (
        "trigger",
        "vectors_insert",
        "CREATE TRIGGER vectors_insert AFTER INSERT ON vectors BEGIN INSERT OR IGNORE INTO "
        "vector_sets (model, dim, count, high_seq) VALUES (NEW.model, NEW.dim, 0, 0); "
        "UPDATE vector_sets SET dim = NEW.dim, count = count + 1, "
        "high_seq = max(high_seq, NEW.seq) WHERE model = NEW.model; END",
    ),
    (
        "trigger",
        "vectors_update",
        "CREATE TRIGGER vectors_update AFTER UPDATE ON vectors BEGIN UPDATE vector_sets SET "
        "high_seq = max(high_seq, NEW.seq) WHERE model = NEW.model; END",
    ),
]


def schema(path: Path) -> list[tuple[str, str, str | None]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
        return [(kind, name, _normalise(sql)) for kind, name, sql in rows]
    finally:
        conn.close()


def _normalise(sql: str | None) -> str | None:
    if sql is None:
        return None
    sql = re.sub(r"\s+", " ", sql).strip()
    return sql.replace("( ", "(").replace(" )", ")")


def user_version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def test_the_schema_is_exactly_the_expected_one(tmp_path: Path) -> None:
    path = tmp_path / "loom.db"
    SQLiteStore(path).close()
    assert schema(path) == EXPECTED_SCHEMA
    assert user_version(path) == len(_migrations.MIGRATIONS)


def test_reopening_applies_nothing_twice(tmp_path: Path) -> None:
    path = tmp_path / "loom.db"
    with SQLiteStore(path) as store:
        store.put(Record(namespace=("t",), key="k", kind="note", text="kept"))
    with SQLiteStore(path) as store:
        assert store.get(("t",), "k") is not None
    assert schema(path) == EXPECTED_SCHEMA
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        assert _migrations.migrate(conn, where="test") == 0
    finally:
        conn.close()


def test_only_missing_migrations_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "loom.db"
    SQLiteStore(path).close()
    calls: list[int] = []

    def m_extra(conn: sqlite3.Connection) -> None:
        calls.append(1)
        conn.execute("CREATE TABLE extra (x INTEGER)")

    monkeypatch.setattr(_migrations, "MIGRATIONS", [*_migrations.MIGRATIONS, m_extra])
    SQLiteStore(path).close()
    SQLiteStore(path).close()
    assert calls == [1]
    assert user_version(path) == len(_migrations.MIGRATIONS)


def test_a_failing_migration_leaves_the_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "loom.db"
    SQLiteStore(path).close()

    def m_broken(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE half (x INTEGER)")
        raise sqlite3.OperationalError("boom")

    released = len(_migrations.MIGRATIONS)
    monkeypatch.setattr(_migrations, "MIGRATIONS", [*_migrations.MIGRATIONS, m_broken])
    with pytest.raises(StoreError, match="boom"):
        SQLiteStore(path)
    assert schema(path) == EXPECTED_SCHEMA
    assert user_version(path) == released


def test_namespace_versions_are_derived_for_a_file_of_schema_1(tmp_path: Path) -> None:
    path = tmp_path / "loom.db"
    conn = sqlite3.connect(path, isolation_level=None)
    _migrations.MIGRATIONS[0](conn)  # a file as the first release left it
    conn.execute("PRAGMA user_version = 1")
    rows = [("t/a/", "x", 1), ("t/a/", "y", 3), ("t/b/", "z", 2)]
    conn.executemany(
        "INSERT INTO records (namespace, key, kind, text, data, seq, text_seq, created_at, "
        "updated_at) VALUES (?, ?, 'note', '', '{}', ?, ?, 0, 0)",
        [(ns, key, seq, seq) for ns, key, seq in rows],
    )
    conn.execute("UPDATE meta SET value = '3' WHERE key = 'seq'")
    conn.close()
    with SQLiteStore(path) as store:
        assert store.version(("t", "a")).seq == 3
        assert store.version(("t", "b")).seq == 2
        assert store.version(("t",)).seq == 0
        assert store.put(Record(namespace=("t", "b"), key="n", kind="note")).seq == 4
        assert store.version(("t", "b")).seq == 4
    assert schema(path) == EXPECTED_SCHEMA
    assert user_version(path) == len(_migrations.MIGRATIONS)


def test_a_file_from_a_newer_loom_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "loom.db"
    SQLiteStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {len(_migrations.MIGRATIONS) + 1}")
    conn.close()
    with pytest.raises(StoreError, match=r"newer Loom.*upgrade"):
        SQLiteStore(path)


def test_an_analyzer_change_rebuilds_the_lexical_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "loom.db"
    ns = ("t", "a")
    with SQLiteStore(path) as store:
        store.put_many(
            [
                Record(namespace=ns, key="en", kind="note", text="Quarterly revenue report"),
                Record(namespace=ns, key="zh", kind="note", text="季度收入报告"),
            ]
        )
        before = store.search(ns, "revenue 收入")
    with SQLiteStore(path) as store:
        assert store.search(ns, "revenue 收入") == before
        assert store._index_origin["lexical"] == "file"
    monkeypatch.setattr(sqlite_module, "ANALYZER_VERSION", sqlite_module.ANALYZER_VERSION + 1)
    with SQLiteStore(path) as store:
        assert store.search(ns, "revenue 收入") == before
        assert store._index_origin["lexical"] == "sqlite"
    with SQLiteStore(path) as store:  # the rebuilt index was saved under the new version
        assert [hit.record.key for hit in store.search(ns, "revenue")] == ["en"]
        assert store._index_origin["lexical"] == "file"

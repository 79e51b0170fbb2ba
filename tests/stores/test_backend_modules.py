"""The two SQL backends share their dispatcher and codec, and neither reaches into the other.

`stores/_dispatch.py` and `stores/_codec.py` hold what SQLite and PostgreSQL do alike; a
backend importing the other's module (or its private names) would make the two one module
again, and drag psycopg into the embedded store.
"""

from __future__ import annotations

import ast
from pathlib import Path

import loomctx.stores

STORES = Path(loomctx.stores.__file__).parent
BACKENDS = {
    "sqlite": {"sqlite.py", "_sqlite_indexes.py"},
    "postgres": {"postgres.py", "_pg_batch.py", "_pg_sql.py", "_pg_lexical.py", "_pg_schema.py"},
}


def _imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _modules_of(backend: str) -> set[str]:
    return {f"loomctx.stores.{name.removesuffix('.py')}" for name in BACKENDS[backend]}


def test_neither_backend_imports_the_other() -> None:
    crossings = []
    for backend, other in (("sqlite", "postgres"), ("postgres", "sqlite")):
        theirs = _modules_of(other)
        for name in BACKENDS[backend]:
            imported = _imported_modules(STORES / name)
            crossings += [f"{name} imports {m}" for m in sorted(imported & theirs)]
    assert crossings == []


def test_both_backends_run_ops_through_the_shared_dispatcher_and_codec() -> None:
    for main in ("sqlite.py", "postgres.py"):
        imported = _imported_modules(STORES / main)
        assert "loomctx.stores._dispatch.OpDispatcher" in imported, main
        assert "loomctx.stores._codec" in imported, main


def test_the_checker_sees_a_crossing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from loomctx.stores.sqlite import _encode\nimport loomctx.stores._pg_sql\n")
    assert _imported_modules(bad) >= {
        "loomctx.stores.sqlite",
        "loomctx.stores.sqlite._encode",
        "loomctx.stores._pg_sql",
    }
    assert _imported_modules(bad) & _modules_of("sqlite") == {"loomctx.stores.sqlite"}

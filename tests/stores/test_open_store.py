"""`open_store(url)`: the backend a URL names, and a typed error for anything else."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from loomctx import open_store
from loomctx.errors import ConfigError
from loomctx.stores import redact_url
from loomctx.stores.sqlite import SQLiteStore


def test_sqlite_urls_and_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for url, where in [
        (f"sqlite:///{tmp_path}/a/one.db", tmp_path / "a" / "one.db"),
        ("sqlite:///rel/two.db", tmp_path / "rel" / "two.db"),
        (str(tmp_path / "b" / "three.db"), tmp_path / "b" / "three.db"),
        (tmp_path / "four.db", tmp_path / "four.db"),
    ]:
        with open_store(url) as store:
            assert isinstance(store, SQLiteStore)
            store.put_many([])
        assert where.is_file(), url
    with open_store("sqlite:///:memory:") as store:
        assert isinstance(store, SQLiteStore)
        assert store.path == ":memory:"


def test_a_postgresql_url_opens_a_postgres_store(postgres_url: str) -> None:
    from loomctx.stores.postgres import PostgresStore

    with open_store(postgres_url) as store:
        assert isinstance(store, PostgresStore)
    url = postgres_url.replace("postgresql://", "postgres://", 1)
    with open_store(url) as store:
        assert isinstance(store, PostgresStore)


@pytest.mark.parametrize(
    "url", ["mysql://h/db", "redis://localhost:6379", "sqlite://relative.db", "sqlite:///", "  "]
)
def test_anything_else_is_a_config_error_naming_what_works(url: str) -> None:
    with pytest.raises(ConfigError, match=r"sqlite:///") as caught:
        open_store(url)
    if url.startswith(("mysql", "redis")):
        assert "postgresql://" in str(caught.value)


def test_a_folder_is_not_a_store(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="folder"):
        open_store(tmp_path)


def test_without_the_postgres_extra_the_error_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "loomctx.stores.postgres", None)  # import fails
    with pytest.raises(ConfigError, match=r"pip install 'loomctx\[postgres\]'") as caught:
        open_store("postgresql://loom:s3cret@db.example/loom")
    assert "s3cret" not in str(caught.value)


def test_passwords_are_redacted() -> None:
    assert redact_url("postgresql://u:pw@h:5/d") == "postgresql://u:***@h:5/d"
    assert redact_url("postgresql://u@h/d") == "postgresql://u@h/d"
    assert redact_url("loom.db") == "loom.db"

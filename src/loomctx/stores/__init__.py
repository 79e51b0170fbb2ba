"""Storage backends behind one batch contract: SQLite embedded (default), PostgreSQL with
pgvector for many workers (`loomctx.stores.postgres`, extra ``loomctx[postgres]``).

`open_store(url)` picks the backend from a URL, so configuration (``loom.toml``,
``LOOM_STORE``, ``--store``) names a store the same way for every backend.

`open_store` and `SQLiteStore` are at the top level (`loomctx`); here are the contract
(`MemoryStore`, `Record`) and what configuration reads."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from loomctx.errors import ConfigError
from loomctx.stores.base import BaseStore, MemoryStore, Record

__all__ = ["STORE_SCHEMES", "MemoryStore", "Record", "redact_url"]

STORE_SCHEMES: Final = ("sqlite:///PATH", "postgresql://...", "postgres://...", "a file path")
"""What `open_store` accepts, for messages and help texts."""


def open_store(url: str | Path) -> BaseStore:
    """The store a URL names: ``sqlite:///path/to/loom.db`` (or a plain path, or
    ``sqlite:///:memory:``) opens a `SQLiteStore`, its folder created if needed;
    ``postgresql://user@host:5432/db`` (or ``postgres://``) a `PostgresStore`. Anything
    else is a `ConfigError` naming the accepted forms; a PostgreSQL URL without the
    postgres extra installed is one naming ``pip install 'loomctx[postgres]'``."""
    from loomctx.stores.sqlite import SQLiteStore

    if isinstance(url, Path):
        return _sqlite_file(url, SQLiteStore)
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"a store is a URL or a file path, got {url!r}; {_accepted()}")
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _sqlite_file(Path(url), SQLiteStore)
    scheme = scheme.lower()
    if scheme == "sqlite":
        if rest in ("/:memory:", ":memory:"):
            return SQLiteStore(":memory:")
        if not rest.startswith("/") or rest == "/":
            raise ConfigError(
                f"a SQLite store URL is sqlite:/// followed by a path (sqlite:///loom.db for "
                f"a relative one, sqlite:////var/loom.db for an absolute one), got {url!r}"
            )
        return _sqlite_file(Path(rest[1:]), SQLiteStore)
    if scheme in ("postgresql", "postgres"):
        try:
            from loomctx.stores.postgres import PostgresStore
        except ImportError as error:
            raise ConfigError(
                f"the store {redact_url(url)!r} is PostgreSQL, which needs the postgres extra: "
                f"pip install 'loomctx[postgres]' ({error})"
            ) from error
        return PostgresStore(url)
    raise ConfigError(
        f"unknown store scheme {scheme + '://'!r} in {redact_url(url)!r}; {_accepted()}"
    )


def _sqlite_file(path: Path, store: type[BaseStore]) -> BaseStore:
    if path.is_dir():
        raise ConfigError(
            f"the store {str(path)!r} is a folder; give a file path such as `loom.db`"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    return store(path)  # type: ignore[call-arg]


def _accepted() -> str:
    return "accepted: " + ", ".join(STORE_SCHEMES)


def redact_url(url: str) -> str:
    """`url` without a password (``user:secret@`` -> ``user:***@``)."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}"

"""The op dispatcher both SQL backends run a batch through, and what they share of it.

A backend's `batch` opens its transaction its own way (SQLite: one connection and
``BEGIN IMMEDIATE``; PostgreSQL: a pooled connection and a lock row) and then hands every op,
in order, to `OpDispatcher.run_op`, which checks the batch's deadline, routes the op to the
backend's handler for its class and turns any failure into a `LoomError` that names the op's
index. The handlers that are the same SQL on both (`Get`, `Version`, `Expect`) live here;
the backend writes them with its parameter marker (`param`).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from loomctx.errors import ConfigError, ConflictError, StoreError
from loomctx.stores._codec import COLUMNS, encode, record_from_row, unencodable
from loomctx.stores.base import (
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
    Unembedded,
    VectorSearch,
    Version,
    check_namespace,
)

__all__ = ["WRITES", "BatchState", "Connection", "OpDispatcher", "check_record_cache"]

WRITES: tuple[type[Op], ...] = (Put, Delete, PutVectors)
"""The ops that write: a batch holding one takes the store's write lock."""


class Connection(Protocol):
    """What the shared handlers need of a DB-API connection (sqlite3's, psycopg's)."""

    def execute(self, query: Any, params: Any, /) -> Any:
        """Run one statement; a cursor with `fetchone`."""
        ...


@dataclass(slots=True)
class BatchState:
    """What one `batch` has done so far: the last seq it handed out, its clock, and the
    namespace versions it moved (encoded namespace -> seq), written back before commit."""

    seq: int
    now: float
    changed: dict[str, int] = field(default_factory=dict)
    deleted: dict[str, int] = field(default_factory=dict)


C = TypeVar("C", bound=Connection)
S = TypeVar("S", bound=BatchState)

_HANDLERS: tuple[tuple[type[Op], str], ...] = (
    (Put, "_put"),
    (Get, "_get"),
    (Delete, "_delete"),
    (Scan, "_scan"),
    (Search, "_search"),
    (VectorSearch, "_vector_search"),
    (PutVectors, "_put_vectors"),
    (Unembedded, "_unembedded"),
    (Version, "_version_op"),
    (Expect, "_expect"),
)


def check_record_cache(record_cache: object) -> int:
    """The size of a store's decoded-record cache: an int >= 0, else a `ConfigError`."""
    if isinstance(record_cache, bool) or not isinstance(record_cache, int) or record_cache < 0:
        raise ConfigError(f"`record_cache` must be an int >= 0, got {record_cache!r}")
    return record_cache


class OpDispatcher(ABC, Generic[C, S]):
    """Routes a batch's ops to a backend's handlers, each ``(conn, state, op) -> result``.

    `engine` names the database in messages; `engine_error` is its driver's error class
    (wrapped into a `StoreError`), `passthrough` the driver errors the backend's `batch`
    handles itself (a broken connection, which it may retry)."""

    engine: ClassVar[str]
    engine_error: ClassVar[type[Exception]]
    passthrough: ClassVar[tuple[type[Exception], ...]] = ()
    param: ClassVar[str] = "?"

    def run_op(self, conn: C, state: S, index: int, op: Op, deadline: float | None) -> Any:
        """The result of `op`, the `index`-th of its batch; a failure names the op."""
        where = f"batch op #{index} ({type(op).__name__})"
        try:
            if deadline is not None and time.monotonic() > deadline:
                raise StoreError(
                    "the deadline of the `StoreContext` passed before it ran; nothing of the "
                    "batch was written (give the call more time or a smaller batch)"
                )
            self._before_op(conn, state, op)
            for cls, handler in _HANDLERS:
                if isinstance(op, cls):
                    return getattr(self, handler)(conn, state, op)
            raise ConfigError(
                f"unknown operation {op!r}; a batch takes the op classes of `loomctx.stores.base`"
            )
        except ConfigError as error:
            raise ConfigError(f"{where} failed: {error}") from error
        except ConflictError as error:
            raise ConflictError(f"{where} failed: {error}") from error
        except UnicodeEncodeError as error:
            raise ConfigError(f"{where} failed: {unencodable('a string', error)}") from error
        except StoreError as error:
            raise StoreError(f"{where} failed: {error}") from error
        except self.passthrough:
            raise
        except self.engine_error as error:
            raise StoreError(f"{where} failed in {self.engine}: {error}") from error

    def _before_op(self, conn: C, state: S, op: Op) -> None:
        """A backend's work before each op (e.g. writing what earlier ops left pending)."""

    def _record(self, row: Any) -> Record:
        """The `Record` of a row of `COLUMNS` as the driver returns it."""
        return record_from_row(row)

    # --- the handlers that are the same SQL on every backend ----------------------------------

    def _get(self, conn: C, state: S, op: Get) -> Record | None:
        namespace = check_namespace(op.namespace)
        p = self.param
        row = conn.execute(
            f"SELECT {COLUMNS} FROM records WHERE namespace = {p} AND key = {p}",
            (encode(namespace), op.key),
        ).fetchone()
        return None if row is None else self._record(row)

    def _version(self, conn: C, state: S, namespace: Namespace) -> NamespaceVersion:
        encoded = encode(check_namespace(namespace))
        row = conn.execute(
            f"SELECT seq, deleted_seq FROM namespaces WHERE namespace = {self.param}",
            (encoded,),
        ).fetchone()
        seq, deleted = (0, 0) if row is None else row
        return NamespaceVersion(
            seq=state.changed.get(encoded, seq), deleted_seq=state.deleted.get(encoded, deleted)
        )

    def _version_op(self, conn: C, state: S, op: Version) -> NamespaceVersion:
        return self._version(conn, state, op.namespace)

    def _expect(self, conn: C, state: S, op: Expect) -> None:
        if isinstance(op.seq, bool) or not isinstance(op.seq, int):
            raise ConfigError(
                f"`Expect.seq` must be an int (a `NamespaceVersion.seq`), got {op.seq!r}"
            )
        current = self._version(conn, state, op.namespace).seq
        if current != op.seq:
            raise ConflictError(
                f"namespace {op.namespace!r} is at version {current}, not {op.seq} as expected: "
                f"another writer changed it; nothing of the batch was written (read it again "
                f"and retry)"
            )

    # --- the handlers each backend writes --------------------------------------------------------

    @abstractmethod
    def _put(self, conn: C, state: S, op: Put) -> Record: ...

    @abstractmethod
    def _delete(self, conn: C, state: S, op: Delete) -> bool: ...

    @abstractmethod
    def _scan(self, conn: C, state: S, op: Scan) -> list[Record]: ...

    @abstractmethod
    def _search(self, conn: C, state: S, op: Search) -> list[Hit]: ...

    @abstractmethod
    def _vector_search(self, conn: C, state: S, op: VectorSearch) -> list[Hit]: ...

    @abstractmethod
    def _put_vectors(self, conn: C, state: S, op: PutVectors) -> int: ...

    @abstractmethod
    def _unembedded(self, conn: C, state: S, op: Unembedded) -> list[Record]: ...

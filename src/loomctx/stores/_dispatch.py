"""The op dispatcher both SQL backends run a batch through, and what they share of it.

A backend's `batch` opens its transaction its own way (SQLite: one connection and
``BEGIN IMMEDIATE``; PostgreSQL: a pooled connection and a lock row) and then hands every op,
in order, to `OpDispatcher.run_op`, which checks the batch's deadline, routes the op to the
backend's handler for its class and turns any failure into a `LoomError` that names the op's
index. The handlers that are the same SQL on both (`Get`, `Version`, `Expect`) live here;
the backend writes them with its parameter marker (`param`). So does search: a backend finds
hits as arrays (`_lexical_found`, `_vector_found`: a `Found`) and reads records by row id
(`_records_at`); `Rank` hands back the arrays, `Fetch` the records, and `Search` /
`VectorSearch` are the two in turn.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Generic, Protocol, TypeVar

import numpy as np

from loomctx.errors import ConfigError, ConflictError, StoreError, check_int
from loomctx.stores._codec import COLUMNS, encode, record_from_row, unencodable
from loomctx.stores.base import (
    Delete,
    Expect,
    Fetch,
    Found,
    Get,
    Hit,
    Namespace,
    NamespaceVersion,
    Op,
    Put,
    PutVectors,
    Rank,
    Record,
    Scan,
    Search,
    Unembedded,
    VectorSearch,
    Version,
    check_namespace,
)

__all__ = [
    "NOTHING_FOUND",
    "WRITES",
    "BatchState",
    "Connection",
    "OpDispatcher",
    "check_record_cache",
    "found",
]

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
    (Rank, "_rank"),
    (Fetch, "_fetch"),
    (PutVectors, "_put_vectors"),
    (Unembedded, "_unembedded"),
    (Version, "_version_op"),
    (Expect, "_expect"),
)


def found(ids: Sequence[int], seqs: Sequence[int], scores: Sequence[float]) -> Found:
    """A `Found` of plain sequences (or arrays) of one length."""
    return Found(
        ids=np.asarray(ids, dtype=np.int64),
        seqs=np.asarray(seqs, dtype=np.int64),
        scores=np.asarray(scores, dtype=np.float64),
    )


NOTHING_FOUND: Final = found((), (), ())
"""The `Found` of a search without hits."""


def _check_fetch(op: Fetch) -> tuple[list[int], list[int]]:
    ids, seqs = list(op.ids), list(op.seqs)
    if len(ids) != len(seqs):
        raise ConfigError(
            f"`Fetch.ids` and `Fetch.seqs` must be as long as each other (a `Found`'s ids and "
            f"seqs), got {len(ids)} ids and {len(seqs)} seqs"
        )
    for name, values in (("ids", ids), ("seqs", seqs)):
        for value in values:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(
                    f"`Fetch.{name}` must hold ints (from a `Found`; `.tolist()` its arrays), "
                    f"got {value!r}"
                )
    return ids, seqs


def check_record_cache(record_cache: object) -> int:
    """The size of a store's decoded-record cache: an int >= 0, else a `ConfigError`."""
    return check_int(record_cache, "`record_cache`", minimum=0)


class OpDispatcher(ABC, Generic[C, S]):
    """Routes a batch's ops to a backend's handlers, each ``(conn, state, op) -> result``.

    `engine` names the database in messages; `engine_error` is its driver's error class
    (wrapped into a `StoreError`), `passthrough` the driver errors the backend's `batch`
    handles itself (a broken connection, which it may retry)."""

    engine: ClassVar[str]
    engine_error: ClassVar[type[Exception]]
    passthrough: ClassVar[tuple[type[Exception], ...]] = ()
    param: ClassVar[str] = "?"
    # Whether `Fetch` reads the records' current seqs first: a backend whose cache of
    # records may hold a version that changed since (others drop a record on every write).
    fetch_checks_seqs: ClassVar[bool] = False

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

    # --- search: arrays, records, and the two in turn -----------------------------------------

    def _rank(self, conn: C, state: S, op: Rank) -> Found:
        search = op.search
        if isinstance(search, Search):
            return self._lexical_found(conn, state, search)
        if isinstance(search, VectorSearch):
            return self._vector_found(conn, state, search)
        raise ConfigError(f"`Rank.search` must be a `Search` or a `VectorSearch`, got {search!r}")

    def _search(self, conn: C, state: S, op: Search) -> list[Hit]:
        return self._hits(conn, state, self._lexical_found(conn, state, op), lazy=op.lazy)

    def _vector_search(self, conn: C, state: S, op: VectorSearch) -> list[Hit]:
        return self._hits(conn, state, self._vector_found(conn, state, op), lazy=op.lazy)

    def _fetch(self, conn: C, state: S, op: Fetch) -> list[Record | None]:
        ids, seqs = _check_fetch(op)
        asked = list(zip(ids, seqs, strict=True))
        if ids and self.fetch_checks_seqs:
            marks = ", ".join([self.param] * len(ids))
            rows = conn.execute(f"SELECT id, seq FROM records WHERE id IN ({marks})", ids)
            current = dict(rows.fetchall())
            ids = [record_id for record_id, seq in asked if current.get(record_id) == seq]
            seqs = [current[record_id] for record_id in ids]
        known = self._records_at(conn, state, ids, seqs, lazy=op.lazy) if ids else {}
        out: list[Record | None] = []
        for record_id, seq in asked:
            record = known.get(record_id)
            out.append(record if record is not None and record.seq == seq else None)
        return out

    def _hits(self, conn: C, state: S, hits: Found, *, lazy: bool) -> list[Hit]:
        """`Hit`s for `hits`, in their order (a record changed since it was found, in a
        store read outside the search's snapshot, is left out)."""
        if not len(hits):
            return []
        ids, seqs = hits.ids.tolist(), hits.seqs.tolist()
        known = self._records_at(conn, state, ids, seqs, lazy=lazy)
        out = []
        for record_id, seq, score in zip(ids, seqs, hits.scores.tolist(), strict=True):
            record = known.get(record_id)
            if record is not None and record.seq == seq:
                out.append(Hit(record=record, score=score))
        return out

    # --- the handlers each backend writes --------------------------------------------------------

    @abstractmethod
    def _lexical_found(self, conn: C, state: S, op: Search) -> Found:
        """The hits of lexical search `op`, as arrays."""

    @abstractmethod
    def _vector_found(self, conn: C, state: S, op: VectorSearch) -> Found:
        """The hits of vector search `op`, as arrays."""

    @abstractmethod
    def _records_at(
        self, conn: C, state: S, ids: list[int], seqs: list[int], *, lazy: bool
    ) -> dict[int, Record]:
        """The records at row `ids` (found at `seqs`; a backend may use them to tell a
        cached record still current), by id; a missing row is left out. `lazy`: as
        `Search.lazy`."""

    @abstractmethod
    def _put(self, conn: C, state: S, op: Put) -> Record: ...

    @abstractmethod
    def _delete(self, conn: C, state: S, op: Delete) -> bool: ...

    @abstractmethod
    def _scan(self, conn: C, state: S, op: Scan) -> list[Record]: ...

    @abstractmethod
    def _put_vectors(self, conn: C, state: S, op: PutVectors) -> int: ...

    @abstractmethod
    def _unembedded(self, conn: C, state: S, op: Unembedded) -> list[Record]: ...

"""The storage contract: records in namespaces, written and read in batches.

Every backend implements one method pair, `batch(ops)` / `abatch(ops)`, over the operation
values below; `BaseStore` builds the convenient methods on top of them (as langgraph's stores
do), so a backend is small and a conformance suite can check all of it.

A `Record` lives in a `namespace` (a tuple such as ``(tenant, agent, session)``) under a `key`.
Reads name a namespace and never return records outside it: that is how tenants, agents and
sessions are kept apart (DESIGN.md invariant 6). With ``exact=True`` a read sees the records
of that one namespace (an ``=`` filter); without it, the namespace is a *prefix* and the read
also sees every namespace below it, part-wise (``('t', 'a')`` covers ``('t', 'a', 's')``,
never ``('t', 'ab')``): a wider read, for callers that mean it. `text` is indexed for lexical
search as soon as a write returns; vectors are attached later (embedding runs off the write
path) with `PutVectors`, per embedding model, and searched with `VectorSearch`.

A search's hits come back as `Hit`s (a record and its score each), or, asked through `Rank`,
as arrays (`Found`: each hit's row id, version and score) with no record read: a caller that
ranks thousands of hits by what it already knows of them (`LoomMemory.search` keeps that by
version) reads the records of the few that win with `Fetch`. `Search` and `VectorSearch`
are `Rank` followed by `Fetch` inside the store: one search, two views of its result.

Several processes may share a store. `Version` tells a reader cheaply whether anything in a
namespace changed since it last looked (what a cache of it, such as `LoomMemory`'s tiers,
checks before it answers), and `Expect` makes a batch of writes conditional on nothing having
changed (optimistic concurrency: the loser gets a `ConflictError`, reads again and retries).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeAlias, runtime_checkable

from loomctx.errors import StoreError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "BaseStore",
    "Delete",
    "Expect",
    "Fetch",
    "Found",
    "Get",
    "Hit",
    "MemoryStore",
    "Namespace",
    "NamespaceVersion",
    "Op",
    "Put",
    "PutVectors",
    "Rank",
    "Record",
    "Scan",
    "Search",
    "StoreContext",
    "Unembedded",
    "VectorSearch",
    "Version",
    "check_namespace",
]

Namespace: TypeAlias = tuple[str, ...]


def check_namespace(namespace: Namespace, *, prefix: bool = False) -> Namespace:
    """`namespace` if valid: a tuple of non-empty strings without ``/`` (at least one part,
    unless it is a read prefix, where ``()`` means every namespace)."""
    if not isinstance(namespace, tuple) or (not namespace and not prefix):
        raise StoreError(
            f"a namespace is a non-empty tuple of strings such as ('tenant', 'agent'), "
            f"got {namespace!r}"
        )
    for part in namespace:
        if not isinstance(part, str) or not part or "/" in part:
            raise StoreError(
                f"namespace part {part!r} in {namespace!r} must be a non-empty string without '/'"
            )
    return namespace


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """One stored item. `seq` (a store-wide, increasing write order) and the timestamps
    (seconds since the epoch) are set by the store on every write. A value: a store may hand
    the same record to several callers (`SQLiteStore` keeps search's recent hits), so its
    `data` is never to be changed in place. A store reads `data` back as a dict, except in the
    hits of a search that asked for `Search.lazy`."""

    namespace: Namespace
    key: str
    kind: str
    text: str = ""
    data: Mapping[str, Any] = field(default_factory=dict, hash=False)
    seq: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Hit:
    """A search result: the record and its score (higher is better; lexical scores are
    BM25, vector scores cosine similarity)."""

    record: Record
    score: float


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreContext:
    """Per-call options every backend receives. `deadline`: a `time.monotonic()` value by
    which the call should finish (backends may honour it); `tag`: a label for tracing."""

    deadline: float | None = None
    tag: str = ""


# --- operations -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Put:
    """Insert or replace `record` (by namespace and key); result: the stored `Record`.
    Replacing a record whose text changed drops its vectors (they no longer match)."""

    record: Record


@dataclass(frozen=True, slots=True, kw_only=True)
class Get:
    """Result: the `Record` at namespace and key, or None."""

    namespace: Namespace
    key: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Delete:
    """Remove a record and its vectors; result: whether it existed."""

    namespace: Namespace
    key: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Scan:
    """Result: records under `prefix` (only in it, if `exact`; of `kind`, if given) whose
    `data` has every item of `where`, in write order (`newest_first` reverses it), after
    `after_seq`, at most `limit`."""

    prefix: Namespace
    kind: str | None = None
    where: Mapping[str, str | int | float | bool] = field(default_factory=dict, hash=False)
    limit: int | None = None
    newest_first: bool = False
    after_seq: int = 0
    exact: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Search:
    """Lexical search under `prefix` (only in it, if `exact`): result `Hit`s, best first, at
    most `limit`.

    `lazy`: the hits' `Record.data` may be a read-only `Mapping` that decodes the stored data
    when first read, rather than a dict (``dict(data)`` is one; `json.dumps` does not take it
    as it is). For callers that read the data of few of their hits: a deep memory search
    reads thousands of records to rank them by what it knows of them already
    (`LoomMemory.search`). A backend may ignore it (`SQLiteStore` honours it)."""

    prefix: Namespace
    query: str
    kind: str | None = None
    limit: int = 10
    exact: bool = False
    lazy: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class VectorSearch:
    """Nearest records by the vectors of embedding `model` under `prefix` (only in it, if
    `exact`): result `Hit`s, best first. `lazy`: as for `Search`."""

    prefix: Namespace
    vector: npt.NDArray[np.float32]
    model: str
    kind: str | None = None
    limit: int = 10
    exact: bool = False
    lazy: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Rank:
    """Run `search` and return its hits as arrays (a `Found`) instead of `Hit`s: no record
    is read or decoded. For callers that rank many hits and read few of them (`Fetch`);
    `search.lazy` does not apply."""

    search: Search | VectorSearch


@dataclass(frozen=True, slots=True, kw_only=True)
class Found:
    """A search's hits as arrays of one length, best first: each hit's record as `ids`
    (the store's row id, a handle for `Fetch`, meaningful only in the store that returned
    it), its version as `seqs` (the record's `seq` when found: unique in the store to one
    version of one record, so a caller may key what it knows of a record by it) and
    `scores` (as `Hit.score`)."""

    ids: npt.NDArray[np.int64]
    seqs: npt.NDArray[np.int64]
    scores: npt.NDArray[np.float64]

    def __len__(self) -> int:
        return int(self.ids.shape[0])


@dataclass(frozen=True, slots=True, kw_only=True)
class Fetch:
    """Result: the records found by a `Rank` (their `Found.ids` and `Found.seqs`, in any
    order and number), one per id, as they were found: None for a record changed or
    deleted since (a row id may be reused; its version tells). `lazy`: as for `Search`."""

    ids: Sequence[int]
    seqs: Sequence[int]
    lazy: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class PutVectors:
    """Attach vectors of embedding `model` to records, one row per (namespace, key);
    records that no longer exist (or whose text changed since `seqs`) are skipped.
    Result: how many were stored."""

    model: str
    items: Sequence[tuple[Namespace, str, int]]  # (namespace, key, seq the text was read at)
    vectors: npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True, kw_only=True)
class Unembedded:
    """Result: up to `limit` records under `prefix` (only in it, if `exact`) written after
    `after_seq` that have no vector of `model` yet, oldest first (what a background
    embedder works through; `after_seq` lets it step past records it gave up on)."""

    model: str
    prefix: Namespace = ()
    limit: int = 256
    exact: bool = False
    after_seq: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class NamespaceVersion:
    """Where a namespace stands: `seq` is the `seq` of the last write or delete of a record
    in it, `deleted_seq` that of the last delete (0: none yet). Both only grow. A reader
    that knew `seq` has seen everything while it is unchanged; if only `seq` moved, a
    `Scan` with ``after_seq`` shows every change since (records put); if `deleted_seq`
    moved too, records were removed, which no scan shows: read everything again."""

    seq: int = 0
    deleted_seq: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Version:
    """Result: the `NamespaceVersion` of exactly `namespace` (vectors do not count: they
    change no record). Cheap: one indexed lookup, for callers to check before reading."""

    namespace: Namespace


@dataclass(frozen=True, slots=True, kw_only=True)
class Expect:
    """A guard: the batch fails with `ConflictError` (writing nothing) unless the version
    `seq` of `namespace` is `seq` when this op runs. Put it before the writes of a batch
    that were computed from what the caller read at `seq`. Result: None."""

    namespace: Namespace
    seq: int


Op: TypeAlias = (
    Put
    | Get
    | Delete
    | Scan
    | Search
    | VectorSearch
    | Rank
    | Fetch
    | PutVectors
    | Unembedded
    | Version
    | Expect
)


@runtime_checkable
class MemoryStore(Protocol):
    """What a storage backend implements: run a batch of operations, in order, atomically
    for the writes in it; one result per operation."""

    def batch(self, ops: Sequence[Op], *, ctx: StoreContext | None = None) -> list[Any]:
        """Run `ops` and return their results."""
        ...

    async def abatch(self, ops: Sequence[Op], *, ctx: StoreContext | None = None) -> list[Any]:
        """`batch` for async callers (never blocks the event loop)."""
        ...

    def close(self) -> None:
        """Release connections and files; the store is unusable afterwards."""
        ...


class BaseStore(ABC):
    """Template for backends: implement `batch`, `abatch` and `close`; the methods below are
    shorthand for one-operation batches."""

    @abstractmethod
    def batch(self, ops: Sequence[Op], *, ctx: StoreContext | None = None) -> list[Any]:
        """Run `ops` and return their results."""

    @abstractmethod
    async def abatch(self, ops: Sequence[Op], *, ctx: StoreContext | None = None) -> list[Any]:
        """`batch` for async callers."""

    @abstractmethod
    def close(self) -> None:
        """Release connections and files."""

    def put(self, record: Record) -> Record:
        """Insert or replace one record; returns it as stored (with `seq` and timestamps)."""
        result: Record = self.batch([Put(record=record)])[0]
        return result

    def put_many(self, records: Sequence[Record]) -> list[Record]:
        """Insert or replace several records in one transaction."""
        return self.batch([Put(record=r) for r in records])

    def get(self, namespace: Namespace, key: str) -> Record | None:
        """The record at `namespace` / `key`, or None."""
        result: Record | None = self.batch([Get(namespace=namespace, key=key)])[0]
        return result

    def delete(self, namespace: Namespace, key: str) -> bool:
        """Remove a record; whether it existed."""
        result: bool = self.batch([Delete(namespace=namespace, key=key)])[0]
        return result

    def version(self, namespace: Namespace) -> NamespaceVersion:
        """The `NamespaceVersion` of `namespace`."""
        result: NamespaceVersion = self.batch([Version(namespace=namespace)])[0]
        return result

    def scan(self, prefix: Namespace, **options: Any) -> list[Record]:
        """Records under `prefix`; `options` are the fields of `Scan` (``exact=True``: only
        in `prefix` itself)."""
        result: list[Record] = self.batch([Scan(prefix=prefix, **options)])[0]
        return result

    def search(self, prefix: Namespace, query: str, **options: Any) -> list[Hit]:
        """Lexical search under `prefix`; `options` are the fields of `Search`."""
        result: list[Hit] = self.batch([Search(prefix=prefix, query=query, **options)])[0]
        return result

    def vector_search(
        self, prefix: Namespace, vector: npt.NDArray[np.float32], *, model: str, **options: Any
    ) -> list[Hit]:
        """Nearest records by vector under `prefix`; `options` are the fields of `VectorSearch`."""
        op = VectorSearch(prefix=prefix, vector=vector, model=model, **options)
        result: list[Hit] = self.batch([op])[0]
        return result

    def rank(self, search: Search | VectorSearch) -> Found:
        """The hits of `search` as arrays (`Rank`)."""
        result: Found = self.batch([Rank(search=search)])[0]
        return result

    def fetch(self, found: Found, *, lazy: bool = False) -> list[Record | None]:
        """The records of `found`, in its order (`Fetch`)."""
        op = Fetch(ids=found.ids.tolist(), seqs=found.seqs.tolist(), lazy=lazy)
        result: list[Record | None] = self.batch([op])[0]
        return result

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""The `Embedder` protocol and the template every built-in embedder is made from.

`BaseEmbedder` does what all of them need, so that a provider only writes `_embed_batch`:
argument checks, batching, L2 normalisation and a shape check on what the model returned, and an
LRU cache of query embeddings (the same query is embedded on every rebuild within a turn).
`Lazy` loads a model on first use, once, under a lock.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Final, Generic, Literal, Protocol, TypeVar, get_args, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from loomctx.errors import ConfigError, EmbeddingError, check_int

__all__ = [
    "BaseEmbedder",
    "CacheInfo",
    "EmbedKind",
    "Embedder",
    "EmbeddingError",
    "Lazy",
    "check_texts",
    "normalise",
]

EmbedKind = Literal["query", "document"]
"""What a text is: a search ``"query"`` or a ``"document"`` to be found (models such as e5
embed the two with different prefixes)."""

_KINDS: Final = frozenset(get_args(EmbedKind))
T = TypeVar("T")


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of a fixed dimension.

    `name` is stable across processes and identifies the vector space (model and dimension):
    stores key vectors by it, so vectors of different models are never compared. `embed`
    refuses a single `str` with `ConfigError` (a string is a sequence of characters; pass
    ``[text]``). `loomctx.testing.embedders.check_embedder` checks an implementation.
    """

    @property
    def name(self) -> str:
        """A stable identifier of the model and its dimension, e.g. ``"openai:m:1536"``."""
        ...

    @property
    def dim(self) -> int:
        """The length of every vector."""
        ...

    def embed(self, texts: Sequence[str], *, kind: EmbedKind = "document") -> NDArray[np.float32]:
        """One L2-normalised float32 row per text: shape ``(len(texts), dim)``."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheInfo:
    """Counters of an embedder's query cache."""

    hits: int
    misses: int
    size: int
    maxsize: int


def check_texts(texts: Sequence[str], kind: str) -> list[str]:
    """`texts` as a list, or a `ConfigError` saying what was wrong with the arguments."""
    if isinstance(texts, str):
        raise ConfigError(
            f"`embed` takes a sequence of texts, not one string ({texts[:40]!r}); "
            "pass `[text]` to embed a single text"
        )
    if kind not in _KINDS:
        raise ConfigError(f"`kind` must be 'query' or 'document', not {kind!r}")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise ConfigError(f"text {i} is a {type(t).__name__}, not a str: {t!r}")
    return out


def normalise(vectors: NDArray[np.floating], *, dim: int, name: str) -> NDArray[np.float32]:
    """`vectors` as a C-contiguous float32 matrix with unit rows; checks shape and finiteness.

    A zero row stays zero (there is no direction to keep); models do not produce one for
    real text.
    """
    out = np.array(vectors, dtype=np.float32, order="C", copy=True)
    if out.ndim != 2 or out.shape[1] != dim:
        raise EmbeddingError(
            f"`{name}` returned an array of shape {out.shape}, expected (n, {dim}); "
            "check that the model matches the embedder's `dim`"
        )
    if not np.isfinite(out).all():
        raise EmbeddingError(f"`{name}` returned NaN or infinite values")
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.divide(out, norms, out=out, where=norms > 0)
    return out


class Lazy(Generic[T]):
    """A value built by `factory` on first `get()`, once, even when threads race for it.

    A failed build is not remembered: the next `get()` tries again (after the user installed
    the missing piece, say).
    """

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._value: T | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        """Whether the value has been built."""
        return self._value is not None

    def get(self) -> T:
        """The value, built now if this is the first call."""
        value = self._value
        if value is None:
            with self._lock:
                value = self._value
                if value is None:
                    value = self._value = self._factory()
        return value


class BaseEmbedder(ABC):
    """The template of the built-in embedders: implement `name`, `dim` and `_embed_batch`.

    `embed` checks its arguments, cuts the texts into batches of at most `batch_size`,
    normalises what `_embed_batch` returns and checks its shape. Query embeddings are kept in
    an LRU cache of `query_cache_size` entries (0 turns it off); documents are not cached,
    since each is embedded once when it is stored. Safe to call from several threads.
    """

    def __init__(self, *, batch_size: int = 32, query_cache_size: int = 1024) -> None:
        check_int(batch_size, "`batch_size`", minimum=1)
        check_int(query_cache_size, "`query_cache_size`", minimum=0)
        self.batch_size = batch_size
        self._cache: OrderedDict[str, NDArray[np.float32]] = OrderedDict()
        self._cache_size = query_cache_size
        self._cache_lock = threading.Lock()
        # Queries being embedded now, by text: a second caller waits for the first's row.
        self._inflight: dict[str, Future[NDArray[np.float32]]] = {}
        self._hits = 0
        self._misses = 0

    @property
    @abstractmethod
    def name(self) -> str:
        """A stable identifier of the model and its dimension."""

    @property
    @abstractmethod
    def dim(self) -> int:
        """The length of every vector."""

    @abstractmethod
    def _embed_batch(self, texts: list[str], kind: EmbedKind) -> NDArray[np.floating]:
        """Raw vectors for at most `batch_size` texts, one row each (normalised by the caller)."""

    def embed(self, texts: Sequence[str], *, kind: EmbedKind = "document") -> NDArray[np.float32]:
        """One L2-normalised float32 row per text, in order: shape ``(len(texts), dim)``."""
        items = check_texts(texts, kind)
        if kind == "query" and self._cache_size:
            return self._embed_cached(items)
        return self._embed_all(items, kind)

    def has_query(self, text: str) -> bool:
        """Whether ``embed([text], kind="query")`` answers from the query cache, computing
        nothing (a caller may then run it where it would not wait on a model)."""
        with self._cache_lock:
            return text in self._cache

    def _embed_all(self, texts: list[str], kind: EmbedKind) -> NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = [
            normalise(
                self._embed_batch(texts[i : i + self.batch_size], kind),
                dim=self.dim,
                name=self.name,
            )
            for i in range(0, len(texts), self.batch_size)
        ]
        out = parts[0] if len(parts) == 1 else np.concatenate(parts)
        if out.shape[0] != len(texts):
            raise EmbeddingError(
                f"`{self.name}` returned {out.shape[0]} vectors for {len(texts)} texts"
            )
        return out

    def _embed_cached(self, texts: list[str]) -> NDArray[np.float32]:
        """Cached rows, rows other threads are computing right now (awaited, not recomputed:
        memory and knowledge-base search ask for the same new query at once), and the rest
        embedded here in one batch."""
        found: dict[str, NDArray[np.float32]] = {}
        waiting: dict[str, Future[NDArray[np.float32]]] = {}
        mine: dict[str, Future[NDArray[np.float32]]] = {}
        with self._cache_lock:
            for t in dict.fromkeys(texts):
                row = self._cache.get(t)
                if row is not None:
                    self._cache.move_to_end(t)
                    found[t] = row
                elif t in self._inflight:
                    waiting[t] = self._inflight[t]
                else:
                    mine[t] = self._inflight[t] = Future()
            self._hits += sum(t in found or t in waiting for t in texts)
            self._misses += len(mine)
        if mine:
            try:
                fresh = self._embed_all(list(mine), "query")
            except BaseException as exc:
                with self._cache_lock:
                    for t, future in mine.items():
                        del self._inflight[t]
                        future.set_exception(exc)
                raise
            with self._cache_lock:
                for i, (t, future) in enumerate(mine.items()):
                    row = fresh[i].copy()
                    row.flags.writeable = False
                    self._cache[t] = row
                    self._cache.move_to_end(t)
                    del self._inflight[t]
                    future.set_result(row)
                    found[t] = row
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        for t, future in waiting.items():
            found[t] = future.result()
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            out[i] = found[t]
        return out

    def cache_info(self) -> CacheInfo:
        """Hits, misses and size of the query cache."""
        with self._cache_lock:
            return CacheInfo(
                hits=self._hits,
                misses=self._misses,
                size=len(self._cache),
                maxsize=self._cache_size,
            )

    def clear_cache(self) -> None:
        """Empty the query cache and reset its counters."""
        with self._cache_lock:
            self._cache.clear()
            self._hits = self._misses = 0

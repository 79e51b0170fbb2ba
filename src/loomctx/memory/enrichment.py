"""`BackgroundEmbedder`: dense vectors for stored records, computed off the write path.

Writing a record is sub-millisecond; embedding its text takes tens of milliseconds with a real
model. So writes never wait for embeddings: a worker thread asks the store for records that
have no vector of its model yet (`Unembedded`), embeds them in batches, and attaches the
vectors (`PutVectors`, which skips records rewritten in the meantime). Search meanwhile uses
what is already embedded plus lexical search, which covers everything at once.

Failures are told apart, so that one bad text never stalls the rest:

- **The embedder fails as a whole** (a model server down, a network error): a batch fails
  and so does a short probe text. Nothing is given up; the thread waits, doubling the pause
  from `interval` up to `max_backoff`, and tries the same batch again.
- **A text fails on its own** (the embedder raises on it, or returns NaN or infinity for
  it): the batch is split in halves, and halves of halves, until each text that still fails
  fails alone. That record is *quarantined*: logged as a warning, listed in `quarantined`,
  counted in `quarantined_total`, and stepped past (the embedder reads on after its `seq`),
  while the batch's other texts are stored. A quarantined record is tried again when its
  text changes (a new seq) or in a new process; it stays findable by lexical search.

NaN and infinite vectors are never stored.

`pending` counts the records that still lack a vector, so that a report can say how many
were searched by their words only: the worker thread counts them once when it starts (a
store written by an earlier process, or made with another embedding model, starts with all of
its records to embed), writers add what they store (`notify(count)`), and batches subtract
what they handle. Records another process writes meanwhile are counted when a thread starts.

**A cascade** (`first`): a fast embedder's `BackgroundEmbedder` (`StaticEmbedder`, thousands
of texts a second) chained before a slow one's (the transformer, tens a second). The slow one
embeds a batch of its own only when `first` has nothing left, so one thread gives every record
its fast vector first (a 100k-turn import in tens of seconds), then the slow vectors follow;
new writes get their fast vector after at most one slow batch. `drain` and `notify` reach
both.

**Writes come first.** The thread is Python, as is the writer: embedding while a bulk import
runs took the import's share of the interpreter lock (and the store's lock) from it and slowed
the import markedly (`bench/memory_ingest_bench.py`; figures in docs/benchmarks.md, "Design
measurements"). So the thread puts a batch off while a writer is inside `writing()` or left it
less than `quiet` seconds ago: a batch starts when writes pause, which in a conversation is at
once. A stream of writes that never pauses for `quiet` still gets one batch every `max_defer`
seconds. `drain` and `run_once`, called by the writer itself, never wait.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np
import numpy.typing as npt

from loomctx.errors import ConfigError, EmbeddingError, StoreClosedError
from loomctx.stores.base import MemoryStore, Namespace, PutVectors, Record, Unembedded

if TYPE_CHECKING:
    from loomctx.embeddings import Embedder

__all__ = ["BackgroundEmbedder", "QuarantinedRecord"]

log = logging.getLogger(__name__)

_PROBE: Final = "A short plain sentence to check that the embedding model answers."
_KEEP: Final = 1_000  # quarantined records listed (the total is counted beyond it)
_REASON_CHARS: Final = 300
_COUNT_PAGE: Final = 4_096  # records read per query when counting the backlog

_Vectors = npt.NDArray[np.float32]
_Split = tuple[list[tuple[Record, _Vectors]], list[tuple[Record, str]]]


@dataclass(frozen=True, slots=True, kw_only=True)
class QuarantinedRecord:
    """A record whose text the embedder failed on, alone: where it is, the `seq` of the text
    that failed, and why (the error, or NaN / infinity in its vector)."""

    namespace: Namespace
    key: str
    seq: int
    reason: str


class BackgroundEmbedder:
    """Embeds the records under `prefix` (only in it, if `exact`) that lack vectors of
    `embedder`, in batches of `batch_size` (default: the embedder's `batch_size`, else 32).

    Call `run_once()` / `drain()` yourself, or `start()` a daemon thread that keeps up and
    `stop()` it (the owner must: `LoomMemory.close()` does). When the embedder fails as a
    whole, `run_once` raises `EmbeddingError` and the thread backs off (`interval` doubling
    up to `max_backoff` seconds) and retries; `failures` counts such failures in a row, and
    `last_error` keeps the last error seen (of a whole batch, even one that then embedded
    when tried again). A text that fails on its own is quarantined (see the
    module docstring): read `quarantined` and `quarantined_total`. Writers that wrap their
    writes in `writing()` get the thread out of their way (the module docstring's "Writes come
    first": `quiet`, `max_defer`).
    """

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        *,
        prefix: Namespace = (),
        exact: bool = False,
        batch_size: int | None = None,
        interval: float = 0.25,
        max_backoff: float = 60.0,
        first: BackgroundEmbedder | None = None,
        quiet: float = 0.1,
        max_defer: float = 0.5,
    ) -> None:
        if batch_size is None:
            # The embedder's own batch (a fast one takes hundreds of texts at once: fewer
            # trips to the store per text), else 32.
            own = getattr(embedder, "batch_size", None)
            batch_size = own if isinstance(own, int) and not isinstance(own, bool) else 32
        if batch_size < 1 or interval <= 0 or max_backoff < interval:
            raise ConfigError(
                f"`batch_size` must be >= 1, `interval` > 0 and `max_backoff` >= `interval`, "
                f"got {batch_size!r}, {interval!r}, {max_backoff!r}"
            )
        if not 0 <= quiet <= max_defer:
            raise ConfigError(
                f"`quiet` must be >= 0 and `max_defer` >= `quiet`, got {quiet!r}, {max_defer!r}"
            )
        if first is not None and first.model == embedder.name:
            raise ConfigError(
                f"`first` must embed with another model than {embedder.name!r} (a faster one)"
            )
        self.store = store
        self.embedder: Embedder = embedder
        self.first = first
        """Embedded before each batch of this one's (the module docstring's cascade)."""
        self.prefix = prefix
        self.exact = exact
        self.batch_size = batch_size
        self.interval = interval
        self.max_backoff = max_backoff
        self.quiet = quiet
        self.max_defer = max_defer
        self.embedded = 0
        self.seconds = 0.0
        self.failures = 0
        self.last_error: BaseException | None = None
        self.quarantined_total = 0
        self._quarantined: deque[QuarantinedRecord] = deque(maxlen=_KEEP)
        self._after = 0  # records up to this seq were embedded or quarantined
        self._pending = 0
        self._writers = 0  # writers inside `writing()` now
        self._last_write = -float("inf")  # when the last one left it (monotonic seconds)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def model(self) -> str:
        """The name of the embedding model whose vectors this one stores."""
        return self.embedder.name

    @property
    def quarantined(self) -> tuple[QuarantinedRecord, ...]:
        """The records given up on, oldest first (the last 1,000; `quarantined_total` counts
        them all)."""
        with self._lock:
            return tuple(self._quarantined)

    @property
    def pending(self) -> int:
        """Records known to still lack a vector (see the module docstring): 0 once caught up."""
        return self._pending

    def count_pending(self) -> int:
        """Count the records under `prefix` that lack a vector now, exactly (reads them all,
        in pages: off the hot path), and remember the count as `pending`."""
        total, after = 0, self._after
        while True:
            page: list[Record] = self.store.batch(
                [
                    Unembedded(
                        model=self.embedder.name,
                        prefix=self.prefix,
                        limit=_COUNT_PAGE,
                        exact=self.exact,
                        after_seq=after,
                    )
                ]
            )[0]
            total += len(page)
            if len(page) < _COUNT_PAGE:
                break
            after = page[-1].seq
        with self._lock:
            self._pending = total
        return total

    def run_once(self) -> int:
        """Embed one batch; returns how many records it handled, stored or quarantined (0:
        nothing left). Raises `EmbeddingError` when the embedder fails as a whole. With
        `first`: its batch while it has records to embed, this one's only then."""
        if self.first is not None and (done := self.first.run_once()):
            return done
        return self._run_own()

    def _run_own(self) -> int:
        op = Unembedded(
            model=self.embedder.name,
            prefix=self.prefix,
            limit=self.batch_size,
            exact=self.exact,
            after_seq=self._after,
        )
        records: list[Record] = self.store.batch([op])[0]
        if not records:
            with self._lock:
                self._pending = 0
            return 0
        start = time.perf_counter()
        good, bad = self._embed_batch(records)
        stored = 0
        if good:
            items = [(r.namespace, r.key, r.seq) for r, _ in good]
            vectors = np.stack([v for _, v in good])
            stored = self.store.batch(
                [PutVectors(model=self.embedder.name, items=items, vectors=vectors)]
            )[0]
        for record, reason in bad:
            self._quarantine(record, reason)
        self._after = max(self._after, *(r.seq for r in records))
        self.seconds += time.perf_counter() - start
        self.embedded += stored
        with self._lock:
            self._pending = max(0, self._pending - len(records))
        return len(records)

    def drain(self) -> int:
        """Embed until nothing is left; returns how many records were handled."""
        total = 0
        while n := self.run_once():
            total += n
        return total

    def notify(self, count: int = 0) -> None:
        """Wake the thread: new records were written (`count` of them with text, added to
        `pending`, and to `first`'s)."""
        if self.first is not None:
            self.first.notify(count)
        with self._lock:
            self._pending += count
        self._wake.set()

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """A block in which the caller writes to the store: the thread starts no batch
        during it, nor until `quiet` seconds after it (up to `max_defer` seconds in all)."""
        with self._lock:
            self._writers += 1
        try:
            yield
        finally:
            with self._lock:
                self._writers -= 1
                self._last_write = time.monotonic()

    def start(self) -> None:
        """Start the daemon thread (idempotent)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._loop, name=f"loom-embed-{self.embedder.name}", daemon=True
        )
        self._thread.start()

    def stop(self, *, timeout: float = 30.0) -> None:
        """Stop the thread after its current batch."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def running(self) -> bool:
        """Whether the thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    # --- internals --------------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            if self.first is not None:
                self.first.count_pending()
            self.count_pending()
        except Exception as exc:  # the store is closed or down: the loop below reports it
            log.debug("could not count the records to embed: %s", exc)
        while not self._stop.is_set():
            self._yield_to_writers()
            if self._stop.is_set():
                return
            try:
                done = self.run_once()
            except StoreClosedError:
                # Closed under the thread (its owner forgot `stop()`): nothing will come back.
                log.info(
                    "background embedding with %r stops: its store is closed", self.embedder.name
                )
                return
            except Exception as exc:  # the embedder (or the store) is down: back off, retry
                self.last_error = exc
                self.failures += 1
                pause = min(self.max_backoff, self.interval * 2 ** min(self.failures, 32))
                log.warning(
                    "background embedding with %r failed (%d in a row), retrying in %.2f s: %s",
                    self.embedder.name,
                    self.failures,
                    pause,
                    exc,
                )
                # New writes do not cut a back-off short; stopping does.
                self._stop.wait(pause)
                continue
            self.failures = 0
            if not done:
                self._wake.wait(self.interval)
                self._wake.clear()

    def _yield_to_writers(self) -> None:
        """Wait while a writer is in `writing()` or left it less than `quiet` seconds ago,
        for at most `max_defer` seconds (or until stopped)."""
        deadline = time.monotonic() + self.max_defer
        while True:
            now = time.monotonic()
            with self._lock:
                writers, last = self._writers, self._last_write
            wait = self.quiet if writers else last + self.quiet - now
            wait = min(wait, deadline - now)
            if wait <= 0 or self._stop.wait(wait):
                return

    def _embed_batch(self, records: Sequence[Record]) -> _Split:
        """Vectors for the records that embed, and the records that fail on their own."""
        try:
            vectors: _Vectors | None = self._vectors([r.text for r in records])
            error: BaseException | None = None
        except Exception as exc:
            vectors, error = None, exc
            self.last_error = exc  # kept even if the texts embed when tried again below
        if vectors is not None and np.isfinite(vectors).all():
            return list(zip(records, vectors, strict=True)), []
        whole = vectors is None or not np.isfinite(vectors).any()
        if whole and not self._embedder_works():
            what = _describe(error) if error is not None else "NaN or infinity for every text"
            raise EmbeddingError(
                f"the embedder {self.embedder.name!r} failed on a batch of {len(records)} "
                f"texts and on a probe text ({what}); it is down or misconfigured: background "
                f"embedding retries after a pause, and search is lexical meanwhile"
            ) from error
        return self._split(records)

    def _split(self, records: Sequence[Record]) -> _Split:
        """Embed `records`, in halves on failure, until each text that fails fails alone."""
        try:
            vectors = self._vectors([r.text for r in records])
        except Exception as exc:
            if len(records) == 1:
                return [], [(records[0], _describe(exc))]
            middle = len(records) // 2
            first, second = self._split(records[:middle]), self._split(records[middle:])
            return first[0] + second[0], first[1] + second[1]
        finite = [bool(np.isfinite(row).all()) for row in vectors]
        good = [(r, v) for r, v, ok in zip(records, vectors, finite, strict=True) if ok]
        bad: list[tuple[Record, str]] = []
        for record, ok in zip(records, finite, strict=True):
            if ok:
                continue
            if len(records) == 1:
                bad.append((record, "the embedder returned NaN or infinity for it"))
            else:  # a row can depend on its batch (padding): try it alone
                alone = self._split([record])
                good += alone[0]
                bad += alone[1]
        return good, bad

    def _vectors(self, texts: Sequence[str]) -> _Vectors:
        out = np.asarray(self.embedder.embed(texts, kind="document"), dtype=np.float32)
        if out.ndim != 2 or out.shape[0] != len(texts):
            raise EmbeddingError(
                f"`{self.embedder.name}` returned an array of shape {out.shape} for "
                f"{len(texts)} texts; expected one row per text"
            )
        return out

    def _embedder_works(self) -> bool:
        """Whether the embedder embeds a plain probe text to finite numbers."""
        try:
            return bool(np.isfinite(self._vectors([_PROBE])).all())
        except Exception:  # any failure means: not now
            return False

    def _quarantine(self, record: Record, reason: str) -> None:
        log.warning(
            "record %r in %r cannot be embedded by %r and is skipped (quarantined): %s",
            record.key,
            record.namespace,
            self.embedder.name,
            reason,
        )
        entry = QuarantinedRecord(
            namespace=record.namespace, key=record.key, seq=record.seq, reason=reason
        )
        with self._lock:
            self._quarantined.append(entry)
            self.quarantined_total += 1


def _describe(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= _REASON_CHARS else text[: _REASON_CHARS - 3] + "..."

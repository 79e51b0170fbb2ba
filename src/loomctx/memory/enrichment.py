"""`BackgroundEmbedder`: dense vectors for stored records, computed off the write path.

Writing a record is sub-millisecond; embedding its text takes tens of milliseconds with a real
model. So writes never wait for embeddings: a worker thread asks the store for records that
have no vector of its model yet (`Unembedded`), embeds them in batches, and attaches the
vectors (`PutVectors`, which skips records rewritten in the meantime). Search meanwhile uses
what is already embedded plus lexical search, which covers everything at once.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from loomctx.errors import ConfigError
from loomctx.stores.base import MemoryStore, Namespace, PutVectors, Record, Unembedded

if TYPE_CHECKING:
    from loomctx.embeddings import Embedder

__all__ = ["BackgroundEmbedder"]

log = logging.getLogger(__name__)


class BackgroundEmbedder:
    """Embeds the records under `prefix` that lack vectors of `embedder`, in batches.

    Call `run_once()` / `drain()` yourself, or `start()` a daemon thread that keeps up and
    `stop()` it (the owner must: `LoomMemory.close()` does). A failing batch is logged, kept
    in `last_error`, and retried after `interval` seconds; it never stops the thread.
    """

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        *,
        prefix: Namespace = (),
        exact: bool = False,
        batch_size: int = 32,
        interval: float = 0.25,
    ) -> None:
        if batch_size < 1 or interval <= 0:
            raise ConfigError(
                f"`batch_size` must be >= 1 and `interval` > 0, got {batch_size!r}, {interval!r}"
            )
        self.store = store
        self.embedder = embedder
        self.prefix = prefix
        self.exact = exact
        self.batch_size = batch_size
        self.interval = interval
        self.embedded = 0
        self.seconds = 0.0
        self.last_error: BaseException | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> int:
        """Embed one batch; returns how many vectors were stored (0: nothing left)."""
        op = Unembedded(
            model=self.embedder.name, prefix=self.prefix, limit=self.batch_size, exact=self.exact
        )
        records: list[Record] = self.store.batch([op])[0]
        if not records:
            return 0
        start = time.perf_counter()
        vectors = self.embedder.embed([r.text for r in records], kind="document")
        items = [(r.namespace, r.key, r.seq) for r in records]
        stored: int = self.store.batch(
            [PutVectors(model=self.embedder.name, items=items, vectors=vectors)]
        )[0]
        self.seconds += time.perf_counter() - start
        self.embedded += stored
        return len(records)

    def drain(self) -> int:
        """Embed until nothing is left; returns how many records were embedded."""
        total = 0
        while n := self.run_once():
            total += n
        return total

    def notify(self) -> None:
        """Wake the thread: new records were written."""
        self._wake.set()

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

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                done = self.run_once()
            except Exception as exc:  # a bad batch must not end background embedding
                self.last_error = exc
                log.warning("background embedding failed, retrying: %s", exc)
                done = 0
            if not done:
                self._wake.wait(self.interval)
                self._wake.clear()

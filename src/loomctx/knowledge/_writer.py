"""How an ingest is written: vectors in full batches, documents in groups, progress as it goes.

An ingest cuts each document into chunks (`_Plan`: what storing it takes), embeds the new
chunks and writes. Two things make it fast and one makes it watchable:

- **Full batches.** The chunks waiting for vectors form one queue across documents, embedded
  `batch` at a time (the embedder's own batch size): the model runs at its batch rate
  whatever the documents' sizes, and only the very last batch of an ingest may be short.
- **Groups.** A document is written, with its chunks and their vectors, in one store batch
  (whole or not at all, as `KnowledgeBase` promises), together with the documents before it
  once at least `flush` chunks are ready: a folder of small files is not one transaction
  per file.
- **Progress.** `_Tally` counts files and chunks and sends an `IngestProgress` each time a
  batch is embedded, every `_TICK` chunks cut (without an embedder cutting is the work), and
  each time a file has been written or left out, with the elapsed time, so that a caller
  can show a rate and an estimate. Until every file is cut, the total is the chunks cut so
  far plus an estimate for the rest, from the bytes still to read at the chunks per byte
  seen so far (within a file: from the share of it cut).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import numpy as np
from numpy.typing import NDArray

from loomctx.knowledge._types import IngestProgress, IngestProgressKind, IngestStatus
from loomctx.stores.base import Delete, Op, Put, PutVectors, Record

if TYPE_CHECKING:
    from loomctx.embeddings import Embedder
    from loomctx.stores.base import MemoryStore

__all__ = ["FLUSH_CHUNKS", "Plan", "Tally", "Writer"]

FLUSH_CHUNKS: Final = 64  # write documents in groups of about this many chunks
_TICK: Final = 32  # report progress every this many chunks cut
# The vectors of a batch are computed from the very texts the same batch writes, so no write
# can come between: "read at" any seq at all.
_SAME_BATCH: Final = 2**62

Progress = Callable[[IngestProgress], object]


@dataclass(slots=True)
class Plan:
    """What storing one document takes: records to put (the document's first), chunk keys
    to delete, and the chunk records that need vectors (`vectors`, filled by `Writer`)."""

    status: IngestStatus
    path: str = ""
    records: list[Record] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    embed: list[Record] = field(default_factory=list)
    vectors: list[NDArray[np.float32] | None] = field(default_factory=list)
    waiting: int = 0

    @property
    def chunks(self) -> int:
        """How many chunk records it writes."""
        return max(0, len(self.records) - 1)


class Tally:
    """The counts behind `IngestProgress`, and the callback they go to (None: counted only)."""

    def __init__(self, report: Progress | None, *, sizes: Sequence[int], embedding: bool) -> None:
        self.report = report
        self.embedding = embedding
        self.start = time.perf_counter()
        self.files = len(sizes)
        self.bytes_left = sum(sizes)
        self.files_done = 0
        self.bytes_cut = 0  # bytes of the files cut so far
        self.cut = 0  # chunks of the files cut so far
        self.partial = 0  # chunks cut of the file being cut
        self.share = 0.0  # the share of that file cut
        self.file_bytes = 0
        self.done = 0  # chunks done: cut, and embedded when there is an embedder
        self.path = ""
        self.status: IngestStatus = "added"

    def begin(self, path: str, size: int) -> None:
        """A file is about to be read and cut."""
        self.path, self.file_bytes = path, size
        self.bytes_left = max(0, self.bytes_left - size)
        self.partial, self.share = 0, 0.0

    def cutting(self, chunks: int, share: float) -> None:
        """`chunks` of the current file are cut, `share` of it."""
        self.partial, self.share = chunks, share
        if not self.embedding:
            self.done = self.cut + chunks
        if chunks % _TICK == 0:
            self._send("chunks")

    def cut_whole(self, chunks: int, status: IngestStatus) -> None:
        """The current file is cut into `chunks` chunks (0: unchanged or skipped)."""
        self.cut += chunks
        self.bytes_cut += self.file_bytes
        self.partial, self.share, self.file_bytes = 0, 0.0, 0
        self.status = status
        if not self.embedding:
            self.done = self.cut

    def embedded(self, chunks: int, last: Plan) -> None:
        """`chunks` more chunks have vectors, the last of them one of `last`'s."""
        self.done += chunks
        self.path, self.status = last.path, last.status
        self._send("chunks")

    def stored(self, plan: Plan) -> None:
        """A file has been written (or left out)."""
        self.files_done += 1
        self.path, self.status = plan.path, plan.status
        self._send("file")

    def total(self) -> int:
        """Chunks cut so far plus an estimate for the rest."""
        current = round(self.partial / self.share) if self.share > 0 else self.partial
        known = self.cut + current
        read = self.bytes_cut + self.file_bytes
        rest = round(self.bytes_left * known / read) if read else 0
        return max(known + rest, self.done)

    def _send(self, kind: IngestProgressKind) -> None:
        if self.report is None or not self.files:
            return
        self.report(
            IngestProgress(
                done=self.files_done,
                total=self.files,
                path=self.path,
                status=self.status,
                kind=kind,
                chunks=self.done,
                chunks_total=self.total(),
                elapsed=time.perf_counter() - self.start,
            )
        )


class Writer:
    """Embeds and writes plans in order (see the module docstring)."""

    def __init__(
        self,
        store: MemoryStore,
        namespace: tuple[str, ...],
        embedder: Embedder | None,
        tally: Tally,
        *,
        flush: int = FLUSH_CHUNKS,
    ) -> None:
        self.store = store
        self.namespace = namespace
        self.embedder = embedder
        self.tally = tally
        self.flush = flush
        batch = getattr(embedder, "batch_size", 32)
        self.batch = batch if isinstance(batch, int) and batch >= 1 else 32
        self.queue: deque[Plan] = deque()  # not yet written, in order
        self.todo: deque[tuple[Plan, int]] = deque()  # chunks waiting for vectors
        self.written: list[Plan] = []

    def add(self, plan: Plan) -> None:
        """Queue `plan`; embed every full batch and write what is ready."""
        if self.embedder is not None and plan.embed:
            plan.vectors = [None] * len(plan.embed)
            plan.waiting = len(plan.embed)
            self.todo.extend((plan, i) for i in range(len(plan.embed)))
        self.queue.append(plan)
        while len(self.todo) >= self.batch:
            self._embed()
        self._write(final=False)

    def finish(self) -> list[Plan]:
        """Embed and write the rest; every plan, in the order added."""
        while self.todo:
            self._embed()
        self._write(final=True)
        return self.written

    def _embed(self) -> None:
        assert self.embedder is not None
        items = [self.todo.popleft() for _ in range(min(self.batch, len(self.todo)))]
        vectors = self.embedder.embed([p.embed[i].text for p, i in items], kind="document")
        for (plan, i), vector in zip(items, vectors, strict=True):
            plan.vectors[i] = vector
            plan.waiting -= 1
        self.tally.embedded(len(items), items[-1][0])

    def _write(self, *, final: bool) -> None:
        ready = 0
        chunks = 0
        for plan in self.queue:
            if plan.waiting:
                break
            ready += 1
            chunks += plan.chunks
        if not ready or (chunks < self.flush and not final):
            return
        plans = [self.queue.popleft() for _ in range(ready)]
        ops: list[Op] = []
        for plan in plans:
            ops += [Put(record=r) for r in plan.records]
            ops += [Delete(namespace=self.namespace, key=k) for k in plan.deletes]
        if self.embedder is not None:
            pairs = [(r, v) for p in plans for r, v in zip(p.embed, p.vectors, strict=True)]
            if pairs:
                items = [(self.namespace, r.key, _SAME_BATCH) for r, _ in pairs]
                vectors = np.stack([v for _, v in pairs if v is not None])
                ops.append(PutVectors(model=self.embedder.name, items=items, vectors=vectors))
        if ops:
            self.store.batch(ops)
        for plan in plans:
            self.written.append(plan)
            self.tally.stored(plan)

"""`KnowledgeBase`: documents -> chunks -> lexical and dense indexes, all in a `MemoryStore`.

What the store holds, under the knowledge base's namespace (``("knowledge", name)`` unless
another is given: `loomctx serve` keeps each tenant's under the tenant's own,
``(tenant, "knowledge", name)``):

- a ``kb_document`` record per document (key ``doc:<id>``, no text): the hash of its text,
  a fingerprint of everything its chunks were made from (text, metadata, chunker settings),
  its chunk count, metadata, the embedding models its chunks have vectors of, and the folder
  it was ingested from;
- a ``kb_chunk`` record per chunk (key ``chunk:<id>#<i>``) whose text, the chunk's search
  text, is lexically indexed, with the chunk's metadata and where its overlap lies.

A document is written in one batch with its chunks, the deletion of its surplus old chunks
and its vectors (embedded just before, in full batches across documents: see
`loomctx.knowledge._writer`), so it is stored whole or not at all and fully searchable,
lexically and densely, when `add_*` returns; `progress` callbacks see chunks and files as
they are done, with a rate and an estimate. Nothing lives only in memory:
a `KnowledgeBase` opened on the same store and namespace, in any process, sees the same
documents.

**A fast embedder first.** The default transformer embeds a few 400-token chunks a second on
two cores: an ingest of a hundred chunks would take a minute. So, as `LoomMemory` does, a
knowledge base with a `fast_embedder` (by default the shipped `StaticEmbedder` beside the
shipped multilingual-e5-small) writes each chunk with the fast embedder's vector, thousands a
second, and leaves the `embedder`'s vectors to a `BackgroundEmbedder` (`background`), which
embeds the chunks that lack them off the write path, batch by batch. Search fuses what
exists: a chunk is searched by the `embedder`'s vector once it has one, by its fast vector
until then (`loomctx.knowledge._fusion`); once every chunk has the `embedder`'s vector, search
is the same as if they had been embedded while writing. `unembedded` counts the chunks still
waiting, `background.drain()` embeds them now. The thread runs in the process that opened the
knowledge base: chunks a process left without vectors are embedded by the next one that opens
it with the same `embedder`.

Re-adding a document whose fingerprint is unchanged (and that has vectors of the current
embedder) does no work; a changed one replaces its chunks, and chunks whose text is the same
keep their vectors instead of being embedded again. Writes are serialised by a lock within a
process; run one writer per knowledge base at a time across processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final, Literal

from loomctx.embeddings import Embedder
from loomctx.errors import ConfigError, MissingExtraError, StoreError, check_int
from loomctx.knowledge._checks import (
    check_fast,
    check_id,
    check_metadata,
    check_path,
    check_relevance,
)
from loomctx.knowledge._chunking import check_chunk_sizes
from loomctx.knowledge._folder import (
    DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_FILES,
    DEFAULT_MAX_TOTAL_BYTES,
    find_files,
)
from loomctx.knowledge._loaders import Loader, check_unicode, load_file, loaders_with
from loomctx.knowledge._records import CHUNK, DOCUMENT, DocumentPlanner, digest, normalise
from loomctx.knowledge._search import ChunkSearch
from loomctx.knowledge._types import (
    IngestProgress,
    IngestStatus,
    IngestSummary,
    KnowledgeDocument,
    KnowledgeHit,
    SkipKind,
    SkippedFile,
)
from loomctx.knowledge._writer import Plan, Tally, Writer
from loomctx.memory.core import DEFAULT_EMBEDDER, EmbedderDefault
from loomctx.memory.enrichment import BackgroundEmbedder
from loomctx.stores.base import (
    Get,
    MemoryStore,
    Namespace,
    Record,
    Scan,
    check_namespace,
)
from loomctx.stores.sqlite import SQLiteStore
from loomctx.tokens import TiktokenCounter, TokenCounter

__all__ = ["CHUNK", "DOCUMENT", "KnowledgeBase"]

_MIN_POOL: Final = 20  # the fewest candidates asked of each of lexical and dense search
# Chunks per background batch: long texts embed as fast per text in batches of 8 as of 32
# (the engine packs texts without padding), and `close` waits for one batch at most.
_BATCH: Final = 8

Progress = Callable[[IngestProgress], object]


class KnowledgeBase:
    """A named body of documents, chunked and indexed for hybrid search; a
    `KnowledgeBaseProvider`.

    `store`: where everything lives (default: a private in-memory SQLite store, closed by
    `close`). `namespace`: where in it (default ``("knowledge", name)``); a tuple of exact
    parts, so that two owners' bases never meet, whatever their names contain.
    `embedder`: makes search hybrid, lexical and dense (None: lexical only).
    `counter` (default `TiktokenCounter()`), `chunk_tokens` and `overlap_tokens`: how
    documents are chunked (see `chunk_text`). `loaders`: readers for more file suffixes,
    ``{".rst": fn}`` with ``fn(path) -> str``. `min_relevance`: a floor under every search's
    own `min_relevance`. `fast_embedder`: writes each chunk's first vector, and the
    `embedder`'s follow in the background (the module docstring; default: the shipped
    `StaticEmbedder` when `embedder` is the shipped multilingual-e5-small, else None: the
    `embedder` embeds every chunk before `add_*` returns). `embed_in_background`: start the
    thread that embeds them (False: call `background.drain()` yourself).
    """

    def __init__(
        self,
        name: str,
        store: MemoryStore | None = None,
        *,
        namespace: Namespace | None = None,
        embedder: Embedder | None = None,
        counter: TokenCounter | None = None,
        chunk_tokens: int = 400,
        overlap_tokens: int = 60,
        loaders: Mapping[str, Loader] | None = None,
        min_relevance: float = 0.0,
        fast_embedder: Embedder | Literal[EmbedderDefault.EMBEDDER] | None = DEFAULT_EMBEDDER,
        embed_in_background: bool = True,
    ) -> None:
        if not isinstance(name, str) or not name.strip() or "/" in name:
            raise ConfigError(
                f"a knowledge base `name` is a non-empty string without '/', got {name!r}"
            )
        check_chunk_sizes(chunk_tokens, overlap_tokens)
        check_relevance(min_relevance)
        if store is not None and not isinstance(store, MemoryStore):
            raise ConfigError(
                f"`store` must be a `MemoryStore` (such as `SQLiteStore`), got {store!r}"
            )
        if embedder is not None and not isinstance(embedder, Embedder):
            raise ConfigError(
                f"`embedder` must be an `Embedder` (`name`, `dim`, `embed`) or None for "
                f"lexical search only, got {embedder!r}"
            )
        if counter is not None and not isinstance(counter, TokenCounter):
            raise ConfigError(f"`counter` must be a `TokenCounter`, got {counter!r}")
        fast = check_fast(embedder, fast_embedder)
        self.name = name
        if namespace is None:
            namespace = ("knowledge", name)
        try:
            self.namespace: Namespace = check_namespace(namespace)
        except StoreError as exc:
            raise ConfigError(f"`namespace` of knowledge base {name!r}: {exc}") from None
        self.embedder = embedder
        self.counter: TokenCounter = counter or TiktokenCounter()
        self.chunk_tokens = chunk_tokens
        self.overlap_tokens = overlap_tokens
        self.loaders = loaders_with(loaders)
        self.min_relevance = float(min_relevance)
        self._owns_store = store is None
        self.store: MemoryStore = SQLiteStore(":memory:") if store is None else store
        self._searcher = ChunkSearch(self.store)
        self._lock = threading.RLock()
        self.fast_embedder: Embedder | None = fast
        # The vectors written with the chunks: the fast embedder's, else the embedder's.
        self._writes: Embedder | None = fast or embedder
        self._planner = DocumentPlanner(
            store=self.store,
            namespace=self.namespace,
            counter=self.counter,
            chunk_tokens=chunk_tokens,
            overlap_tokens=overlap_tokens,
            model=None if self._writes is None else self._writes.name,
        )
        self.background: BackgroundEmbedder | None = None
        """Embeds the chunks that lack the `embedder`'s vectors (with a `fast_embedder`)."""
        if embedder is not None and fast is not None:
            self.background = BackgroundEmbedder(
                self.store, embedder, prefix=self.namespace, exact=True, batch_size=_BATCH
            )
            self.background.count_pending()
            if embed_in_background:
                self.background.start()
                # A knowledge base dropped without `close()` does not leave its thread running.
                weakref.finalize(self, self.background.stop, timeout=0)

    @property
    def unembedded(self) -> int:
        """Chunks without the `embedder`'s vector yet, as this process knows (searched by their
        fast vectors meanwhile); 0 when every chunk is embedded as it is written."""
        return self.background.pending if self.background is not None else 0

    # --- adding ---------------------------------------------------------------------------

    def add_text(
        self,
        text: str,
        *,
        document_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> str:
        """Store `text` as a document (default id: a hash of the text); returns its id."""
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(f"`text` must be a non-blank string, got {text!r:.60}")
        check_unicode(text, "`text`")
        text = normalise(text)
        doc_id = digest(text)[:16] if document_id is None else check_id(document_id)
        meta = check_metadata(metadata)
        with self._writing():
            self._store_one(
                self._planner.plan(doc_id, text, meta, old=self._document(doc_id)), None
            )
        return doc_id

    def add_file(
        self,
        path: str | Path,
        *,
        metadata: Mapping[str, Any] | None = None,
        document_id: str | None = None,
        progress: Progress | None = None,
    ) -> str:
        """Store a file, read by the loader of its suffix, as a document; its id is
        `document_id` or the path as given. Returns the id. `progress` receives an
        `IngestProgress` as its chunks are cut and embedded (a large file takes a while)."""
        file = check_path(path)
        if not file.is_file():
            raise ConfigError(
                f"`{file}` is not a file (missing, or a folder: use `add_folder`); check the path"
            )
        text = normalise(load_file(file, self.loaders))
        doc_id = file.as_posix() if document_id is None else check_id(document_id)
        meta = {"source": str(file), **check_metadata(metadata)}
        with self._writing():
            tally = Tally(progress, sizes=[len(text)], embedding=self.embedder is not None)
            tally.begin(doc_id, len(text))
            old = self._document(doc_id)
            plan = self._planner.plan(doc_id, text, meta, old=old, title=file.stem, tally=tally)
            self._store_one(plan, tally)
        return doc_id

    def add_folder(
        self,
        path: str | Path,
        *,
        pattern: str = "**/*",
        progress: Progress | None = None,
        delete_missing: bool = True,
        max_files: int = DEFAULT_MAX_FILES,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES,
    ) -> IngestSummary:
        """Store every file under `path` that matches `pattern` (hidden files and folders
        excepted), each under its path relative to the folder as its id.

        Files without a loader, unreadable, not UTF-8 or larger than `max_file_bytes`
        (10 MiB), and symbolic links that lead out of the folder (never followed), are
        skipped and listed in the summary with the reason. More than `max_files` (10,000)
        files to read, or more than `max_total_bytes` (512 MiB) in all, raise
        `IngestLimitError` before anything is written; see `loomctx.knowledge._folder`.
        `progress` receives an `IngestProgress` as chunks are done (cut, and embedded with
        an embedder) and once per file when it is stored or left out. With
        `delete_missing`, documents ingested from this folder before whose file no longer
        exists are deleted (a file that still exists but no longer matches is kept)."""
        folder = check_path(path)
        if not folder.is_dir():
            raise ConfigError(f"`{folder}` is not a folder; check the path, or use `add_file`")
        found_files = find_files(
            folder,
            pattern,
            self.loaders,
            max_files=max_files,
            max_file_bytes=max_file_bytes,
            max_total_bytes=max_total_bytes,
        )
        files = found_files.files
        origin = str(folder.resolve())
        skipped: list[SkippedFile] = list(found_files.skipped)
        tally = Tally(progress, sizes=found_files.sizes, embedding=self.embedder is not None)
        with self._writing():
            existing = {
                str(r.data["document_id"]): r
                for r in self.store.batch([Scan(prefix=self.namespace, kind=DOCUMENT)])[0]
            }
            writer = Writer(self.store, self.namespace, self._writes, tally)
            for (rel, file), size in zip(files, found_files.sizes, strict=True):
                tally.begin(rel, size)
                try:
                    text = normalise(load_file(file, self.loaders))
                except (ConfigError, MissingExtraError) as error:
                    kind: SkipKind = (
                        "no_loader"
                        if isinstance(error, MissingExtraError)
                        or file.suffix.lower() not in self.loaders
                        else "unreadable"
                    )
                    skipped.append(SkippedFile(path=rel, reason=str(error), kind=kind))
                    tally.cut_whole(0, "skipped")
                    writer.add(Plan("skipped", rel))
                    continue
                plan = self._planner.plan(
                    rel,
                    text,
                    {"source": str(file)},
                    old=existing.get(rel),
                    origin=origin,
                    title=file.stem,
                    tally=tally,
                )
                tally.cut_whole(plan.chunks, plan.status)
                writer.add(plan)
            written = writer.finish()
            self._notify(written)
            deleted = []
            if delete_missing:
                deleted = sorted(
                    doc_id
                    for doc_id, record in existing.items()
                    if record.data.get("folder") == origin and not (folder / doc_id).exists()
                )
                self.store.batch([op for d in deleted for op in self._planner.deletes(existing[d])])
        found: dict[IngestStatus, tuple[str, ...]] = {
            status: tuple(p.path for p in written if p.status == status)
            for status in ("added", "updated", "unchanged")
        }
        return IngestSummary(
            added=found["added"],
            updated=found["updated"],
            unchanged=found["unchanged"],
            skipped=tuple(sorted(skipped, key=lambda s: s.path)),
            deleted=tuple(deleted),
            chunks=sum(p.chunks for p in written),
        )

    # --- reading and deleting -------------------------------------------------------------

    def documents(self) -> list[KnowledgeDocument]:
        """Every stored document, by id."""
        records: list[Record] = self.store.batch(
            [Scan(prefix=self.namespace, kind=DOCUMENT, exact=True)]
        )[0]
        docs = [
            KnowledgeDocument(
                document_id=str(r.data["document_id"]),
                content_hash=str(r.data["content_hash"]),
                chunks=int(r.data["chunks"]),
                metadata=dict(r.data["metadata"]),
                updated_at=r.updated_at,
            )
            for r in records
        ]
        return sorted(docs, key=lambda d: d.document_id)

    def delete(self, document_id: str) -> bool:
        """Remove a document and its chunks; whether it existed."""
        with self._lock:
            record = self._document(check_id(document_id))
            if record is None:
                return False
            self.store.batch(self._planner.deletes(record))
            return True

    # --- search ---------------------------------------------------------------------------

    async def search(
        self, query: str, *, limit: int = 20, min_relevance: float = 0.0
    ) -> list[KnowledgeHit]:
        """`search_sync` in a worker thread (it reads the store and may embed the query)."""
        return await asyncio.to_thread(
            self.search_sync, query, limit=limit, min_relevance=min_relevance
        )

    def search_sync(
        self, query: str, *, limit: int = 20, min_relevance: float = 0.0
    ) -> list[KnowledgeHit]:
        """Up to `limit` chunks for `query`, best first, scored as `loomctx.knowledge._fusion`
        describes, with ``score >= max(min_relevance, self.min_relevance)`` and above 0;
        ``[]`` for a blank query."""
        if not isinstance(query, str):
            raise ConfigError(f"`query` must be a string, got {type(query).__name__}")
        check_int(limit, "`limit`", minimum=0)
        check_relevance(min_relevance)
        if limit == 0 or not query.strip():
            return []
        return self._searcher.search(
            query,
            namespace=self.namespace,  # exactly: nothing stored below it is one of its chunks
            kind=CHUNK,
            pool=max(limit, _MIN_POOL),
            limit=limit,
            floor=max(float(min_relevance), self.min_relevance),
            embedder=self.embedder,
            fast=self.fast_embedder if self.unembedded else None,
            name=self.name,
        )

    # --- internals --------------------------------------------------------------------------

    def _document(self, document_id: str) -> Record | None:
        found: Record | None = self.store.batch(
            [Get(namespace=self.namespace, key=f"doc:{document_id}")]
        )[0]
        return found

    def _store_one(self, plan: Plan, tally: Tally | None) -> None:
        """Embed and write one document's plan."""
        if tally is None:
            tally = Tally(None, sizes=[], embedding=self.embedder is not None)
        else:
            tally.cut_whole(plan.chunks, plan.status)
        writer = Writer(self.store, self.namespace, self._writes, tally)
        writer.add(plan)
        self._notify(writer.finish())

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """The write lock, with the background embedder out of the way (it waits meanwhile)."""
        background = self.background
        with self._lock, contextlib.nullcontext() if background is None else background.writing():
            yield

    def _notify(self, written: list[Plan]) -> None:
        """Tell the background embedder how many chunks now wait for its vectors."""
        if self.background is not None:
            self.background.notify(sum(len(p.embed) for p in written))

    def close(self) -> None:
        """Stop the background embedding, and close the store if this knowledge base created
        it."""
        if self.background is not None:
            self.background.stop()
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        embedder = self.embedder.name if self.embedder is not None else None
        return (
            f"KnowledgeBase({self.name!r}, embedder={embedder!r}, "
            f"chunk_tokens={self.chunk_tokens}, overlap_tokens={self.overlap_tokens})"
        )

"""The values of the knowledge layer, and `KnowledgeBaseProvider`, what retrieval searches."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

__all__ = [
    "IngestProgress",
    "IngestStatus",
    "IngestSummary",
    "KnowledgeBaseProvider",
    "KnowledgeDocument",
    "KnowledgeHit",
    "SkippedFile",
]

IngestStatus: TypeAlias = Literal["added", "updated", "unchanged", "skipped"]
"""What an ingest did with one file or text."""


@dataclass(frozen=True, slots=True)
class KnowledgeHit:
    """A chunk found by a knowledge base search.

    `score` is the fused relevance in 0..1 (what `min_relevance` compares against);
    `vector_score` the cosine similarity of query and chunk, None when dense search did not
    find the chunk (or there is no embedder); `lexical_score` its BM25 over the best BM25 of
    the search, 0 when lexical search did not find it, None when it was not among the
    lexical candidates. `text` is the chunk with its heading line, without the overlap it
    repeats from the chunk before it. `metadata`: ``source`` (a file's path), ``title``,
    ``headings`` (``"A > B"``) and the metadata the document was added with.
    """

    chunk_id: str
    document_id: str
    text: str
    score: float
    vector_score: float | None
    lexical_score: float | None
    metadata: Mapping[str, Any] = field(hash=False)
    knowledge_base: str


@runtime_checkable
class KnowledgeBaseProvider(Protocol):
    """A searchable body of knowledge: what `UnifiedRetrievalSource` recalls from.

    `search` returns at most `limit` hits with ``score >= min_relevance``, best first, and
    ``[]`` for a blank query."""

    name: str

    async def search(
        self, query: str, *, limit: int = 20, min_relevance: float = 0.0
    ) -> list[KnowledgeHit]:
        """The chunks most relevant to `query`, best first."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class KnowledgeDocument:
    """A stored document: its id, a hash of its text, how many chunks it has, its metadata
    and when it was last written (seconds since the epoch)."""

    document_id: str
    content_hash: str
    chunks: int
    metadata: Mapping[str, Any] = field(hash=False)
    updated_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestProgress:
    """Sent to a folder ingest's `progress` callback once per file, when it is stored:
    `done` of `total` files handled so far, the file's `path` (relative to the folder, its
    document id) and what was done with it."""

    done: int
    total: int
    path: str
    status: IngestStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class SkippedFile:
    """A file a folder ingest left out, and why: no loader for it, unreadable, not UTF-8,
    its loader failed, larger than `max_file_bytes`, a name that is not UTF-8, or a symbolic
    link out of the folder (never followed; a folder link's `path` ends with ``/``)."""

    path: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestSummary:
    """What a folder ingest did, by document id: `added`, `updated` (content, metadata or
    chunking changed, or vectors of the current embedder were missing), `unchanged` (no
    work done), `skipped` files, `deleted` (documents ingested from this folder before
    whose file is gone), and `chunks`, how many chunks were written."""

    added: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    skipped: tuple[SkippedFile, ...] = ()
    deleted: tuple[str, ...] = ()
    chunks: int = 0

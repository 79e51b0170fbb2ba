"""The values of the knowledge layer, and `KnowledgeBaseProvider`, what retrieval searches."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

__all__ = [
    "IngestProgress",
    "IngestProgressKind",
    "IngestStatus",
    "IngestSummary",
    "KnowledgeBaseProvider",
    "KnowledgeDocument",
    "KnowledgeHit",
    "SkipKind",
    "SkippedFile",
]

IngestStatus: TypeAlias = Literal["added", "updated", "unchanged", "skipped"]
"""What an ingest did with one file or text."""

IngestProgressKind: TypeAlias = Literal["chunks", "file"]
"""Why an `IngestProgress` was sent: more chunks are done, or a file is."""

SkipKind: TypeAlias = Literal["no_loader", "too_large", "link", "bad_name", "unreadable"]
"""Why a file was left out: no loader for its suffix, over `max_file_bytes`, a symbolic link
out of the folder, a name that is not UTF-8, or it could not be read or converted."""


@dataclass(frozen=True, slots=True, kw_only=True)
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


# The slots' own setters, which a frozen value's fields can be set through once, as it is made.
_SET_CHUNK_ID, _SET_DOCUMENT_ID, _SET_TEXT, _SET_SCORE, _SET_VECTOR, _SET_LEXICAL = (
    KnowledgeHit.__dict__[name].__set__
    for name in ("chunk_id", "document_id", "text", "score", "vector_score", "lexical_score")
)
_SET_METADATA, _SET_BASE = (
    KnowledgeHit.__dict__[name].__set__ for name in ("metadata", "knowledge_base")
)


def new_knowledge_hit(
    chunk_id: str,
    document_id: str,
    text: str,
    score: float,
    vector_score: float | None,
    lexical_score: float | None,
    metadata: Mapping[str, Any],
    knowledge_base: str,
) -> KnowledgeHit:
    """The value ``KnowledgeHit(chunk_id=chunk_id, ...)`` makes, at a third of the cost (as
    `loomctx.retrieval.evidence.new_evidence` makes its value): a search makes one per hit,
    dozens on every build."""
    made = object.__new__(KnowledgeHit)
    _SET_CHUNK_ID(made, chunk_id)
    _SET_DOCUMENT_ID(made, document_id)
    _SET_TEXT(made, text)
    _SET_SCORE(made, score)
    _SET_VECTOR(made, vector_score)
    _SET_LEXICAL(made, lexical_score)
    _SET_METADATA(made, metadata)
    _SET_BASE(made, knowledge_base)
    return made


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
    """Sent to an ingest's `progress` callback as it goes: when more chunks are done
    (`kind` ``"chunks"``: each batch the embedder embeds, or every few dozen chunks cut
    when there is no embedder) and when a file has been stored or left out (``"file"``).

    `done` of `total` files are handled; `path` is the file last handled or being worked
    on (relative to the folder: its document id) and `status` what is done with it.
    `chunks` is how many chunks are done (cut, and embedded when the base has an embedder)
    and `chunks_total` how many there are: exact once every file is cut, before that the
    chunks cut so far plus an estimate for the rest from its size. `elapsed` is the seconds
    since the ingest started; `rate` and `eta` follow from them.
    """

    done: int
    total: int
    path: str
    status: IngestStatus
    kind: IngestProgressKind = "file"
    chunks: int = 0
    chunks_total: int = 0
    elapsed: float = 0.0

    @property
    def rate(self) -> float:
        """Chunks done per second so far (0 before the first)."""
        return self.chunks / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def eta(self) -> float | None:
        """Seconds left at the rate so far; None before a rate is known."""
        if self.rate <= 0:
            return None
        return max(0.0, self.chunks_total - self.chunks) / self.rate


@dataclass(frozen=True, slots=True, kw_only=True)
class SkippedFile:
    """A file a folder ingest left out, and why: no loader for it, unreadable, not UTF-8,
    its loader failed, larger than `max_file_bytes`, a name that is not UTF-8, or a symbolic
    link out of the folder (never followed; a folder link's `path` ends with ``/``).
    `kind` says which, for grouping; `reason` says it in words, with the fix."""

    path: str
    reason: str
    kind: SkipKind = "unreadable"


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

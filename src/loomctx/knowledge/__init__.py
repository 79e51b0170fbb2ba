"""Knowledge bases: documents -> chunks -> lexical and dense indexes, searched before every call.

- `KnowledgeBase` (exported from `loomctx` itself): add texts, files and folders (text,
  Markdown, reStructuredText and code built in; PDF, Word and HTML with the `loaders` extra;
  any other format through `loaders`), incrementally, with progress (`IngestProgress`);
  hybrid search (BM25 and vectors, fused into a 0..1 score); everything persisted in a
  `MemoryStore`.
- `KnowledgeBaseProvider`: the protocol `UnifiedRetrievalSource` searches, and `KnowledgeHit`,
  what a search returns.
- `chunk_text`: the Markdown-aware chunker (headings, paragraphs, sentences, token limit,
  overlap), on its own.
- `DEFAULT_MAX_FILES`, `DEFAULT_MAX_FILE_BYTES`, `DEFAULT_MAX_TOTAL_BYTES`: the bounds of a
  folder ingest unless `add_folder` is given others.
"""

from loomctx.knowledge._base import KnowledgeBase as KnowledgeBase  # exported from `loomctx`
from loomctx.knowledge._chunking import Chunk, chunk_text
from loomctx.knowledge._folder import (
    DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_FILES,
    DEFAULT_MAX_TOTAL_BYTES,
)
from loomctx.knowledge._loaders import Loader, read_text
from loomctx.knowledge._types import (
    IngestProgress,
    IngestProgressKind,
    IngestStatus,
    IngestSummary,
    KnowledgeBaseProvider,
    KnowledgeDocument,
    KnowledgeHit,
    SkipKind,
    SkippedFile,
)

__all__ = [
    "DEFAULT_MAX_FILES",
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_TOTAL_BYTES",
    "Chunk",
    "IngestProgress",
    "IngestProgressKind",
    "IngestStatus",
    "IngestSummary",
    "KnowledgeBaseProvider",
    "KnowledgeDocument",
    "KnowledgeHit",
    "Loader",
    "SkipKind",
    "SkippedFile",
    "chunk_text",
    "read_text",
]

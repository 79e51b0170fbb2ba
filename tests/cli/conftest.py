"""Fixtures for the CLI's tests: a runner in a clean folder and a clean environment.

Every test runs in its own temporary folder (so `./loom.toml` and `.loom/` are its own),
with no `LOOM_*` or provider variables from the developer's shell, a 100-column console, and
real model requests refused unless a test allows them for its local wire server.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loomctx.agent.llm import allow_model_requests


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith(("LOOM_", "OPENAI_", "ANTHROPIC_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    with allow_model_requests(False):
        yield


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def lexical(monkeypatch: pytest.MonkeyPatch) -> None:
    """No embedder: lexical search only, for the tests that do not exercise vectors."""
    monkeypatch.setenv("LOOM_EMBEDDER", "none")

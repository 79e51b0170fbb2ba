"""The CLI on a PostgreSQL store: `loomctx demo --store postgresql://...`, resumed by `chat`
and read by `inspect`, as with a SQLite file (tests/cli/test_demo.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loomctx.agent.llm import allow_model_requests
from loomctx.cli import app


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    """As tests/cli/conftest.py's: a clean folder and environment, no model requests."""
    for name in list(os.environ):
        if name.startswith(("LOOM_", "OPENAI_", "ANTHROPIC_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    with allow_model_requests(False):
        yield CliRunner()


def test_the_demo_runs_on_postgres_and_chat_resumes_it(
    runner: CliRunner, postgres_url: str
) -> None:
    first = runner.invoke(app, ["demo", "--lexical", "--store", postgres_url])
    assert first.exit_code == 0, first.output
    assert "knowledge: 4 documents, 12 chunks written" in first.stdout
    assert "PostgreSQL 16" in first.stdout  # the first question's answer
    hint = " ".join(first.stdout.split())  # where to go on: this store, not a new file
    assert "Keep this store" not in hint
    assert "`loomctx inspect --web --store 'postgresql://" in hint
    second = runner.invoke(app, ["demo", "--lexical", "--store", postgres_url])
    assert second.exit_code == 0, second.output
    assert "the conversation was ingested into this store before: reusing it" in second.stdout
    chat = runner.invoke(
        app, ["chat", "--session", "demo"], input="/exit\n", env={"LOOM_STORE": postgres_url}
    )
    assert chat.exit_code == 0, chat.output
    assert "session   demo (resumed)" in chat.stdout
    # `inspect` opens the URL too: the second demo's last window is turn 10 of the session.
    window = runner.invoke(app, ["inspect", "--session", "demo", "--store", postgres_url])
    assert window.exit_code == 0, window.output
    assert "session demo  turn 10  call 1" in window.stdout


def test_an_unknown_store_scheme_is_reported(runner: CliRunner) -> None:
    result = runner.invoke(app, ["demo", "--lexical", "--store", "mysql://h/db"])
    assert result.exit_code != 0
    assert "unknown store scheme" in result.output

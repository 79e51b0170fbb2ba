"""`loomctx replay LOGS`: the table of what Loom would save on a recorded log, the lines it
could not read, ``--json``, ``--plot``, and exit code 2 for a log with nothing to replay."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loomctx.cli import app
from loomctx.evaluation.replay import replay_log
from tests.evaluation.replay_data import BAD_LINES, WINDOW, write_log

TURNS = 20


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return write_log(tmp_path / "log.jsonl", turns=TURNS)


def test_replay_prints_each_call_and_the_totals(runner: CliRunner, log: Path) -> None:
    result = runner.invoke(app, ["replay", str(log), "--window", str(WINDOW)])
    assert result.exit_code == 0, result.output
    expected = replay_log(log, window=WINDOW)["total"]
    out = result.stdout
    assert "Per call" in out
    assert f"In total: {TURNS} calls, 1 conversation(s)" in out
    client, loom = expected["client"], expected["loom"]
    sent_row = next(line for line in out.splitlines() if line.strip().startswith("as sent"))
    loom_row = next(line for line in out.splitlines() if line.strip().startswith("through Loom"))
    assert sent_row.split()[2:] == [
        str(client["sent"]),
        str(client["cached"]),
        str(round(client["billed_anthropic"])),
        str(round(client["billed_openai"])),
        str(client["over_window"]),
    ]
    assert loom_row.split()[2:4] == [str(loom["sent"]), str(loom["cached"])]
    assert client["over_window"] > 0
    assert loom_row.split()[-1] == "0"
    for number in BAD_LINES:
        assert f"line {number} skipped:" in result.stderr
    labels = [line.split()[0] for line in out.splitlines() if line.strip()[:2] == "1:"]
    assert labels[:4] == ["1:1", "1:2", "1:3", "1:5"]  # conversation:line; line 4 is bad
    assert len(labels) == TURNS


def test_replay_json_is_the_numbers(runner: CliRunner, log: Path) -> None:
    result = runner.invoke(app, ["replay", str(log), "--window", str(WINDOW), "--json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed == replay_log(log, window=WINDOW)
    assert len(printed["calls"]) == TURNS
    assert [s["line"] for s in printed["skipped"]] == sorted(BAD_LINES)


def test_replay_plot_is_a_png(runner: CliRunner, log: Path, tmp_path: Path) -> None:
    plot = tmp_path / "saved.png"
    result = runner.invoke(app, ["replay", str(log), "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    assert plot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert f"plot written to {plot}" in result.stderr


def test_a_log_with_nothing_to_replay_exits_2_naming_its_lines(
    runner: CliRunner, tmp_path: Path
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "hi"}\n[1]\n')
    result = runner.invoke(app, ["replay", str(path)])
    assert result.exit_code == 2
    assert "no chat request in" in result.stderr
    assert "line 1: no `messages` list" in result.stderr
    assert "line 2: expected a JSON object" in result.stderr


def test_a_plot_without_matplotlib_names_the_extra(
    runner: CliRunner, log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("matplotlib", "matplotlib.pyplot"):
        monkeypatch.setitem(sys.modules, name, None)  # as if it were not installed
    result = runner.invoke(app, ["replay", str(log), "--plot", str(tmp_path / "p.png")])
    assert result.exit_code == 1
    assert "pip install 'loomctx[bench]'" in result.stderr
    assert not (tmp_path / "p.png").exists()


def test_a_call_loom_cannot_build_a_window_for_counts_as_sent_and_says_why(
    runner: CliRunner, tmp_path: Path
) -> None:
    tool = {"type": "function", "function": {"name": "look", "description": "word " * 400}}
    request = {"model": "gpt-4o", "tools": [tool], "messages": [{"role": "user", "content": "hi"}]}
    path = tmp_path / "tools.jsonl"
    path.write_text(json.dumps(request) + "\n")
    result = runner.invoke(app, ["replay", str(path), "--window", "256", "--json"])
    assert result.exit_code == 0, result.output
    (call,) = json.loads(result.stdout)["calls"]
    assert call["loom"] == call["client"]
    assert call["client"]["over_window"] is True
    assert "line 1: sent as is: the client's 1 tools do not all fit the window" in result.stderr

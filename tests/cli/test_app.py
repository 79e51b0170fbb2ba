"""The command's surface: --help everywhere, --version, and exit codes scripts rely on."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import pytest
from typer.testing import CliRunner

from loomctx.cli import app, main

COMMANDS = [
    [],
    ["demo"],
    ["chat"],
    ["ingest"],
    ["inspect"],
    ["config"],
    ["bench"],
    ["bench", "locomo"],
    ["bench", "longmemeval"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "loomctx")
def test_every_command_has_help(runner: CliRunner, command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"], prog_name="loomctx")
    assert result.exit_code == 0, result.output
    assert "Usage: loomctx" in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 100


def test_no_arguments_shows_the_commands(runner: CliRunner) -> None:
    result = runner.invoke(app, [])
    assert result.exit_code == 2
    for name in ("demo", "chat", "ingest", "inspect", "bench", "config"):
        assert name in result.output


def test_version(runner: CliRunner) -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"loomctx {version('loomctx')}"


def test_a_usage_error_exits_2(runner: CliRunner) -> None:
    result = runner.invoke(app, ["chat", "--no-such-flag"])
    assert result.exit_code == 2
    assert "No such option" in result.output
    assert runner.invoke(app, ["nonsense"]).exit_code == 2


def test_a_loom_error_exits_1_with_its_message_and_no_traceback(runner: CliRunner) -> None:
    result = runner.invoke(app, ["chat", "--window", "10"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: `--window` must be an integer >= 256, got 10")
    assert "Traceback" not in result.output
    assert result.stdout == ""


def test_main_is_the_console_script(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", ["loomctx", "--version"])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip().startswith("loomctx ")


def test_python_dash_m_runs_the_command() -> None:
    """``python -m loomctx`` for an environment without the script on PATH."""
    done = subprocess.run(
        [sys.executable, "-m", "loomctx", "--version"], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, f"loomctx {version('loomctx')}")

"""`loomctx chat` through the runner: memory that persists, tools, knowledge, /context, a real
provider over the wire (a local scripted server), and the offline responder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from loomctx.agent.llm import allow_model_requests
from loomctx.cli import app
from loomctx.cli._chat import _Printer
from loomctx.cli._offline import LABEL
from loomctx.cli._tools import load_tools
from loomctx.context.report import ContextReport
from loomctx.errors import ConfigError, ToolError
from tests.agent._servers import (
    WireServer,
    openai_chunk,
    openai_error,
    openai_sse,
    openai_text,
    openai_tool_delta,
)

TOOLS = '''
from loomctx import tool


@tool
def lookup_port(host: str) -> str:
    """The port a host listens on.

    Args:
        host: The host's short name.
    """
    return {"staging": "8443"}.get(host, "unknown")


@tool
def explode() -> str:
    """A tool that always fails."""
    raise RuntimeError("the fuse blew")


def helper() -> str:
    return "not a tool"
'''


def _chat(runner: CliRunner, lines: list[str], *args: str) -> str:
    result = runner.invoke(app, ["chat", *args], input="".join(f"{x}\n" for x in lines))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_a_session_remembers_across_runs(runner: CliRunner, lexical: None) -> None:
    first = _chat(
        runner,
        ["My favourite editor is Helix and I use it every day.", "/context", "/exit"],
        "--session",
        "s1",
    )
    assert "session   s1 (new; resume with --session s1)" in first
    assert "offline responder" in first
    assert f"loom> {LABEL}" in first
    assert "  input " in first
    second = _chat(runner, ["Which editor do I use?"], "--session", "s1")
    assert "session   s1 (resumed)" in second
    assert "Helix" in second.split("loom>")[-1]


def test_context_before_any_turn_and_the_other_commands(runner: CliRunner, lexical: None) -> None:
    out = _chat(runner, ["/context", "", "/help", "/bogus", "/quit", "never read"])
    assert "no window yet: say something first" in out
    assert "/context --json" in out
    assert "unknown command '/bogus'; /help lists them" in out
    assert "never read" not in out
    assert "session   chat-" in out


def test_context_json_is_the_last_window(runner: CliRunner, tmp_path: Path, lexical: None) -> None:
    out = _chat(runner, ["hello there", "/context --json"], "--session", "j", "--window", "4000")
    report = ContextReport.from_dict(json.loads(out[out.index("{") : out.rindex("}") + 1]))
    assert report.window == 4000
    assert report.token_count <= report.available
    saved = runner.invoke(app, ["inspect", "--session", "j", "--json"])
    assert ContextReport.from_dict(json.loads(saved.stdout)) == report


def test_events_are_logged_and_inspectable(
    runner: CliRunner, tmp_path: Path, lexical: None
) -> None:
    _chat(runner, ["first question", "second question"], "--events", "run.jsonl")
    events = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds.count("run_started") == 2
    assert kinds.count("context_assembled") == 2
    shown = runner.invoke(app, ["inspect", "run.jsonl"])
    assert shown.exit_code == 0, shown.output
    assert "  input " in shown.stdout


def test_knowledge_folder_is_ingested_and_searched(
    runner: CliRunner, tmp_path: Path, lexical: None
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "policy.md").write_text(
        "# Returns\n\nDamaged books are refunded without a return after one photo.\n"
    )
    out = _chat(runner, ["How are damaged books refunded?"], "--knowledge", "docs")
    assert "knowledge default (1 documents)" in out
    assert "RAG_knowledge" in out or "refunded without a return" in out
    reply = " ".join(out.split("loom>")[-1].split())
    assert "refunded without a return after one photo" in reply
    again = _chat(runner, ["/exit"])
    assert "knowledge default (1 documents)" in again


def test_a_knowledge_path_that_is_not_a_folder(runner: CliRunner, lexical: None) -> None:
    result = runner.invoke(app, ["chat", "--knowledge", "nowhere"], input="")
    assert result.exit_code == 1
    assert "the knowledge folder 'nowhere' is not a folder" in result.stderr


def test_tools_from_a_file_with_a_real_provider_over_the_wire(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lexical: None
) -> None:
    (tmp_path / "my_tools.py").write_text(TOOLS)
    server = WireServer().start()
    try:
        server.script(
            openai_sse(
                [
                    openai_chunk({"role": "assistant", "content": "Checking."}),
                    openai_chunk(openai_tool_delta(0, id="c1", name="lookup_port")),
                    openai_chunk(openai_tool_delta(0, arguments='{"host": "staging"}')),
                    openai_chunk(openai_tool_delta(1, id="c2", name="explode", arguments="{}")),
                    openai_chunk({}, finish_reason="tool_calls"),
                ]
            ),
            openai_text("Staging listens on ", "port 8443."),
        )
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        with allow_model_requests():
            out = _chat(
                runner,
                ["Which port does staging use?", "/context"],
                "--tools",
                "my_tools.py",
                "--model",
                "gpt-test",
            )
    finally:
        server.stop()
    assert "tools     lookup_port, explode" in out
    assert "loom> Checking.\n  → lookup_port" in out
    assert "model     openai:gpt-test" in out or "gpt-test" in out
    assert '→ lookup_port({"host":"staging"})' in out
    assert "← 8443" in out
    assert "✗ " in out
    assert "the fuse blew" in out
    assert "loom> Staging listens on port 8443." in out
    assert "turn" in out
    sent = server.requests[0].body
    # The agent's reader of results shown only in part comes with any tools, last.
    assert [t["function"]["name"] for t in sent["tools"]] == [
        "lookup_port",
        "explode",
        "read_result",
    ]
    assert server.remaining == 0


def test_a_failed_turn_is_reported_and_the_chat_goes_on(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, lexical: None
) -> None:
    server = WireServer().start()
    try:
        server.script(openai_error(400, "context too long"), openai_text("Fine now."))
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        with allow_model_requests():
            out = _chat(runner, ["first", "second"], "--model", "gpt-test")
    finally:
        server.stop()
    assert "error: " in out
    assert "context too long" in out
    assert "loom> Fine now." in out


def test_loading_tools(tmp_path: Path) -> None:
    (tmp_path / "listed.py").write_text(
        "def ping(host: str) -> str:\n    '''Ping a host.'''\n    return 'pong'\n\nTOOLS = [ping]\n"
    )
    assert [t.name for t in load_tools(str(tmp_path / "listed.py"))] == ["ping"]
    assert [t.name for t in load_tools("tests.cli.tools_module")] == ["shout"]
    (tmp_path / "none.py").write_text("def helper() -> None: ...\n")
    with pytest.raises(ConfigError, match="defines no tools: decorate functions with"):
        load_tools(str(tmp_path / "none.py"))
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ConfigError, match="failed to load: RuntimeError"):
        load_tools(str(tmp_path / "broken.py"))
    (tmp_path / "wrong.py").write_text("TOOLS = 'ping'\n")
    with pytest.raises(ConfigError, match=r"`TOOLS` in .* must be a list"):
        load_tools(str(tmp_path / "wrong.py"))
    (tmp_path / "untyped.py").write_text("def f(x):\n    return x\n\nTOOLS = [f]\n")
    with pytest.raises(ToolError):
        load_tools(str(tmp_path / "untyped.py"))
    with pytest.raises(ConfigError, match=r"tools file 'gone\.py' does not exist"):
        load_tools("gone.py")
    with pytest.raises(ConfigError, match=r"cannot import tools module 'no_such_module_x'"):
        load_tools("no_such_module_x")


def test_a_bad_model_setting_is_a_clear_error(runner: CliRunner, lexical: None) -> None:
    result = runner.invoke(app, ["chat", "--model", "gpt-4o"], input="")
    assert result.exit_code == 1
    assert "`OPENAI_API_KEY` is not set" in result.stderr


def test_offline_flag_wins_over_a_model(runner: CliRunner, lexical: None) -> None:
    out = _chat(runner, ["/exit"], "--model", "openai/gpt-4o", "--offline")
    assert "offline responder (--offline)" in out


def test_streamed_text_wraps_at_word_boundaries() -> None:
    console = Console(width=24, record=True, color_system=None)
    printer = _Printer(console)
    for piece in ["The staging proxy list", "ens on port 8443 ", "today.\nNext line", " here"]:
        printer.text(piece)
    printer.end()
    printer.end()
    lines = console.export_text().splitlines()
    assert lines == [
        "loom> The staging proxy",
        "listens on port 8443",
        "today.",
        "Next line here",
    ]

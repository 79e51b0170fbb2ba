"""`loomctx inspect --session/--list`: every model call's window is saved with the exact
messages sent; a session's windows are listed and shown by turn and call, as a report or as
the text; report words are one term and numbers are explained."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from loomctx.agent.llm import allow_model_requests
from loomctx.cli import app
from loomctx.cli._render import report_view
from loomctx.cli._reports import (
    list_knowledge_bases,
    list_sessions,
    load_window,
    next_turn,
    report_from_payload,
)
from loomctx.cli._workspace import open_knowledge, save_report
from loomctx.context.orchestrator import ContextOrchestrator
from loomctx.context.report import ContextReport, SourceReport
from loomctx.context.sources import HistorySource, PromptSource, UserInputSource
from loomctx.errors import ConfigError
from loomctx.messages import Message
from loomctx.stores import open_store
from loomctx.tokens import TiktokenCounter
from tests.agent._servers import (
    WireServer,
    openai_chunk,
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
'''


def _chat_with_a_tool(runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list:
    (tmp_path / "my_tools.py").write_text(TOOLS)
    server = WireServer().start()
    try:
        server.script(
            openai_text("Hello! Ask me about ports."),
            openai_sse(
                [
                    openai_chunk(openai_tool_delta(0, id="c1", name="lookup_port")),
                    openai_chunk(openai_tool_delta(0, arguments='{"host": "staging"}')),
                    openai_chunk({}, finish_reason="tool_calls"),
                ]
            ),
            openai_text("Staging listens on port 8443."),
        )
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("LOOM_EMBEDDER", "none")
        with allow_model_requests():
            result = runner.invoke(
                app,
                ["chat", "--session", "s7", "--store", "s.db", "--tools", "my_tools.py",
                 "--model", "gpt-test"],
                input="Hi there\nWhich port does staging use?\n",
            )  # fmt: skip
        assert result.exit_code == 0, result.output
    finally:
        server.stop()
    return [r.body for r in server.requests]


def test_every_call_is_saved_with_the_exact_messages_sent(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = _chat_with_a_tool(runner, tmp_path, monkeypatch)
    assert len(sent) == 3  # turn 1: one call; turn 2: the tool call, then the answer

    listed = runner.invoke(app, ["inspect", "--list", "--store", "s.db", "--json"])
    assert listed.exit_code == 0, listed.output
    sessions = json.loads(listed.output)["sessions"]
    assert [(s["session"], s["turns"], s["windows"]) for s in sessions] == [("s7", 2, 3)]

    for (turn, call), body in zip([(1, 1), (2, 1), (2, 2)], sent, strict=True):
        shown = runner.invoke(
            app,
            ["inspect", "--session", "s7", "--store", "s.db", "--turn", str(turn),
             "--call", str(call), "--text", "--json"],
        )  # fmt: skip
        assert shown.exit_code == 0, shown.output
        window = json.loads(shown.output)
        assert (window["turn"], window["call"]) == (turn, call)
        # What the provider received is what inspect shows, message for message.
        assert window["messages"] == body["messages"]
        assert [t["function"]["name"] for t in window["tools"]] == [
            t["function"]["name"] for t in body["tools"]
        ]

    # The second call of turn 2 holds the tool exchange: the `turn` source is not 0/0 there.
    store = open_store(tmp_path / "s.db")
    try:
        second = load_window(store, "s7", turn=2, call=2)
        assert second is not None
        turn_source = {s.name: s for s in second.report.sources}["turn"]
        assert turn_source.blocks_offered == 1
        assert turn_source.used > 0
        assert next_turn(store, "s7") == 3
    finally:
        store.close()

    text = runner.invoke(app, ["inspect", "--session", "s7", "--store", "s.db", "--text"])
    assert text.exit_code == 0, text.output
    assert "Staging" not in text.output.split("tool result")[0] or "lookup_port" in text.output
    assert "tool result (lookup_port)" in text.output
    assert "8443" in text.output
    assert "Which port does staging use?" in text.output

    last = runner.invoke(app, ["inspect", "--session", "s7", "--store", "s.db"])
    assert last.exit_code == 0, last.output
    assert "turn 2  call 2" in last.output

    gone = runner.invoke(app, ["inspect", "--session", "s7", "--store", "s.db", "--turn", "9"])
    assert gone.exit_code == 1
    assert "saved windows (turn.call): 1.1, 2.1, 2.2" in gone.output

    # A window whose stored messages were removed by hand says so.
    store = open_store(tmp_path / "s.db")
    try:
        key = next(
            r.key
            for r in store.scan(("cli", "windows", "s7"), kind="window_message")
            if r.key.startswith("message:")
        )
        store.delete(("cli", "windows", "s7"), key)
        with pytest.raises(ConfigError, match="stored message"):  # noqa: PT012
            for turn, call in [(1, 1), (2, 1), (2, 2)]:
                load_window(store, "s7", turn=turn, call=call)
    finally:
        store.close()


def test_list_shows_knowledge_bases_and_sessions_of_earlier_versions(
    runner: CliRunner, tmp_path: Path
) -> None:
    store = open_store(tmp_path / "s.db")
    try:
        kb = open_knowledge(store, "handbook", None)
        kb.add_text("Deploys happen on Tuesdays.", document_id="deploys.md")
        report = asyncio.run(
            ContextOrchestrator(sources=[UserInputSource()], model_context_window=500).build("hi")
        ).report
        save_report(store, "old", 1, report.to_dict())  # as an earlier version saved it
        assert next_turn(store, "old") == 2
        assert [s["session"] for s in list_sessions(store)] == ["old"]
    finally:
        store.close()
    shown = runner.invoke(app, ["inspect", "--list", "--store", "s.db"])
    assert shown.exit_code == 0, shown.output
    assert "handbook" in shown.output
    assert "old" in shown.output
    call2 = runner.invoke(app, ["inspect", "--session", "old", "--store", "s.db", "--call", "2"])
    assert call2.exit_code == 1
    text = runner.invoke(app, ["inspect", "--session", "old", "--store", "s.db", "--text"])
    assert "saved without its messages" in text.output
    assert runner.invoke(app, ["inspect", "--list", "--session", "x"]).exit_code == 2
    (tmp_path / "r.json").write_text(json.dumps(report.to_dict()))
    assert runner.invoke(app, ["inspect", "r.json", "--text"]).exit_code == 2
    empty = runner.invoke(app, ["inspect", "--list", "--store", "none.db"])
    assert empty.exit_code == 1


def test_list_names_a_served_tenants_knowledge_base_by_tenant(tmp_path: Path) -> None:
    from loomctx.knowledge import KnowledgeBase

    store = open_store(tmp_path / "s.db")
    try:
        KnowledgeBase("handbook", store).add_text("Shared.")
        served = KnowledgeBase("handbook", store, namespace=("acme", "knowledge", "handbook"))
        served.add_text("ACME only.")
        served.add_text("ACME again.")
        assert list_knowledge_bases(store) == [
            {"name": "acme/handbook", "documents": 2},
            {"name": "handbook", "documents": 1},
        ]
    finally:
        store.close()


def _compacted_report() -> ContextReport:
    """History compacted in one build, then more history: the next build holds the frozen
    summary, which its source did not offer again."""
    history = [
        m
        for i in range(80)
        for m in (
            Message.user(f"Question {i}: where is parcel {1000 + i} now?"),
            Message.assistant(f"Parcel {1000 + i} left the depot on day {i % 28 + 1}."),
        )
    ]
    source = HistorySource(history[:-40])
    orchestrator = ContextOrchestrator(
        token_counter=TiktokenCounter(),
        sources=[PromptSource("You track parcels."), source, UserInputSource()],
        model_context_window=700,
        max_output_tokens=100,
    )
    asyncio.run(orchestrator.build(query="Where is parcel 1041?"))
    source.extend(history[-40:-20])
    asyncio.run(orchestrator.build(query="Where is parcel 1042?"))
    source.extend(history[-20:])
    return asyncio.run(orchestrator.build(query="Where is parcel 1043?")).report


def test_used_above_offered_or_allocated_is_explained() -> None:
    report = _compacted_report()
    history = {s.name: s for s in report.sources}["history"]
    assert history.summary_tokens > 0
    assert "summary of compacted history" in history.note
    for s in report.sources:
        # `used` exceeds `offered` by the summary it holds, never more.
        assert s.used <= s.offered + s.summary_tokens
        if s.used > s.allocated:
            assert "over its allocation" in s.note
    console = Console(width=80, record=True, color_system=None)
    console.print(report_view(report, width=80))
    out = console.export_text()
    assert "* history" in out
    assert "offered" in out


def test_one_term_for_what_a_source_offered_and_old_reports_still_read() -> None:
    report = _compacted_report()
    data = report.to_dict()
    assert "offered" in data["sources"][0]
    assert "requested" not in data["sources"][0]
    old = json.loads(json.dumps(data))
    for s in old["sources"]:
        s["requested"] = s.pop("offered")
        del s["summary_tokens"], s["note"]
    back = ContextReport.from_dict(old)
    assert [s.offered for s in back.sources] == [s.offered for s in report.sources]
    assert report_from_payload(old).sources[0].requested == report.sources[0].offered


def test_long_source_names_are_never_cut_and_idle_sources_say_so() -> None:
    long = "knowledge_engineering_handbook_2024"
    sources = (
        SourceReport(name=long, priority=0.5, allocated=100, offered=80, used=80,
                     blocks_offered=2, blocks_kept=2),
        SourceReport(name="turn", priority=1.0, allocated=100, offered=0, used=0,
                     blocks_offered=0, blocks_kept=0),
    )  # fmt: skip
    report = ContextReport(
        window=1000, output_reserve=200, available=800, token_count=100, overhead_tokens=20,
        token_counter="o200k_base", sources=sources, blocks=(),
    )  # fmt: skip
    for width in (80, 120):
        console = Console(width=width, record=True, color_system=None)
        console.print(report_view(report, width=width))
        out = console.export_text()
        assert long in out
        assert "idle" in out.splitlines()[-1]

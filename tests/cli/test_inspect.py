"""`loomctx inspect` and report drawing: from a report's JSON, an event, a run's log, a session."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from rich.console import Console
from typer.testing import CliRunner

from loomctx.agent.events import ContextAssembled
from loomctx.cli import app
from loomctx.cli._render import composition_bar, left_out, report_view, totals_line
from loomctx.cli._reports import load_reports, report_from_event, report_from_payload
from loomctx.cli._workspace import latest_report, next_report_turn, save_report
from loomctx.context.orchestrator import ContextOrchestrator
from loomctx.context.report import ContextReport
from loomctx.context.sources import HistorySource, PromptSource, UserInputSource
from loomctx.errors import ConfigError
from loomctx.messages import Message
from loomctx.stores import open_store
from loomctx.tokens import TiktokenCounter


def _history(turns: int) -> list[Message]:
    out = []
    for i in range(turns):
        out.append(Message.user(f"Question {i}: where is parcel {1000 + i} now?"))
        out.append(Message.assistant(f"Parcel {1000 + i} left the depot on day {i % 28 + 1}."))
    return out


def built_report(window: int = 700) -> ContextReport:
    """A real build over a long history that has just been compacted: most of it dropped,
    some summarized."""
    history = _history(80)
    source = HistorySource(history[:-20])
    orchestrator = ContextOrchestrator(
        token_counter=TiktokenCounter(),
        sources=[PromptSource("You track parcels."), source, UserInputSource()],
        model_context_window=window,
        max_output_tokens=100,
    )
    asyncio.run(orchestrator.build(query="Where is parcel 1041?"))
    source.extend(history[-20:])  # history outgrows its room: the next build compacts it
    return asyncio.run(orchestrator.build(query="Where is parcel 1042?")).report


@pytest.fixture(scope="module")
def report() -> ContextReport:
    return built_report()


def test_the_view_fits_100_columns_and_explains_what_was_left_out(report: ContextReport) -> None:
    console = Console(width=100, record=True, color_system=None)
    console.print(report_view(report, width=100, full_history=4321))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 100
    assert f"input {report.available:,}" in text
    for source in ("system_prompt", "history", "user_input"):
        assert source in text
    assert "not in the window whole:" in text
    assert "summarized" in text
    assert "compacted into `history:summary`" in text
    assert f"sent {report.token_count:,} tokens" in text
    assert "4,321" in text


def test_the_totals_say_how_much_repeats_the_last_window(report: ContextReport) -> None:
    # `report` is a session's second window: it repeats the first one's prefix.
    assert report.reused_prefix_tokens > 0
    line = totals_line(report).plain
    assert f"repeats the last window {report.reused_prefix_tokens:,}" in line
    assert "repeats" not in totals_line(replace(report, reused_prefix_tokens=0)).plain


def test_the_bar_is_exactly_as_wide_as_asked(report: ContextReport) -> None:
    for width in (10, 37, 80, 100):
        assert len(composition_bar(report, width).plain) == width


def test_the_bar_of_an_overfull_report_still_fits() -> None:
    over = replace(built_report(), token_count=10_000)
    assert len(composition_bar(over, 50).plain) == 50


def _text(renderable: object, width: int = 100) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_left_out_groups_by_source_status_and_reason(report: ContextReport) -> None:
    summarized = [b for b in report.blocks if b.status == "summarized"]
    older = [b for b in summarized if b.reason == "compacted into `history:summary`"]
    tokens = sum(b.offered_tokens for b in older)
    lines = _text(left_out(report)).splitlines()
    assert lines[0].split()[:5] == [
        str(len(older)),
        "history",
        "summarized",
        f"({tokens}",
        "tokens)",
    ]
    assert len(lines) == 1
    kept = next(b for b in report.blocks if b.status == "kept" and b.source == "history")
    gone = replace(kept, status="dropped", reason="needs 9 tokens; no room")
    two = replace(report, blocks=(*report.blocks, gone))
    assert len(_text(left_out(two)).splitlines()) == 2
    assert _text(left_out(two, limit=1)).splitlines()[-1].split()[:2] == ["…", "1"]


def test_numbers_in_grouped_reasons_are_elided() -> None:
    report = built_report()
    blocks = tuple(
        replace(b, status="dropped", reason=f"needs {b.offered_tokens} tokens; no room")
        for b in report.blocks
        if b.source == "history"
    )
    text = _text(left_out(replace(report, blocks=blocks)))
    assert f"{len(blocks)} history dropped" in text
    assert "needs … tokens; no room" in text


def test_a_report_where_everything_fits_says_so() -> None:
    roomy = built_report(window=20_000)
    console = Console(width=100, record=True, color_system=None)
    console.print(report_view(roomy, width=100))
    assert "every offered block is in the window whole" in console.export_text()


def test_report_json_round_trips_and_extra_keys_are_ignored(report: ContextReport) -> None:
    data = report.to_dict() | report.summary() | {"something_new": 1}
    assert report_from_payload(data) == report


def test_an_event_carries_the_whole_report(report: ContextReport) -> None:
    event = ContextAssembled.from_report(report, run_id="r", agent="a", turn=1)
    assert report_from_event(event.to_dict()) == report


def test_the_summary_form_of_an_event_is_rebuilt_without_blocks(report: ContextReport) -> None:
    # What a producer that sends only the totals and per-source lines emits.
    sources = [
        {k: getattr(s, k) for k in ("name", "allocated", "requested", "used", "blocks_offered",
                                    "blocks_kept", "status", "error")}
        for s in report.sources
    ]  # fmt: skip
    event = replace(
        ContextAssembled.from_report(report, run_id="r", agent="a", turn=1),
        report={**report.summary(), "sources": sources},
    )
    rebuilt = report_from_event(event.to_dict(), window=report.window)
    assert rebuilt.blocks == ()
    assert (rebuilt.window, rebuilt.available, rebuilt.token_count) == (
        report.window,
        report.available,
        report.token_count,
    )
    assert rebuilt.output_reserve == report.output_reserve
    assert [s.used for s in rebuilt.sources] == [s.used for s in report.sources]
    assert rebuilt.overhead_tokens == report.token_count - sum(s.used for s in report.sources)
    assert report_from_payload(event.report).window == report.available
    kept = next(s for s in report.sources if s.name == "history")
    text = _text(left_out(rebuilt))
    assert f"history {kept.blocks_offered - kept.blocks_kept} of {kept.blocks_offered}" in text
    everything = replace(rebuilt, sources=tuple(replace(s, blocks_kept=s.blocks_offered)
                                                for s in rebuilt.sources))  # fmt: skip
    assert left_out(everything) is None


def test_bad_payloads_raise_config_error() -> None:
    with pytest.raises(ConfigError, match="not a context report: KeyError 'available'"):
        report_from_payload({"sources": []})
    with pytest.raises(ConfigError, match="not a `context_assembled` event"):
        report_from_event({"type": "run_started"})


def test_inspect_a_report_file_as_a_table_and_as_json(
    runner: CliRunner, tmp_path: Path, report: ContextReport
) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report.to_dict()))
    shown = runner.invoke(app, ["inspect", str(path)])
    assert shown.exit_code == 0, shown.output
    assert "not in the window whole:" in shown.output
    assert max(len(line) for line in shown.output.splitlines()) <= 100
    as_json = runner.invoke(app, ["inspect", str(path), "--json"])
    assert as_json.exit_code == 0
    assert ContextReport.from_dict(json.loads(as_json.output)) == report


def test_inspect_picks_a_window_of_a_run_log(
    runner: CliRunner, tmp_path: Path, report: ContextReport
) -> None:
    small = built_report(window=500)
    events = [
        {"type": "run_started", "run_id": "r", "agent": "a", "turn": 0},
        {"type": "context_assembled", "report": report.to_dict()},
        {"type": "context_assembled", "report": small.to_dict()},
    ]
    log = tmp_path / "run.jsonl"
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert load_reports(log) == [report, small]
    first = runner.invoke(app, ["inspect", str(log), "--turn", "1", "--json"])
    assert ContextReport.from_dict(json.loads(first.output)) == report
    last = runner.invoke(app, ["inspect", str(log), "--json"])
    assert ContextReport.from_dict(json.loads(last.output)) == small
    past = runner.invoke(app, ["inspect", str(log), "--turn", "3"])
    assert past.exit_code == 1
    assert "has 2 window(s); `--turn 3` is past them" in past.output


def test_a_json_list_of_reports_is_read(tmp_path: Path, report: ContextReport) -> None:
    path = tmp_path / "list.json"
    path.write_text(json.dumps([report.to_dict(), report.to_dict()]))
    assert load_reports(path) == [report, report]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json\n", "is neither JSON nor JSONL"),
        ('{"type": "run_started"}\n', "holds no context report"),
        ("[1, 2]", "item 1: expected a JSON object"),
        (b"\xff\xfe", "cannot read"),
    ],
)
def test_inspect_rejects_files_without_reports(
    runner: CliRunner, tmp_path: Path, content: str | bytes, message: str
) -> None:
    path = tmp_path / "bad.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    result = runner.invoke(app, ["inspect", str(path)])
    assert result.exit_code == 1
    assert message in result.output


def test_inspect_the_last_window_of_a_session(
    runner: CliRunner, tmp_path: Path, report: ContextReport
) -> None:
    store = open_store(tmp_path / "s.db")
    assert next_report_turn(store, "s1") == 1
    assert latest_report(store, "s1") is None
    save_report(store, "s1", 1, built_report(window=500).to_dict())
    save_report(store, "s1", 2, report.to_dict())
    assert next_report_turn(store, "s1") == 3
    store.close()
    result = runner.invoke(app, ["inspect", "--session", "s1", "--store", "s.db", "--json"])
    assert result.exit_code == 0, result.output
    assert ContextReport.from_dict(json.loads(result.output)) == report
    missing = runner.invoke(app, ["inspect", "--session", "other", "--store", "s.db"])
    assert missing.exit_code == 1
    assert "session 'other' has no saved window" in missing.output


def test_inspect_a_session_without_a_store(runner: CliRunner) -> None:
    result = runner.invoke(app, ["inspect", "--session", "s1"])
    assert result.exit_code == 1
    assert "no store at '.loom/loom.db'" in result.output


def test_inspect_needs_exactly_one_of_file_and_session(runner: CliRunner, tmp_path: Path) -> None:
    neither = runner.invoke(app, ["inspect"])
    assert neither.exit_code == 2
    (tmp_path / "r.json").write_text("{}")
    both = runner.invoke(app, ["inspect", "r.json", "--session", "x"])
    assert both.exit_code == 2
    assert "give a FILE, `--session ID`, `--list` or `--web`" in both.output
    missing = runner.invoke(app, ["inspect", "nope.json"])
    assert missing.exit_code == 2


def test_a_bar_narrower_than_its_parts_is_cut_to_width(report: ContextReport) -> None:
    many = replace(
        report,
        sources=tuple(replace(report.sources[0], name=f"s{i}", used=10) for i in range(12)),
        token_count=150,
        overhead_tokens=30,
    )
    for width in (5, 12, 20):
        assert len(composition_bar(many, width).plain) == width


def test_small_parts_take_their_cell_from_the_largest(report: ContextReport) -> None:
    sizes = [1000, 1, 1, 1]
    lopsided = replace(
        report,
        sources=tuple(
            replace(report.sources[0], name=f"s{i}", used=n) for i, n in enumerate(sizes)
        ),
        available=1003,
        token_count=1003,
        overhead_tokens=0,
    )
    bar = composition_bar(lopsided, 10).plain
    assert len(bar) == 10
    assert bar.startswith("▏s0   ")
    assert bar.endswith("▏▏▏")


@given(
    used=st.lists(st.integers(min_value=0, max_value=50_000), max_size=12),
    overhead=st.integers(min_value=0, max_value=500),
    free=st.integers(min_value=0, max_value=50_000),
    width=st.integers(min_value=1, max_value=200),
)
@example(used=[], overhead=0, free=0, width=7)
def test_the_bar_is_always_exactly_the_width(
    used: list[int], overhead: int, free: int, width: int
) -> None:
    base = _BASE
    sources = tuple(replace(base.sources[0], name=f"s{i}", used=n) for i, n in enumerate(used))
    token_count = sum(used) + overhead
    report = replace(
        base,
        sources=sources,
        token_count=token_count,
        overhead_tokens=overhead,
        available=token_count + free,
    )
    assert len(composition_bar(report, width).plain) == width


_BASE = built_report()


class _BrokenSource:
    """A third-party source that fails: the window is built without it, and says so."""

    name = "crm"
    priority = 0.5

    async def collect(self, query: str, budget: object, *, ctx: object) -> list[object]:
        raise RuntimeError("crm is down")


def test_a_failed_source_is_shown_with_its_error() -> None:
    orchestrator = ContextOrchestrator(
        sources=[PromptSource("Be brief."), _BrokenSource(), UserInputSource()],
        model_context_window=1000,
    )
    report = asyncio.run(orchestrator.build(query="hello")).report
    text = _text(report_view(report, width=100))
    line = next(line for line in text.splitlines() if "crm" in line)
    assert "error: " in line
    assert "crm is down" in line

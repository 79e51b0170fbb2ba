"""`loomctx inspect --session ID --cache`: each call's predicted cache use beside what the
provider reported, and the calls whose cache missed unexpectedly flagged."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

from typer.testing import CliRunner

from loomctx.cli import app
from loomctx.cli._reports import save_window
from loomctx.context.billing import ReportedUsage
from loomctx.context.orchestrator import ContextOrchestrator
from loomctx.context.sources import PromptSource, UserInputSource
from loomctx.stores import open_store
from loomctx.tokens import TiktokenCounter


def _save_calls(path: Path) -> None:
    orch = ContextOrchestrator(
        token_counter=TiktokenCounter(),
        sources=[PromptSource("Rules."), UserInputSource()],
        model_context_window=4000,
    )
    report = asyncio.run(orch.build(query="hello")).report
    calls = [
        # (predicted cached, reported read): a hit, a miss, a small prefix, unknown usage
        (3000, 2950),
        (3000, 200),
        (900, 0),
        (3000, None),
    ]
    store = open_store(path)
    try:
        for n, (cached, read) in enumerate(calls, 1):
            save_window(
                store,
                session="s1",
                turn=n,
                call=1,
                prompt=f"question {n}",
                report=replace(report, token_count=4000, predicted_cached=cached),
                messages=[],
                tools=[],
                usage=None if read is None else ReportedUsage(input=4000, cache_read=read),
            )
    finally:
        store.close()


def test_inspect_flags_the_calls_whose_cache_missed_unexpectedly(
    runner: CliRunner, tmp_path: Path
) -> None:
    _save_calls(tmp_path / "s.db")
    shown = runner.invoke(app, ["inspect", "--session", "s1", "--store", "s.db", "--cache",
                                "--json"])  # fmt: skip
    assert shown.exit_code == 0, shown.output
    receipts = json.loads(shown.output)
    assert [r["missed"] for r in receipts] == [False, True, False, False]
    assert receipts[1]["predicted"]["cached"] == 3000
    assert receipts[1]["reported"] == {"input": 4000, "cache_read": 200, "cache_write": 0}
    assert receipts[3]["reported"] is None

    table = runner.invoke(app, ["inspect", "--session", "s1", "--store", "s.db", "--cache"])
    assert table.exit_code == 0, table.output
    assert table.output.count("MISS") == 1
    assert "1 call(s) read under half" in table.output
    assert "1 call(s) have no reported usage" in table.output

    one = runner.invoke(app, ["inspect", "--session", "s1", "--store", "s.db", "--turn", "2"])
    assert one.exit_code == 0, one.output
    assert "reported 200 read" in one.output
    assert "MISS" in one.output

    none = runner.invoke(app, ["inspect", "--session", "nope", "--store", "s.db", "--cache"])
    assert none.exit_code == 1
    assert "no saved window" in none.output

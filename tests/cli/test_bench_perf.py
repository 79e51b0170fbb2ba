"""`loomctx bench perf --quick` through the CLI runner: real subprocesses per size, a fake
peer adapter, and a JSON result and Markdown report whose numbers agree with each other."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from loomctx.cli import app
from tests.evaluation.perf_data import write_perf_locomo
from tests.evaluation.test_perf_peers import FAKE, make_peer

PNG = b"\x89PNG\r\n\x1a\n"


def test_quick_perf_writes_a_consistent_report_with_plots_and_a_peer(
    runner: CliRunner, tmp_path: Path
) -> None:
    data = write_perf_locomo(tmp_path / "locomo.json")
    make_peer(tmp_path / "peers", "langchain", FAKE)
    out = tmp_path / "results"
    result = runner.invoke(
        app,
        ["bench", "perf", "--quick", "--sizes", "30,60", "--builds", "3", "--lexical",
         "--data", str(data), "--out", str(out), "--peers", "--peers-dir",
         str(tmp_path / "peers")],
    )  # fmt: skip
    assert result.exit_code == 0, (result.output, result.exception)
    (json_file,) = out.glob("*.json")
    report = json.loads(json_file.read_text(encoding="utf-8"))
    assert [s["n"] for s in report["sizes"]] == [30, 60]
    available = report["config"]["window"] - report["config"]["reserve"]
    for size in report["sizes"]:
        for path in ("orchestrator", "memory"):
            entry = size[path]
            # 3 timed builds and 4 calls, every one of their windows scored.
            assert (entry["builds"], entry["windows"]) == (3, 3 + 4)
            assert entry["max_tokens"] <= available
            assert entry["over_budget"] == entry["split_tool_units"] == 0
            assert entry["system_present"] == entry["query_present"] == 7
            assert entry["utilization"] == round(entry["mean_tokens"] / available, 4)
            assert entry["p50_ms"] <= entry["p95_ms"]
            assert entry["calls"]["calls"] == 4
        whole = size["whole_history"]
        assert whole["cached_share"] > 0.9
        assert size["ingest"]["turns"] == size["n"]
        assert size["ingest"]["turns_per_s"] > 0
        assert size["peak_rss_mb"] > 0
        assert size["serving"]["peak_rss_mb"] > 0
        peer = size["peers"]["langchain"]
        assert peer["split_tool_units"] == peer["windows"] == 3
        assert peer["system_present"] == 0
    markdown = (out / f"{json_file.stem}.md").read_text(encoding="utf-8")
    assert "## Targets" in markdown
    assert "| budget violations / split tool units | 0 / 0 | 0 / 0 in 28 windows | met |" in (
        markdown
    )
    assert "peer: langchain" in markdown
    assert "a fake peer" in markdown
    assert "not run: llamaindex_memory" in markdown
    plots = sorted(out.glob("*.png"))
    assert sorted(p.stem.rsplit("-", 1)[1] for p in plots) == [
        "billed", "latency", "rss", "throughput", "tokens", "utilization"
    ]  # fmt: skip
    for png in plots:
        assert png.read_bytes().startswith(PNG)
        assert f"]({png.name})" in markdown
    assert sorted(report["files"]) == sorted(str(p) for p in out.iterdir())
    assert "orchestrator, N=30" in result.output


def test_bad_sizes_are_refused_with_the_fix(runner: CliRunner, tmp_path: Path) -> None:
    data = write_perf_locomo(tmp_path / "locomo.json")
    result = runner.invoke(app, ["bench", "perf", "--sizes", "ten", "--data", str(data)])
    assert result.exit_code != 0
    assert "`--sizes` must be turn counts" in result.output
    result = runner.invoke(app, ["bench", "perf", "--sizes", ",", "--data", str(data)])
    assert "`--sizes` is empty" in result.output
    result = runner.invoke(app, ["bench", "perf", "--sizes", "1", "--data", str(data)])
    assert "turn counts >= 2" in result.output

"""Loom's side of `loomctx bench perf`, in this process (the CLI runs it in a subprocess
per size): the measurements are made on real windows and agree with each other; and the
report's targets compare each figure with issue 19's goal at the size it is set for."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loomctx.errors import ConfigError
from loomctx.evaluation.perf import run_perf
from loomctx.evaluation.perf._loom import SizeConfig, measure_size, peak_rss_mb
from loomctx.evaluation.perf._report import targets
from loomctx.evaluation.perf._worker import run
from tests.evaluation.perf_data import write_perf_locomo


@pytest.fixture
def data(tmp_path: Path) -> str:
    return str(write_perf_locomo(tmp_path / "locomo.json"))


def test_a_size_with_the_shipped_embedder_reports_vectors_and_the_query_apart(data: str) -> None:
    config = SizeConfig(data=data, n=40, builds=3, calls=2, documents=10, embed_wait=60)
    out = measure_size(config)
    vectors = out["vectors"]
    assert vectors["without_vectors"] == 0
    assert vectors["coverage"] == 1.0
    assert vectors["embedded"] >= out["ingest"]["tasks"]
    fast = vectors["fast"]  # the static table's vectors come first, for every record
    assert fast["model"].startswith("static:")
    assert fast["coverage"] == 1.0
    assert fast["without_vectors"] == 0
    assert fast["embedded"] == vectors["embedded"]
    assert 0 < fast["all_after_s"] <= vectors["waited_s"]
    # A fresh process opened the files and built from them, its memory measured apart.
    assert out["serving"]["builds"] == 3
    assert 0 < out["serving"]["rss_mb"] <= out["serving"]["peak_rss_mb"]
    assert out["query_embedding"]["uncached"]
    assert out["query_embedding"]["p50_ms"] > 0
    assert out["query_embedding"]["busy_p50_ms"] > 0  # measured beside a busy process
    for path in ("orchestrator", "memory"):
        entry = out[path]
        assert entry["windows"] == 3 + 2
        assert entry["over_budget"] == 0
        assert entry["documents"] > 0  # the knowledge base reaches the window
    # 40 turns fit the window whole: sending them all is not over budget.
    assert out["whole_history"]["over_budget"] == 0
    assert out["tool_units"] == 4


def test_a_lexical_size_and_the_worker(data: str) -> None:
    request = {"task": "size", "config": {"data": data, "n": 300, "builds": 2, "calls": 3,
                                          "documents": 10, "embedder": "none"}}  # fmt: skip
    out = run(request)
    assert "vectors" not in out
    assert "query_embedding" not in out
    whole = out["whole_history"]
    assert whole["over_budget"] == 3
    assert whole["first_call_tokens"] > 7000
    for path in ("orchestrator", "memory"):
        assert out[path]["max_tokens"] <= 7000
        assert out[path]["split_tool_units"] == 0
        assert out[path]["calls"]["mean_prompt_tokens"] < whole["mean_prompt_tokens"]
    with pytest.raises(ConfigError, match="'size', 'embed', 'soak' or 'serve'"):
        run({"task": "sing"})
    with pytest.raises(ConfigError, match="`calls` >= 2"):
        measure_size(SizeConfig(data=data, n=10, calls=1))
    serve = {"task": "serve", "memory": "m.db", "knowledge": "k.db", "embedder": "none",
             "window": 8000, "reserve": 1000}  # fmt: skip
    with pytest.raises(ConfigError, match="serving needs queries and builds >= 1, got 0, 3"):
        run({**serve, "queries": [], "builds": 3})


def test_a_soak_builds_in_one_process_and_reports_the_drift(data: str) -> None:
    config = {"data": data, "n": 300, "documents": 10, "embedder": "none"}
    out = run({"task": "soak", "config": config, "builds": 100})
    assert (out["n"], out["builds"]) == (300, 100)
    for path in ("orchestrator", "memory"):
        entry = out[path]
        assert entry["first_p50_ms"] > 0
        assert entry["last_p50_ms"] > 0
        # (from the unrounded p50s: the rounded ones give it to within a thousandth)
        assert entry["drift"] == pytest.approx(
            entry["last_p50_ms"] / entry["first_p50_ms"], abs=2e-3
        )
        assert entry["rss_end_mb"] > 0
    with pytest.raises(ConfigError, match="at least 100 builds"):
        run({"task": "soak", "config": config, "builds": 99})


def test_soak_rows_judge_the_drift_and_say_when_no_soak_ran() -> None:
    result: dict[str, Any] = {"sizes": [_size(10_000, 1.2, 2.5)]}
    verdicts = {row[0]: (row[2], row[3]) for row in targets(result)}
    assert verdicts["flat over a 10,000-build process"] == ("no --soak", "not measured")
    flat = {"first_p50_ms": 4.0, "last_p50_ms": 4.2, "drift": 1.05, "rss_start_mb": 180.0,
            "rss_end_mb": 181.5}  # fmt: skip
    result["soak"] = {"n": 10_000, "builds": 10_000, "orchestrator": flat,
                      "memory": {**flat, "last_p50_ms": 6.0, "drift": 1.5}}  # fmt: skip
    verdicts = {row[0]: (row[2], row[3]) for row in targets(result)}
    assert verdicts["orchestrator: flat over 10,000 builds at N=10,000"] == (
        "4.00 -> 4.20 ms (1.05x), RSS 180.0 -> 181.5 MB", "met")  # fmt: skip
    assert verdicts["memory: flat over 10,000 builds at N=10,000"][1] == "**NOT met**"


def test_embedding_throughput_through_the_worker(data: str) -> None:
    out = run({"task": "embed", "data": data, "texts": 8})
    assert out["texts"] == 8
    assert out["texts_per_s"] > 0
    assert out["model"]
    fast = out["fast"]  # the static table the memory embeds with first
    assert fast["model"] != out["model"]
    assert fast["texts"] == 8 * 16
    assert fast["texts_per_s"] > 0


def test_run_perf_refuses_bad_arguments(data: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="turn counts >= 2"):
        run_perf(data, tmp_path, sizes=())
    with pytest.raises(ConfigError, match="`reserve` must be >= 0 and below `window`"):
        run_perf(data, tmp_path, sizes=(40,), window=4000, reserve=4000)
    with pytest.raises(ConfigError, match="'default' or 'none'"):
        run_perf(data, tmp_path, embedder="bert")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="`soak` must be 0 or >= 100"):
        run_perf(data, tmp_path, sizes=(40,), soak=10)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="cannot create the output folder"):
        run_perf(data, tmp_path / "file" / "sub", sizes=(10,))
    with pytest.raises(ConfigError, match="no such file"):
        run_perf(tmp_path / "missing.json", tmp_path, sizes=(10,))


def _entry(p50: float, **extra: Any) -> dict[str, Any]:
    return {"p50_ms": p50, "p95_ms": p50 * 2, "builds": 5, "over_budget": 0,
            "split_tool_units": 0, "windows": 10, "utilization": 0.95, **extra}  # fmt: skip


def _size(n: int, orch: float, memory: float, **extra: Any) -> dict[str, Any]:
    return {"n": n, "orchestrator": _entry(orch), "memory": _entry(memory),
            "ingest": {"turns_per_s": 9000.0}, "promotion_s": 0.5, "peak_rss_mb": 400.0,
            "query_embedding": {"p50_ms": 12.0, "p95_ms": 20.0, "busy_p50_ms": 24.0,
                                "busy_p95_ms": 40.0}, **extra}  # fmt: skip


def test_targets_state_each_verdict_at_its_own_size() -> None:
    llama = {"llamaindex_memory": _entry(12.0)}
    result = {
        "sizes": [_size(1_000, 1.0, 2.0), _size(10_000, 1.2, 2.5, peers=llama),
                  _size(100_000, 1.9, 3.5)],
        "embedding": {"texts_per_s": 33.0},
    }  # fmt: skip
    verdicts = {row[0]: (row[2], row[3]) for row in targets(result)}
    assert verdicts["orchestrator build p50 at N=10k"] == ("1.20 ms", "met")
    assert verdicts["memory-path build p50 at N=100k"] == ("3.50 ms", "**NOT met**")
    assert verdicts["growth orchestrator p50(100k)/p50(1k)"] == ("1.90", "met")
    assert verdicts["vs llama-index Memory at N=10k"] == ("10.0x", "met")
    assert verdicts["embedding throughput"] == ("33", "**NOT met**")
    assert verdicts["memory build + query embedding, N=100,000"] == ("15.5 ms", "met")
    busy = "the same, the embedding while another process keeps a core busy"
    assert verdicts[busy] == ("27.5 ms", "**NOT met**")
    assert verdicts["RSS with 100k stored turns"] == (
        "400 MB, lexical only (the measuring process)", "met")  # fmt: skip
    assert verdicts["budget violations / split tool units"][1] == "met"

    broken = copy.deepcopy(result)
    broken["sizes"][2]["memory"]["split_tool_units"] = 1
    broken["sizes"][1]["peers"]["llamaindex_memory"]["error"] = "too many SQL variables"
    broken["sizes"][2]["peak_rss_mb"] = 1052.0
    verdicts = {row[0]: (row[2], row[3]) for row in targets(broken)}
    assert verdicts["budget violations / split tool units"] == (
        "0 / 1 in 60 windows", "**NOT met**")  # fmt: skip
    assert verdicts["vs llama-index Memory at N=10k"][1] == "not measured"
    assert verdicts["RSS with 100k stored turns"] == (
        "1,052 MB, lexical only (the measuring process)", "**NOT met**")  # fmt: skip

    # With the cascade, records get the static table's vectors first: its rate is judged.
    cascade = copy.deepcopy(result)
    cascade["embedding"] = {"model": "e5", "texts_per_s": 33.0,
                            "fast": {"model": "static", "texts_per_s": 9600.0}}  # fmt: skip
    cascade["sizes"][2]["vectors"] = {"coverage": 0.05, "fast": {"coverage": 1.0}}
    verdicts = {row[0]: (row[2], row[3]) for row in targets(cascade)}
    assert verdicts["embedding throughput"] == ("9,600 (`static`, first; `e5`: 33)", "met")
    held = "e5 vectors on 5%, fast vectors on 100%"
    assert verdicts["RSS with 100k stored turns"] == (
        f"400 MB, {held} (the measuring process)", "met")  # fmt: skip

    # Judged on the process serving the stored turns, when the run measured one.
    served = copy.deepcopy(cascade)
    served["sizes"][2]["peak_rss_mb"] = 716.0
    served["sizes"][2]["serving"] = {"builds": 5, "rss_mb": 300.0, "peak_rss_mb": 320.0}
    verdicts = {row[0]: (row[2], row[3]) for row in targets(served)}
    assert verdicts["RSS with 100k stored turns"] == (
        f"320 MB, {held} (serving; the measuring process: 716 MB)", "met")  # fmt: skip
    served["sizes"][2]["serving"]["peak_rss_mb"] = 501.0
    assert {row[0]: row[3] for row in targets(served)}["RSS with 100k stored turns"] == (
        "**NOT met**"
    )


def test_a_128k_window_is_judged_by_its_own_target() -> None:
    result = {
        "config": {"window": 128_000, "reserve": 8_000},
        "sizes": [_size(1_000, 2.0, 4.0), _size(100_000, 17.1, 150.2)],
    }
    verdicts = {row[0]: (row[2], row[3]) for row in targets(result)}
    assert verdicts["128k window: memory-path build p50 at N=100k"] == ("150.20 ms", "**NOT met**")
    assert verdicts["128k window: orchestrator p50 at N=100k"] == ("17.10 ms", "met")
    assert "orchestrator build p50 at N=10k" not in verdicts  # set for the 8,000-token window
    result["config"]["window"] = 32_000
    verdicts = {row[0]: (row[2], row[3]) for row in targets(result)}
    assert verdicts["build p50 targets"] == ("32,000", "not measured")


def test_a_failing_or_slow_measurement_process_is_reported() -> None:
    from loomctx.evaluation.perf._spawn import in_subprocess

    with pytest.raises(
        ConfigError, match=r"(?s)the sing measurement failed:.*'size', 'embed', 'soak' or 'serve'"
    ):
        in_subprocess({"task": "sing"}, timeout=120)
    with pytest.raises(ConfigError, match="took more than 0 s"):
        in_subprocess({"task": "size"}, timeout=0.001)


def test_a_process_started_by_a_large_one_reports_its_own_peak() -> None:
    """`ru_maxrss` survives exec: a worker started by a 100k measurement said it peaked at its
    parent's size. `peak_rss_mb` reads the worker's own high-water mark."""
    hog = b"x" * (600 << 20)  # resident in this process when the child is forked
    code = "from loomctx.evaluation.perf._loom import peak_rss_mb; print(peak_rss_mb())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert 0 < float(done.stdout) < 400 < peak_rss_mb()
    del hog

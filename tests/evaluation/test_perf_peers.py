"""The peers' JSON interface of `loomctx bench perf`, with small fake adapters run as real
subprocesses (no peer environment needed): found, run, checked, and scored like Loom."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from loomctx.evaluation.perf._workload import Workload, build_workload, load_source
from loomctx.evaluation.perf.peers import Peer, find_peers, run_peer, score_peer
from loomctx.tokens import TiktokenCounter
from tests.evaluation.perf_data import write_perf_locomo

# Keeps the last tool result (without its call) and the query, and no system prompt: a
# split tool unit and a missing system prompt in every window.
FAKE = """
import json, sys, time
w = json.load(open(sys.argv[1], encoding="utf-8"))
last = [m for m in w["history"] if m["role"] == "tool"][-1]
build_ms, windows = [], []
for i in range(w["builds"]):
    q = w["queries"][i % len(w["queries"])]
    t = time.perf_counter()
    messages = [last, {"role": "user", "content": w["documents"][0] + "\\n\\n" + q}]
    build_ms.append((time.perf_counter() - t) * 1000)
    windows.append({"query": q, "messages": messages, "tools": w["tools"]})
json.dump({"peer": "fake", "version": "0.1", "ingest_s": 0.0, "build_ms": build_ms,
           "windows": windows, "notes": ["a fake peer"], "timed_out": False,
           "error": None}, sys.stdout)
"""


def make_peer(folder: Path, name: str, code: str, *, venv: str | None = None) -> Peer:
    """An adapter `name` under `folder` whose environment's python is this interpreter."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}_adapter.py").write_text(code, encoding="utf-8")
    bin_dir = folder / ".venvs" / (venv or name) / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n', encoding="utf-8")
    python.chmod(0o755)
    return Peer(name=name, adapter=folder / f"{name}_adapter.py", python=python)


@pytest.fixture
def workload_file(tmp_path: Path) -> tuple[Path, Workload]:
    source = load_source(write_perf_locomo(tmp_path / "l.json"), documents=10)
    workload = build_workload(source, 40, calls=2)
    file = tmp_path / "workload.json"
    file.write_text(json.dumps(workload.to_json(builds=4, time_limit=5.0)), encoding="utf-8")
    return file, workload


def test_a_peer_is_run_and_its_windows_are_scored_like_loom(
    tmp_path: Path, workload_file: tuple[Path, Workload]
) -> None:
    file, workload = workload_file
    peer = make_peer(tmp_path, "fake", FAKE)
    answer = run_peer(peer, file, timeout=60)
    assert answer["error"] is None
    assert len(answer["windows"]) == 4
    scored = score_peer(answer, workload, TiktokenCounter())
    assert scored["builds"] == scored["windows"] == 4
    assert scored["split_tool_units"] == 4  # the orphan result, in every window
    assert scored["system_present"] == 0
    assert scored["query_present"] == 4
    assert scored["documents"] == 1.0
    assert scored["over_budget"] == 0
    assert 0 < scored["utilization"] < 0.2
    assert scored["notes"] == ["a fake peer"]
    assert scored["peer"] == "fake"


def test_peers_are_found_only_with_an_adapter_and_an_environment(tmp_path: Path) -> None:
    make_peer(tmp_path, "ready", FAKE)
    (tmp_path / "noenv_adapter.py").write_text(FAKE, encoding="utf-8")
    found, missing = find_peers(tmp_path, ("ready", "noenv", "absent"))
    assert [p.name for p in found] == ["ready"]
    assert "noenv: no environment" in missing[0]
    assert "setup.sh" in missing[0]
    assert "absent: no adapter" in missing[1]


@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("import sys; sys.stderr.write('boom\\n'); sys.exit(3)", "exit status 3: boom"),
        ("print('hello')", "not a JSON answer"),
        ("print('[1]')", "must be a JSON object"),
        ("import json; print(json.dumps({'peer': 'x', 'build_ms': 1, 'windows': [], "
         "'notes': []}))", "`build_ms` must be a list"),
        ("import json; print(json.dumps({'peer': 'x', 'build_ms': [1.0], 'windows': [], "
         "'notes': []}))", "0 windows for 1 timed builds"),
        ("import time; time.sleep(30)", "no answer within 1 s"),
    ],
)  # fmt: skip
def test_a_peer_that_fails_is_reported_not_raised(
    tmp_path: Path, workload_file: tuple[Path, Workload], code: str, error: str
) -> None:
    file, workload = workload_file
    answer = run_peer(make_peer(tmp_path, "bad", code), file, timeout=1 if "sleep" in code else 60)
    assert error in answer["error"]
    scored = score_peer(answer, workload, TiktokenCounter())
    assert scored["builds"] == 0
    assert scored["error"] == answer["error"]


def test_a_window_without_its_query_is_refused(workload_file: tuple[Path, Workload]) -> None:
    from loomctx.errors import ConfigError

    _, workload = workload_file
    answer = {"peer": "x", "build_ms": [1.0], "windows": [{"messages": []}], "notes": []}
    with pytest.raises(ConfigError, match="needs its `query`"):
        score_peer(answer, workload, TiktokenCounter())

"""Peers of `loomctx bench perf`: other libraries' context strategies, run on the same
workload in their own virtual environments and judged by the same scoring code.

A peer is an adapter script, ``<peers dir>/<name>_adapter.py``, run with the python of its own
environment, ``<peers dir>/.venvs/<name>/bin/python`` (``bench/peers/setup.sh`` creates them;
no peer is ever a dependency of Loom). The interface is one JSON object each way:

- in: the path of a workload file, the only argument (`Workload.to_json`, plus
  ``tiktoken_dir``, where the tiktoken encoding files are, for tokenizers that must not
  download: ``../shared/data/tiktoken``);
- out, on stdout: ``{"peer": str, "version": str, "ingest_s": float, "build_ms": [float],
  "windows": [{"query": str, "messages": [...], "tools": [...]}], "notes": [str],
  "timed_out": bool, "error": str | null}``: one window per timed build, in OpenAI's
  format, with the tools the agent would send alongside. ``error`` says why the peer could
  not run the workload (it is reported, not raised); a build running past the workload's
  ``time_limit`` ends the peer's builds there (``timed_out``).

`run_peer` runs one adapter and `score_peer` judges its windows with `score.score_window`,
exactly as Loom's are.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loomctx.errors import ConfigError
from loomctx.evaluation.perf._workload import SYSTEM, Workload
from loomctx.evaluation.perf.score import DocumentProbe, score_window, summarize
from loomctx.tokens import TokenCounter

__all__ = ["PEERS", "Peer", "find_peers", "run_peer", "score_peer"]

PEERS = ("llamaindex_memory", "llamaindex_buffer", "langchain", "autogen", "loomagent")
"""The adapters shipped in ``bench/peers``, in report order."""

_VENV = {"llamaindex_memory": "llamaindex", "llamaindex_buffer": "llamaindex"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Peer:
    """An adapter and the python of the environment it runs in."""

    name: str
    adapter: Path
    python: Path


def find_peers(folder: str | Path, names: tuple[str, ...] = PEERS) -> tuple[list[Peer], list[str]]:
    """The peers of `names` whose adapter and environment exist under `folder`, and a note
    for each one that is missing (run ``bench/peers/setup.sh``)."""
    root = Path(folder)
    found: list[Peer] = []
    missing: list[str] = []
    for name in names:
        adapter = root / f"{name}_adapter.py"
        python = root / ".venvs" / _VENV.get(name, name) / "bin" / "python"
        if not adapter.is_file():
            missing.append(f"{name}: no adapter at {adapter}")
        elif not python.is_file():
            missing.append(f"{name}: no environment at {python.parent.parent} (run setup.sh)")
        else:
            found.append(Peer(name=name, adapter=adapter, python=python))
    return found, missing


def run_peer(
    peer: Peer,
    workload_file: Path,
    *,
    timeout: float,
) -> dict[str, Any]:
    """Run `peer` on the workload in `workload_file`; its answer, checked for shape. A peer
    that crashes, hangs past `timeout` seconds or answers nonsense gets an ``error``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    try:
        done = subprocess.run(
            [str(peer.python), str(peer.adapter), str(workload_file)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return _failed(peer, f"no answer within {timeout:.0f} s")
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-3:]
        return _failed(peer, f"exit status {done.returncode}: {' | '.join(tail)}")
    try:
        answer = json.loads(done.stdout)
    except json.JSONDecodeError:
        return _failed(peer, f"not a JSON answer: {done.stdout[:120]!r}")
    problem = _check(answer)
    return _failed(peer, problem) if problem else answer


def _failed(peer: Peer, error: str) -> dict[str, Any]:
    return {"peer": peer.name, "version": "", "ingest_s": None, "build_ms": [], "windows": [],
            "notes": [], "timed_out": False, "error": error}  # fmt: skip


def _check(answer: object) -> str | None:
    if not isinstance(answer, Mapping):
        return f"the answer must be a JSON object, got {type(answer).__name__}"
    for key, kind in (("peer", str), ("build_ms", list), ("windows", list), ("notes", list)):
        if not isinstance(answer.get(key), kind):
            return f"the answer's `{key}` must be a {kind.__name__}, got {answer.get(key)!r:.60}"
    if answer.get("error") is None and len(answer["windows"]) != len(answer["build_ms"]):
        return (
            f"the answer has {len(answer['windows'])} windows for {len(answer['build_ms'])} "
            "timed builds: one window per build"
        )
    return None


def score_peer(
    answer: Mapping[str, Any], workload: Workload, counter: TokenCounter
) -> dict[str, Any]:
    """A peer's answer judged like Loom's builds: latency, tokens, utilization, violations
    and presences over every window it returned (`score.summarize`), with its notes."""
    probe = DocumentProbe(workload.documents)
    scores = []
    for window in answer["windows"]:
        if not isinstance(window, Mapping) or not isinstance(window.get("query"), str):
            raise ConfigError(
                f"peer `{answer['peer']}`: a window needs its `query`: {window!r:.80}"
            )
        scores.append(
            score_window(
                window,
                counter=counter,
                available=workload.available,
                system=SYSTEM,
                query=window["query"],
                documents=probe,
            )
        )
    out = summarize([float(ms) for ms in answer["build_ms"]], scores, available=workload.available)
    out.update(
        peer=answer["peer"],
        version=answer.get("version", ""),
        ingest_s=answer.get("ingest_s"),
        notes=list(answer["notes"]),
        timed_out=bool(answer.get("timed_out")),
        error=answer.get("error"),
    )
    return out

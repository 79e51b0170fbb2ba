"""Durable memory ingest, as `loomctx bench perf` measures it (issue 19: >= 2,000 turns/s).

Run: .venv/bin/python bench/memory_ingest_bench.py [--sizes 10000 100000] [--repeat 3]
     [--modes default foreground lexical] [--base OTHER/src] [--busy 1] [--profile OUT.prof]
     [--json OUT]

The ingest is `evaluation/perf/_loom.py`'s (`measure_size`), step for step: the workload of
`build_workload(load_source(locomo10_dev.json), n)`, its history as tasks
(`tasks_from_messages`), added to a `LoomMemory("perf", SQLiteStore(file),
counter=TiktokenCounter())` 1,000 tasks per `add_tasks` call, timed; turns/s = n / seconds;
the embedder loaded first (the perf bench has embedded its knowledge base and queries by then).
Each run is a fresh process (as the perf bench runs each size), so no run inherits another's
threads, caches or loaded models. Modes, alternated run by run so that the machine's load
drifts over all of them alike (medians reported):

- ``default``: `embedder=default_embedder()` (e5, with the shipped static table as its
  `fast_embedder`), the background embedder running during the import, as the perf bench;
  also the seconds after the import until every record has its fast vector, and the seconds
  the embedders spent embedding during the import (`BackgroundEmbedder.seconds`);
- ``foreground``: the same with `embed_in_background=False` (no thread: what the import costs
  without the background embedder competing with it);
- ``lexical``: `embedder=None` (no vectors at all).

`--base` names the `src` folder of another checkout (e.g. ``git archive HEAD src | tar -x -C
/tmp/base``): every run is then made with that code too, right before this checkout's
(``PYTHONPATH``), for a before/after comparison under the same load.

`--busy K` keeps K cores busy (spinning processes) during every run: the perf bench runs on
a machine shared with other jobs, where the import and the embedder contend for what is left.

`--profile` writes a cProfile of one `default` run's import (main thread only) per size.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import LOCOMO

from loomctx import MemoryEmbedding
from loomctx.embeddings import default_embedder
from loomctx.evaluation.perf._workload import build_workload, load_source
from loomctx.memory.core import LoomMemory
from loomctx.memory.task import tasks_from_messages
from loomctx.stores.base import Unembedded
from loomctx.stores.sqlite import SQLiteStore
from loomctx.tokens import TiktokenCounter

MODES = ("default", "foreground", "lexical")
_BATCH = 1000  # as `_loom._INGEST_BATCH`
_FAST_WAIT = 300.0  # seconds to wait for every record's fast vector before giving up


def run_one(mode: str, n: int, profile: str | None) -> dict[str, Any]:
    """One import of `n` turns in `mode`, in this process."""
    workload = build_workload(load_source(LOCOMO), n)
    tasks = tasks_from_messages(workload.history)
    embedder = None if mode == "lexical" else default_embedder()
    if embedder is not None:
        # `measure_size` has embedded the knowledge base and the queries by then: the model
        # is loaded, and its batches start as soon as the fast vectors have caught up.
        embedder.embed(["warm up"], kind="query")
    out: dict[str, Any] = {"mode": mode, "n": n, "tasks": len(tasks)}
    with tempfile.TemporaryDirectory(prefix="loomctx-ingest-") as tmp:
        store = SQLiteStore(Path(tmp) / "memory.db")
        memory = LoomMemory(
            "perf",
            store=store,
            embedder=embedder,
            counter=TiktokenCounter(),
            embedding=MemoryEmbedding(in_background=mode != "foreground"),
        )
        try:
            profiler = cProfile.Profile() if profile else None
            start = time.perf_counter()
            if profiler is not None:
                profiler.enable()
            for k in range(0, len(tasks), _BATCH):
                memory.add_tasks(tasks[k : k + _BATCH])
            if profiler is not None:
                profiler.disable()
            took = time.perf_counter() - start
            if profiler is not None and profile:
                profiler.dump_stats(profile)
            out["seconds"] = round(took, 3)
            out["turns_per_s"] = round(n / took, 1)
            background = memory.background
            if mode == "default" and background is not None:
                # The embedders' own seconds inside the import (load-independent where the
                # rate is not: how much of the import the thread spent embedding beside it).
                spent = background.seconds + (background.first.seconds if background.first else 0)
                out["embed_s_in_import"] = round(spent, 2)
            if mode == "default" and background is not None and background.first is not None:
                op = Unembedded(
                    model=background.first.model, prefix=memory.namespace, limit=1, exact=True
                )
                start = time.perf_counter()
                while store.batch([op])[0] and time.perf_counter() - start < _FAST_WAIT:
                    time.sleep(0.5)  # as `_loom._wait_for_vectors`
                waited = time.perf_counter() - start
                out["fast_all_after_s"] = round(waited, 1) if waited < _FAST_WAIT else None
        finally:
            memory.close()
            store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--base", help="the `src` folder of code to compare with (before)")
    parser.add_argument("--busy", type=int, default=0, help="cores kept busy during the runs")
    parser.add_argument("--profile", help="cProfile of one default import per size (prefix)")
    parser.add_argument("--json", help="write the runs and medians here")
    parser.add_argument("--one", nargs=2, metavar=("MODE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one[0], int(args.one[1]), args.profile)))
        return
    codes = {"base": args.base, "this": None} if args.base else {"this": None}
    runs: list[dict[str, Any]] = []
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)
    ]
    try:
        _run_all(args, codes, runs)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    _report(args, codes, runs)


def _run_all(
    args: argparse.Namespace, codes: dict[str, str | None], runs: list[dict[str, Any]]
) -> None:
    for n in args.sizes:
        for r in range(args.repeat):
            for mode in args.modes:
                for code, path in codes.items():
                    cmd = [sys.executable, __file__, "--one", mode, str(n)]
                    if args.profile and mode == "default" and r == 0:
                        cmd += ["--profile", f"{args.profile}-{code}-{n}.prof"]
                    env = dict(os.environ)
                    if path is not None:
                        env["PYTHONPATH"] = str(Path(path).resolve())
                    done = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
                    run = {"code": code, **json.loads(done.stdout.strip().splitlines()[-1])}
                    runs.append(run)
                    print(json.dumps(run), flush=True)


def _report(
    args: argparse.Namespace, codes: dict[str, str | None], runs: list[dict[str, Any]]
) -> None:
    summary = []
    print(f"\n{'n':>8} {'code':<5} {'mode':<11} {'turns/s (median)':>17} {'runs':>5} "
          f"{'fast all after s':>17}")  # fmt: skip
    for n in args.sizes:
        for mode in args.modes:
            for code in codes:
                mine = [r for r in runs if r["n"] == n and r["mode"] == mode and r["code"] == code]
                rate = statistics.median(r["turns_per_s"] for r in mine)
                waits = [
                    r["fast_all_after_s"] for r in mine if r.get("fast_all_after_s") is not None
                ]
                wait = statistics.median(waits) if waits else None
                summary.append(
                    {"n": n, "code": code, "mode": mode, "turns_per_s": rate,
                     "fast_all_after_s": wait}
                )  # fmt: skip
                shown = "" if wait is None else f"{wait:.1f}"
                print(f"{n:>8} {code:<5} {mode:<11} {rate:>17,.0f} {len(mine):>5} {shown:>17}")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "medians": summary}, indent=2))


if __name__ == "__main__":
    main()

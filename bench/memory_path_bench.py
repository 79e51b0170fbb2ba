"""The memory path of `loomctx bench perf`, built again and again on stores written once.

Run: .venv/bin/python bench/memory_path_bench.py prepare FOLDER [--n 10000]
     .venv/bin/python bench/memory_path_bench.py time FOLDER [--builds 60]

`prepare` writes the perf workload's memory (N turns, promoted, fast vectors for all and as
many of the shipped model's as 120 s allow) and knowledge base into FOLDER, as
`loomctx bench perf` does; `time` opens them as a serving process would (no background
embedder), builds the memory path's window as `loomctx bench perf` does (the window recipe's
default settings, `_loom.PERF_SETTINGS`) and reports, at p50: the memory path's build (wall
and this process's CPU time, the latter steadier on a busy machine), and `LoomMemory.search`
and `KnowledgeBase.search_sync` alone at the depth a build asks for (82 results from pools
of 656: thread CPU time). Run `time` with two checkouts' ``src`` on the same FOLDER to compare
them side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from loomctx import MemoryEmbedding
from loomctx.embeddings import default_embedder
from loomctx.evaluation.perf import _loom
from loomctx.evaluation.perf._workload import Workload, build_workload, load_source
from loomctx.knowledge import KnowledgeBase
from loomctx.memory.core import LoomMemory
from loomctx.memory.task import tasks_from_messages
from loomctx.stores.sqlite import SQLiteStore
from loomctx.tokens import TiktokenCounter

DATA = Path(__file__).resolve().parents[1] / "../shared/data/locomo/locomo10_dev.json"


def prepare(folder: Path, n: int, data: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    counter = TiktokenCounter()
    workload = build_workload(load_source(data), n, calls=20, window=8000, reserve=1000)
    embedder = default_embedder()
    kb_store, memory_store = SQLiteStore(folder / "knowledge.db"), SQLiteStore(folder / "memory.db")
    kb = _loom._knowledge_base(kb_store, workload, embedder, counter)
    memory = LoomMemory("perf", store=memory_store, embedder=embedder, counter=counter)
    tasks = tasks_from_messages(workload.history)
    for k in range(0, len(tasks), 1000):
        memory.add_tasks(tasks[k : k + 1000])
    memory.promote_tasks()
    print(_loom._wait_for_vectors(memory, memory_store, embedder, 120.0))
    memory.close()
    kb.close()
    kb_store.close()
    memory_store.close()
    (folder / "queries.json").write_text(json.dumps(list(workload.queries)))


def _p50(samples: list[float]) -> float:
    return round(statistics.median(samples), 2)


def measure(folder: Path, builds: int) -> dict[str, float]:
    queries = json.loads((folder / "queries.json").read_text())
    counter = TiktokenCounter()
    embedder = default_embedder()
    workload = Workload(
        n=0,
        history=(),
        tool_units=0,
        documents=(),
        queries=tuple(queries),
        continuation=(),
        window=8000,
        reserve=1000,
    )
    kb_store, memory_store = SQLiteStore(folder / "knowledge.db"), SQLiteStore(folder / "memory.db")
    kb = KnowledgeBase("notes", kb_store, embedder=embedder, counter=counter, fast_embedder=None)
    memory = LoomMemory(
        "perf",
        store=memory_store,
        embedder=embedder,
        counter=counter,
        embedding=MemoryEmbedding(in_background=False),
    )
    orch = _loom._memory_orchestrator(memory, kb, workload, counter)
    wall: list[float] = []
    cpu: list[float] = []

    async def go() -> None:
        for q in queries:  # warm: query vectors cached, records read once
            await orch.build(query=q)
        for i in range(builds):
            start, used = time.perf_counter(), time.process_time()
            await orch.build(query=queries[i % len(queries)])
            wall.append((time.perf_counter() - start) * 1000)
            cpu.append((time.process_time() - used) * 1000)

    asyncio.run(go())
    alone: dict[str, list[float]] = {"memory_search": [], "knowledge_search": []}
    for i in range(2 * builds):
        q = queries[i % len(queries)]
        start = time.thread_time()
        memory.search(q, limit=82, pool=656)
        alone["memory_search"].append((time.thread_time() - start) * 1000)
        start = time.thread_time()
        kb.search_sync(q, limit=82)
        alone["knowledge_search"].append((time.thread_time() - start) * 1000)
    memory.close()
    kb.close()
    kb_store.close()
    memory_store.close()
    return {
        "build_p50_ms": _p50(wall),
        "build_cpu_p50_ms": _p50(cpu),
        "memory_search_cpu_p50_ms": _p50(alone["memory_search"]),
        "knowledge_search_cpu_p50_ms": _p50(alone["knowledge_search"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("task", choices=["prepare", "time"])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--builds", type=int, default=60)
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args()
    if args.task == "prepare":
        prepare(args.folder, args.n, args.data)
    else:
        print(json.dumps(measure(args.folder, args.builds)))


if __name__ == "__main__":
    main()

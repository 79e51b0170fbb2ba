"""The window an agent or the proxy builds after each turn: a turn recorded, then the build.

Run: .venv/bin/python bench/turn_build_bench.py [--n 10000] [--builds 200]

`loomctx bench perf` times builds of a memory that does not change between them. In use,
every build follows a write: the user's turn is recorded, then the window is built, then the
reply is recorded. Here a `LoomMemory` on SQLite holds N LoCoMo turns (lexical search, as the
proxy serves without an embedder), the window recipe's sources build an 8,000-token window,
and each timed build follows the recording of a new user turn (its reply is recorded after
it). Reports the build's p50 and p95, wall and this process's CPU time (the latter steadier on
a busy machine). Run it with two checkouts' ``src`` to compare them side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from _common import locomo_turns

from loomctx import LoomMemory, TiktokenCounter
from loomctx.context.recipe import memory_sources, window_orchestrator, window_sources
from loomctx.memory import tasks_from_messages
from loomctx.messages import Message
from loomctx.stores.sqlite import SQLiteStore


def _messages(turns: list[str], start: int, count: int) -> list[Message]:
    return [
        Message.user(turns[k % len(turns)])
        if k % 2 == 0
        else Message.assistant(turns[k % len(turns)])
        for k in range(start, start + count)
    ]


def measure(n: int, builds: int, warm: int = 30) -> dict[str, float]:
    turns = locomo_turns()
    counter = TiktokenCounter()
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "memory.db")
        memory = LoomMemory("bench", store=store, embedder=None, counter=counter)
        tasks = tasks_from_messages(_messages(turns, 0, n))
        for i in range(0, len(tasks), 500):
            memory.add_tasks(tasks[i : i + 500])
        memory.promote_tasks()
        system = "You are a helpful assistant."
        sources = window_sources(system, memory=list(memory_sources(memory)))
        orch = window_orchestrator(sources, counter=counter, window=8000)
        wall: list[float] = []
        cpu: list[float] = []

        async def turn(i: int, timed: bool) -> None:
            query = turns[(i * 7) % len(turns)]
            memory.add_tasks(tasks_from_messages([Message.user(query)]))
            start, used = time.perf_counter(), time.process_time()
            await orch.build(query=query)
            if timed:
                wall.append((time.perf_counter() - start) * 1000)
                cpu.append((time.process_time() - used) * 1000)
            memory.add_tasks(tasks_from_messages([Message.assistant(f"Noted ({i}).")]))

        async def run() -> None:
            for i in range(warm + builds):
                await turn(i, timed=i >= warm)

        asyncio.run(run())
        memory.close()
        store.close()

    def p95(samples: list[float]) -> float:
        return round(sorted(samples)[int(0.95 * (len(samples) - 1))], 2)

    return {
        "build_p50_ms": round(statistics.median(wall), 2),
        "build_p95_ms": p95(wall),
        "build_cpu_p50_ms": round(statistics.median(cpu), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--builds", type=int, default=200)
    args = parser.parse_args()
    print(json.dumps(measure(args.n, args.builds)))


if __name__ == "__main__":
    main()

"""Tiered memory on the embedded store, with real conversation text (LoCoMo turns).

Run: .venv/bin/python bench/memory_bench.py [--vectors]
- durable ingest through LoomMemory.add_tasks into a file store, batched (turns/s);
- single add_task latency, p50 / p99 (every call a committed write, searchable at once);
- L4SemanticSource.collect p50 / p95 at 1k, 10k and 100k stored turns (lexical recall; the
  store's numbers for dense search are in bench/store_bench.py);
- resident memory with 100k turns stored.
Stored turns cycle the LoCoMo text with a counter appended so every turn is distinct.

With ``--vectors``, every stored turn also gets a 384-d vector (the shipped e5 model's size)
and a 128-d one (the static table's, the fast embedder that comes with e5), and the shipped
model and table are loaded, as in a deployment with dense search: resident memory is
then measured with vectors included, and collect runs hybrid search. The turns' vectors come
from `HashingEmbedder(dim=384)` and `HashingEmbedder(dim=128)`, which embed 100k turns in
seconds where the model would take most of an hour here: the same bytes in the store and its
index, so the same memory; but their ranking is not the model's, so only the times and sizes
of that run mean something.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from _common import locomo_turns

from loomctx import LoomMemory, MemoryEmbedding, SQLiteStore, Task, TaskStatus, TiktokenCounter
from loomctx.context import BuildContext, TokenBudget
from loomctx.context.sources import L4SemanticSource
from loomctx.memory.task import USER_MESSAGE
from loomctx.testing import HashingEmbedder

QUERIES = [
    "When did Caroline go to the LGBTQ support group?",
    "What did Melanie paint recently?",
    "Where did Jon open his dance studio?",
    "What books has Caroline been reading?",
    "How many children does Melanie have?",
]


def tasks(turns: list[str], start: int, n: int) -> list[Task]:
    return [
        Task(
            action=USER_MESSAGE,
            source_agent="user",
            parameters={"content": f"{turns[i % len(turns)]} #{i}"},
            status=TaskStatus.COMPLETED,
        )
        for i in range(start, start + n)
    ]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def measure(
    source: L4SemanticSource, budget: TokenBudget, ctx: BuildContext
) -> tuple[list[float], list[object]]:
    """Sorted collect times (after 5 warm-up calls) in one event loop, and the last blocks."""
    samples = []
    blocks: list[object] = []
    for round_ in range(65):
        query = QUERIES[round_ % len(QUERIES)]
        t0 = time.perf_counter()
        blocks = list(await source.collect(query, budget, ctx=ctx))
        samples.append(time.perf_counter() - t0)
    return sorted(samples[5:]), blocks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--vectors", action="store_true", help="384-d and 128-d vectors on every turn"
    )
    vectors = parser.parse_args().vectors
    embedder = HashingEmbedder(dim=384) if vectors else None
    fast = HashingEmbedder(dim=128) if vectors else None
    if vectors:  # the model and table a dense deployment has resident
        from loomctx.embeddings import default_embedder, default_static_embedder

        default_embedder().embed(["load the model"], kind="query")
        default_static_embedder().embed(["load the table"], kind="query")
        print(f"RSS with the shipped model and static table loaded: {rss_mb():,.0f} MB")
    turns = locomo_turns()
    counter = TiktokenCounter()
    ctx = BuildContext(counter=counter)
    budget = TokenBudget(tokens=420, ceiling=7000)
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "memory.db")

        def open_memory(name: str) -> LoomMemory:
            return LoomMemory(
                name,
                store=store,
                counter=counter,
                embedder=embedder,
                embedding=MemoryEmbedding(fast_embedder=fast, in_background=False),
            )

        memory = open_memory("bench")
        source = L4SemanticSource(memory)

        batch = tasks(turns, 0, 5000)
        t0 = time.perf_counter()
        for k in range(0, len(batch), 100):
            memory.add_tasks(batch[k : k + 100])
        rate = len(batch) / (time.perf_counter() - t0)
        print(f"batched ingest (100 per batch): {rate:,.0f} turns/s")

        singles = []
        for task in tasks(turns, 5000, 1000):
            t1 = time.perf_counter()
            memory.add_task(task)
            singles.append(time.perf_counter() - t1)
        singles.sort()
        print(
            f"single add_task: p50 {statistics.median(singles) * 1000:.3f} ms, "
            f"p99 {singles[int(len(singles) * 0.99)] * 1000:.3f} ms"
        )

        stored = 6000
        print(f"\n{'stored':>8} {'collect p50 ms':>15} {'p95 ms':>8} {'blocks':>7} {'RSS MB':>8}")
        for target in (1_000, 10_000, 100_000):
            if stored < target:
                for k in range(stored, target, 1000):  # streamed, as an import reads its file
                    memory.add_tasks(tasks(turns, k, min(1000, target - k)))
                stored = target
            elif target == 1_000:
                memory = open_memory("small")
                memory.add_tasks(tasks(turns, 0, 1000))
                source = L4SemanticSource(memory)
            if memory.background is not None:  # every stored turn gets its vector first
                memory.background.drain()
            samples, blocks = asyncio.run(measure(source, budget, ctx))
            print(
                f"{target:>8} {statistics.median(samples) * 1000:>15.2f} "
                f"{samples[int(len(samples) * 0.95)] * 1000:>8.2f} {len(blocks):>7} "
                f"{rss_mb():>8.0f}"
            )
            if target == 1_000:
                memory = open_memory("bench")
                source = L4SemanticSource(memory)
        store.close()


if __name__ == "__main__":
    main()

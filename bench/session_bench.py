"""Sessions: the event bus in process, Tasks through sessions, and aggregate windows.

Run: .venv/bin/python bench/session_bench.py [--runs 5]
- bus throughput (events/s, published until delivered, 1 and 5 subscribers) and delivery
  latency p50 / p99 at a steady 10k events/s (the measures of bench/bus_bench.py);
- `Session.add_task` through a `ContextController` on a SQLite file: Tasks/s and p50 / p99
  (each one a committed write plus its ``task.added`` event and the promotion trigger);
- `aggregate_context` over 10 sessions of 100 real conversation turns each (LoCoMo), a
  4,000-token budget, per split strategy: p50 / p95 (it builds the 10 windows, then merges);
  and one session's `build_context` for comparison.
Every figure is the median over `--runs` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from _common import locomo_turns
from bus_bench import latency, throughput

from loomctx import SQLiteStore, Task, TaskStatus
from loomctx.session.controller import ContextController

SESSIONS = 10
TURNS = 100
BUDGET = 4000
QUERIES = 40


def turn_task(sid: str, n: int, text: str) -> Task:
    speaker, _, said = text.partition(": ")
    user = n % 2 == 0
    return Task(
        task_id=f"{sid}-{n}",
        source_agent="user" if user else "agent",
        action="user_message" if user else "assistant_message",
        parameters={"content": said, "speaker": speaker},
        status=TaskStatus.COMPLETED,
    )


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def add_tasks(turns: list[str], n: int) -> tuple[float, float, float]:
    """Tasks/s, p50 and p99 ms of `add_task` for `n` turns spread over 10 sessions."""
    with tempfile.TemporaryDirectory() as tmp, SQLiteStore(Path(tmp) / "s.db") as store:
        async with ContextController(store) as controller:
            sessions = [await controller.create_session(f"s{i}") for i in range(SESSIONS)]
            samples = []
            start = time.perf_counter()
            for i in range(n):
                task = turn_task(f"s{i % SESSIONS}", i, turns[i % len(turns)])
                t0 = time.perf_counter()
                await sessions[i % SESSIONS].add_task(task)
                samples.append(time.perf_counter() - t0)
            elapsed = time.perf_counter() - start
    return n / elapsed, pct(samples, 0.5), pct(samples, 0.99)


async def aggregates(turns: list[str]) -> dict[str, tuple[float, float]]:
    """p50 and p95 ms of one session's build and of aggregate windows, per strategy."""
    with tempfile.TemporaryDirectory() as tmp, SQLiteStore(Path(tmp) / "s.db") as store:
        async with ContextController(store) as controller:
            ids = []
            for i in range(SESSIONS):
                session = await controller.create_session(
                    f"s{i}", system_prompt="You answer questions about these conversations."
                )
                chunk = turns[i * TURNS : (i + 1) * TURNS]
                for n, text in enumerate(chunk):
                    await session.add_task(turn_task(session.id, n, text))
                ids.append(session.id)
            queries = [turns[(k * 37) % (SESSIONS * TURNS)] for k in range(QUERIES)]
            out: dict[str, tuple[float, float]] = {}
            one = controller.get_session("s0")
            samples = []
            for q in queries:
                t0 = time.perf_counter()
                await one.build_context(q)
                samples.append(time.perf_counter() - t0)
            out["one session's build_context"] = (pct(samples, 0.5), pct(samples, 0.95))
            for strategy in ("equal", "priority", "relevance"):
                samples = []
                for q in queries:
                    t0 = time.perf_counter()
                    window = await controller.aggregate_context(
                        ids,
                        q,
                        BUDGET,
                        strategy=strategy,  # type: ignore[arg-type]
                    )
                    samples.append(time.perf_counter() - t0)
                    assert window.token_count <= BUDGET
                out[f"aggregate_context, 10 sessions, {strategy}"] = (
                    pct(samples, 0.5),
                    pct(samples, 0.95),
                )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--tasks", type=int, default=5_000)
    args = parser.parse_args()
    turns = locomo_turns()

    print(f"{'bus, in process':<46}{'1 subscriber':>16}{'5 subscribers':>16}")
    rates = [
        statistics.median(asyncio.run(throughput(args.events, s)) for _ in range(args.runs))
        for s in (1, 5)
    ]
    print(f"{'throughput (events/s)':<46}{rates[0]:>16,.0f}{rates[1]:>16,.0f}")
    lat = [[asyncio.run(latency(10_000, 10_000, s)) for _ in range(args.runs)] for s in (1, 5)]
    for i, label in ((0, "p50"), (1, "p99")):
        cells = [statistics.median(r[i] for r in runs) for runs in lat]
        name = f"delivery latency at 10k events/s, {label} (us)"
        print(f"{name:<46}{cells[0]:>16,.1f}{cells[1]:>16,.1f}")

    adds = [asyncio.run(add_tasks(turns, args.tasks)) for _ in range(args.runs)]
    print(
        f"\nSession.add_task, durable, with events: "
        f"{statistics.median(a[0] for a in adds):,.0f} Tasks/s, "
        f"p50 {statistics.median(a[1] for a in adds):.2f} ms, "
        f"p99 {statistics.median(a[2] for a in adds):.2f} ms"
    )

    results = [asyncio.run(aggregates(turns)) for _ in range(args.runs)]
    label = f"windows ({BUDGET:,}-token budget, {QUERIES} queries)"
    print(f"\n{label:<46}{'p50 ms':>16}{'p95 ms':>16}")
    for name in results[0]:
        p50 = statistics.median(r[name][0] for r in results)
        p95 = statistics.median(r[name][1] for r in results)
        print(f"{name:<46}{p50:>16.2f}{p95:>16.2f}")
    print(f"(median of {args.runs} runs)")


if __name__ == "__main__":
    main()

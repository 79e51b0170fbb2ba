"""The in-process event bus: throughput and delivery latency.

Throughput: 100k small events published as fast as one publisher can, to 1 and to 5
subscribers (no-op handlers), timed until `close()` has delivered the last one. Latency: events
published at a steady rate (in bursts every millisecond), measured from just before `publish`
to the start of the handler, p50 and p99. Every figure is the median of 5 runs.
Run: ``python bench/bus_bench.py [--events 100000] [--rate 10000] [--runs 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from loomctx.session.bus import Event, InProcessEventBus


async def throughput(n: int, subscribers: int) -> float:
    """Events per second published and delivered to every subscriber."""
    delivered = 0

    async def handler(event: Event) -> None:
        nonlocal delivered
        delivered += 1

    bus = InProcessEventBus()
    for i in range(subscribers):
        bus.subscribe("bench.*", handler, name=f"s{i}")
    t0 = time.perf_counter()
    for i in range(n):
        await bus.publish("bench.tick", {"i": i})
    await bus.close()
    elapsed = time.perf_counter() - t0
    assert delivered == n * subscribers
    return n / elapsed


async def latency(n: int, rate: int, subscribers: int) -> tuple[float, float]:
    """p50 and p99 delivery latency in microseconds at `rate` events per second."""
    samples: list[float] = []

    async def handler(event: Event) -> None:
        samples.append(time.perf_counter() - event.payload["t"])

    bus = InProcessEventBus()
    for i in range(subscribers):
        bus.subscribe("bench.*", handler, name=f"s{i}")
    per_ms = max(1, rate // 1000)
    start = time.perf_counter()
    sent = 0
    while sent < n:
        for _ in range(min(per_ms, n - sent)):
            await bus.publish("bench.tick", {"t": time.perf_counter()})
            sent += 1
        # Sleep until the next millisecond slot, so the rate is steady rather than a burst.
        await asyncio.sleep(max(0.0, start + sent / rate - time.perf_counter()))
    await bus.close()
    samples.sort()
    return (
        samples[len(samples) // 2] * 1e6,
        samples[min(len(samples) - 1, int(0.99 * len(samples)))] * 1e6,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--latency-events", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    print(f"{'measure':<44}{'1 subscriber':>16}{'5 subscribers':>16}")
    row = []
    for subs in (1, 5):
        runs = [asyncio.run(throughput(args.events, subs)) for _ in range(args.runs)]
        row.append(statistics.median(runs))
    print(f"{f'throughput, {args.events:,} events (events/s)':<44}{row[0]:>16,.0f}{row[1]:>16,.0f}")
    p50s: list[float] = []
    p99s: list[float] = []
    for subs in (1, 5):
        runs2 = [
            asyncio.run(latency(args.latency_events, args.rate, subs)) for _ in range(args.runs)
        ]
        p50s.append(statistics.median(r[0] for r in runs2))
        p99s.append(statistics.median(r[1] for r in runs2))
    label = f"latency at {args.rate:,} events/s"
    print(f"{f'{label}, p50 (us)':<44}{p50s[0]:>16,.1f}{p50s[1]:>16,.1f}")
    print(f"{f'{label}, p99 (us)':<44}{p99s[0]:>16,.1f}{p99s[1]:>16,.1f}")
    print(f"(median of {args.runs} runs)")


if __name__ == "__main__":
    main()

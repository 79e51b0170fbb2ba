"""The event buses: throughput and delivery latency, in process and on Redis Streams.

Throughput: 100k small events published as fast as one publisher can, to 1 and to 5
subscribers (no-op handlers), timed until `close()` has delivered the last one. Latency: events
published at a steady rate (in bursts every millisecond), measured from just before `publish`
to the start of the handler, p50 and p99. Every figure is the median of 5 runs.

Then side by side, the in-process bus (one process) and `RedisStreamsBus` across two
processes (this one publishes, a child process subscribes in a consumer group): events/s
(20k events, until the child has handled the last one) and p50/p99 delivery latency at
1,000 events/s (time from just before `publish` to the handler's start, on the machine's
monotonic clock, which both processes share). Target: p99 <= 20 ms on Redis.
Run: ``python bench/bus_bench.py [--events 100000] [--rate 10000] [--runs 5]
[--redis redis://127.0.0.1:6379/0] [--redis-events 20000] [--redis-runs 3]``
(``--redis ''`` skips the Redis side).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import textwrap
import time
import uuid

from loomctx.session.bus import Event, EventBus, InProcessEventBus


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


def _percentiles(samples: list[float]) -> tuple[float, float]:
    """p50 and p99 of `samples` (seconds) in microseconds."""
    samples = sorted(samples)
    return (
        samples[len(samples) // 2] * 1e6,
        samples[min(len(samples) - 1, int(0.99 * len(samples)))] * 1e6,
    )


async def _publish_steadily(bus: EventBus, n: int, rate: int, *, overlap: bool = False) -> None:
    """Publish `n` events at `rate`/s. With `overlap`, a publish does not wait for the one
    before (a network bus's round trip would otherwise cap the rate below `rate`)."""
    per_ms = max(1, rate // 1000)
    start = time.perf_counter()
    sent = 0
    flying: set[asyncio.Task[Event]] = set()
    while sent < n:
        for _ in range(min(per_ms, n - sent)):
            publish = bus.publish("bench.tick", {"t": time.perf_counter()})
            if overlap:
                task = asyncio.ensure_future(publish)
                flying.add(task)
                task.add_done_callback(flying.discard)
            else:
                await publish
            sent += 1
        # Sleep until the next millisecond slot, so the rate is steady rather than a burst.
        await asyncio.sleep(max(0.0, start + sent / rate - time.perf_counter()))
    if flying:
        await asyncio.gather(*flying)


async def latency(n: int, rate: int, subscribers: int) -> tuple[float, float]:
    """p50 and p99 delivery latency in microseconds at `rate` events per second."""
    samples: list[float] = []

    async def handler(event: Event) -> None:
        samples.append(time.perf_counter() - event.payload["t"])

    bus = InProcessEventBus()
    for i in range(subscribers):
        bus.subscribe("bench.*", handler, name=f"s{i}")
    await _publish_steadily(bus, n, rate)
    await bus.close()
    return _percentiles(samples)


# The subscribing process: handles `n` events in a consumer group, then prints the latencies.
_CHILD = textwrap.dedent(
    """
    import asyncio, json, sys, time
    from loomctx.session.bus.redis import RedisStreamsBus

    async def main(url, prefix, n):
        done = asyncio.Event()
        samples, warm = [], []

        def handler(event):
            if "warmup" in event.payload:  # the consumer reads the stream: measure from now
                if not warm:
                    warm.append(True)
                    print("ready", flush=True)
                return
            samples.append(time.perf_counter() - event.payload["t"])
            if len(samples) == n:
                done.set()

        async with RedisStreamsBus(url, prefix=prefix) as bus:
            bus.subscribe("bench.*", handler, name="bench")
            await done.wait()
            finished = time.perf_counter()
        print(json.dumps({"samples": samples, "finished": finished}), flush=True)

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    """
)


async def redis_across_processes(url: str, n: int, rate: int | None) -> tuple[float, list[float]]:
    """Publish `n` events here (as fast as possible, or at `rate`/s) to a child process that
    subscribes on Redis; returns events/s (first publish to last handled) and the latencies."""
    from loomctx.session.bus.redis import RedisStreamsBus

    prefix = f"loombench:{uuid.uuid4().hex[:8]}"
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _CHILD,
        url,
        prefix,
        str(n),
        stdout=asyncio.subprocess.PIPE,
        limit=1 << 24,  # one line of JSON carries every latency sample
    )
    assert child.stdout is not None
    bus = RedisStreamsBus(url, prefix=prefix)
    try:
        # Warm up until the child's consumer has handled an event (it may still be starting:
        # events published before it subscribed are not its own).
        ready = asyncio.ensure_future(child.stdout.readline())
        async with asyncio.timeout(60):
            while not ready.done():
                # On the measured topic: a wildcard subscriber finds a new topic's stream
                # within `refresh` (1 s), which is not what is measured here.
                await bus.publish("bench.tick", {"warmup": True})
                await asyncio.wait([ready], timeout=0.1)
        assert ready.result().strip() == b"ready"
        t0 = time.perf_counter()
        if rate is None:
            for _ in range(n):
                await bus.publish("bench.tick", {"t": time.perf_counter()})
        else:
            await _publish_steadily(bus, n, rate, overlap=True)
        result = json.loads(await child.stdout.readline())
        await child.wait()
        return n / (result["finished"] - t0), result["samples"]
    finally:
        client = bus._client()
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await bus.close()
        if child.returncode is None:
            child.kill()
            await child.wait()


async def in_process_throughput(n: int) -> float:
    """Events per second to one subscriber, in process (the same measure as the Redis one)."""
    return await throughput(n, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--latency-events", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--redis-events", type=int, default=20_000)
    parser.add_argument("--redis-rate", type=int, default=1_000)
    parser.add_argument("--redis-latency-events", type=int, default=5_000)
    parser.add_argument("--redis-runs", type=int, default=3)
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
    if args.redis:
        side_by_side(args)


def side_by_side(args: argparse.Namespace) -> None:
    """In process vs Redis Streams across two processes, one subscriber, medians of runs."""
    n, rate, m, runs = (
        args.redis_events,
        args.redis_rate,
        args.redis_latency_events,
        args.redis_runs,
    )
    mem_tp = statistics.median(asyncio.run(in_process_throughput(n)) for _ in range(runs))
    mem_lat = [asyncio.run(latency(m, rate, 1)) for _ in range(runs)]
    red_tp = statistics.median(
        asyncio.run(redis_across_processes(args.redis, n, None))[0] for _ in range(runs)
    )
    red_lat = [
        _percentiles(asyncio.run(redis_across_processes(args.redis, m, rate))[1])
        for _ in range(runs)
    ]
    print()
    print(f"{'one subscriber':<44}{'in process':>16}{'Redis, 2 procs':>16}")
    print(f"{f'throughput, {n:,} events (events/s)':<44}{mem_tp:>16,.0f}{red_tp:>16,.0f}")
    for i, name in ((0, "p50"), (1, "p99")):
        mem = statistics.median(r[i] for r in mem_lat) / 1000
        red = statistics.median(r[i] for r in red_lat) / 1000
        label = f"latency at {rate:,} events/s, {name} (ms)"
        print(f"{label:<44}{mem:>16,.3f}{red:>16,.3f}")
    print(f"(median of {runs} runs; Redis at {args.redis}, target p99 <= 20 ms)")


if __name__ == "__main__":
    main()

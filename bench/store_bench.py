"""The SQLite store on real text: durable ingest, single-put latency, lexical and vector
search at 1k / 10k / 100k records in one namespace, and resident memory.

Text is LoCoMo dialogue turns, cycled (with distinct keys) to reach 100k records; vectors are
random unit vectors of dimension 384. Run: ``python bench/store_bench.py [--max 100000]``.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sqlite3
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _common import locomo_turns, median_ms, p95_ms, timed

from loomctx.stores._rows import RowMap
from loomctx.stores.base import PutVectors, Record, Scan, Search, VectorSearch
from loomctx.stores.sqlite import SQLiteStore
from loomctx.text import terms

NS = ("bench", "agent", "archive")
DIM = 384
MODEL = "bench-384"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def record(i: int, text: str) -> Record:
    return Record(namespace=NS, key=f"turn-{i}", kind="turn", text=text, data={"i": i})


def ingest(turns: list[str], tmp: Path, durability: str, n: int, size: int) -> float:
    """Turns per second for `n` turns written in batches of `size` into a fresh file store,
    its lexical index live (every turn searchable when its batch returns)."""
    with SQLiteStore(tmp / f"ingest-{durability}-{size}.db", durability=durability) as store:  # type: ignore[arg-type]
        store.search(NS, "warm up")
        t0 = time.perf_counter()
        for start in range(0, n, size):
            store.put_many([record(i, turns[i % len(turns)]) for i in range(start, start + size)])
        return n / (time.perf_counter() - t0)


def single_puts(turns: list[str], tmp: Path, n: int) -> list[float]:
    """Seconds per `put` of one turn, with the lexical index live (searchable at once)."""
    with SQLiteStore(tmp / "single.db") as store:
        store.search(NS, "warm up")
        out = []
        for i in range(n):
            rec = record(i, turns[i % len(turns)])
            t0 = time.perf_counter()
            store.put(rec)
            out.append(time.perf_counter() - t0)
        return out


def queries(turns: list[str], count: int) -> list[str]:
    rnd = random.Random(7)
    out: list[str] = []
    while len(out) < count:
        text = rnd.choice(turns)
        if 5 <= len(set(terms(text))) <= 10:
            out.append(text)
    return out


def p50_of(run: Callable[[int], object], repeat: int = 200) -> tuple[float, float]:
    """Median and p95 in ms of `run(i)` for i = 0, 1, ... (after two warm-up calls)."""
    counter = iter(range(10**9))
    samples = timed(lambda: run(next(counter)), repeat=repeat)
    return median_ms(samples), p95_ms(samples)


def fts5_baseline(store: SQLiteStore, qs: list[str]) -> tuple[float, float]:
    """What the lexical index replaced: FTS5 over the same terms, an OR query ranked by bm25."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE f USING fts5 (terms)")
        assert store._conn is not None
        rows = store._conn.execute("SELECT id, text FROM records WHERE text != ''")
        conn.executemany(
            "INSERT INTO f (rowid, terms) VALUES (?, ?)",
            ((rid, " ".join(terms(text))) for rid, text in rows),
        )
        matches = [" OR ".join(f'"{t}"' for t in dict.fromkeys(terms(q))) for q in qs]
        sql = "SELECT rowid FROM f WHERE f MATCH ? ORDER BY rank LIMIT 10"
        return p50_of(lambda i: conn.execute(sql, (matches[i % len(matches)],)).fetchall(), 50)
    finally:
        conn.close()


def row_maps(n: int) -> tuple[float, float, float, float]:
    """Bytes per entry and ns per `get` of the id -> row map the indexes keep, for `n`
    SQLite-like ids (increasing, with gaps): a dict (what they kept before) and `RowMap`."""
    ids = np.cumsum(np.random.default_rng(1).integers(1, 4, n)).astype(np.int64)
    probes = [int(i) for i in np.random.default_rng(2).choice(ids, 100_000)]
    sizes, speeds = [], []
    for build in (
        lambda: {int(record_id): row for row, record_id in enumerate(ids)},
        lambda: RowMap(ids),
    ):
        tracemalloc.start()
        rows = build()
        sizes.append(tracemalloc.get_traced_memory()[0] / n)
        tracemalloc.stop()
        get = rows.get
        t0 = time.perf_counter()
        for record_id in probes:
            get(record_id)
        speeds.append((time.perf_counter() - t0) / len(probes) * 1e9)
        del rows, get
    return sizes[0], sizes[1], speeds[0], speeds[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max", type=int, default=100_000, help="largest store size")
    args = parser.parse_args()
    turns = locomo_turns()
    qs = queries(turns, 200)
    rng = np.random.default_rng(0)
    rows: list[tuple[str, str, str]] = []

    def row(metric: str, value: str, target: str = "") -> None:
        rows.append((metric, value, target))
        print(f"  {metric}: {value}", flush=True)

    dict_bytes, map_bytes, dict_ns, map_ns = row_maps(args.max)
    row(
        f"id -> row map of {args.max:,}: dict / RowMap",
        f"{dict_bytes:.0f} / {map_bytes:.0f} B per id, get {dict_ns:.0f} / {map_ns:.0f} ns",
    )
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for durability in ("normal", "full"):
            for size in (1, 100, 1000):
                n = 2_000 if size == 1 else 20_000
                rate = ingest(turns, tmp, durability, n, size)
                row(f"ingest, batches of {size}, {durability}", f"{rate:,.0f} turns/s", ">= 2,000")
        lat = sorted(single_puts(turns, tmp, 3_000))
        p99 = lat[int(0.99 * len(lat))] * 1000
        row(
            "single put p50 / p99 (indexes live)",
            f"{median_ms(lat):.3f} / {p99:.3f} ms",
            "p99 <= 5 ms",
        )

        path = tmp / "search.db"
        size = 0
        vq = rng.standard_normal((200, DIM), dtype=np.float32)
        vq /= np.linalg.norm(vq, axis=1, keepdims=True)
        with SQLiteStore(path) as store:
            for target in (1_000, 10_000, 100_000):
                if target > args.max:
                    break
                t0 = time.perf_counter()
                for start in range(size, target, 1_000):
                    batch = [record(i, turns[i % len(turns)]) for i in range(start, start + 1_000)]
                    stored = store.put_many(batch)
                    vectors = rng.standard_normal((len(stored), DIM), dtype=np.float32)
                    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                    items = [(r.namespace, r.key, r.seq) for r in stored]
                    store.batch([PutVectors(model=MODEL, items=items, vectors=vectors)])
                if size:
                    rate = (target - size) / (time.perf_counter() - t0)
                    row(
                        f"ingest + {DIM}-d vectors, indexes live, to {target:,}",
                        f"{rate:,.0f} turns/s",
                        ">= 2,000",
                    )
                size = target
                lexical = p50_of(lambda i: store.batch([Search(prefix=NS, query=qs[i % len(qs)])]))
                row(
                    f"lexical search p50 / p95, {target:,} records",
                    f"{lexical[0]:.2f} / {lexical[1]:.2f} ms",
                    "<= 3 ms at 100k",
                )
                newest = p50_of(
                    lambda i: store.batch([Scan(prefix=NS, newest_first=True, limit=50)])
                )
                row(
                    f"scan newest 50 p50 / p95, {target:,} records",
                    f"{newest[0]:.2f} / {newest[1]:.2f} ms",
                )
                vector = p50_of(
                    lambda i: store.batch(
                        [VectorSearch(prefix=NS, vector=vq[i % len(vq)], model=MODEL)]
                    )
                )
                row(
                    f"vector search p50 / p95, {target:,} x {DIM}",
                    f"{vector[0]:.2f} / {vector[1]:.2f} ms",
                    "<= 3 ms at 100k",
                )
            row(f"RSS, {size:,} records and vectors loaded", f"{rss_mb():.0f} MB", "<= 500 MB")
            recall, exact = vector_recall(store, rng)
            row(f"exact numpy top-10 p50, {size:,} x {DIM} (baseline)", f"{exact:.2f} ms")
            row(f"vector recall@10 vs exact, {size:,} random", f"{recall:.2f}")
            fts = fts5_baseline(store, qs)
            row(
                f"FTS5 bm25 OR query p50 / p95, {size:,} (baseline)",
                f"{fts[0]:.2f} / {fts[1]:.2f} ms",
            )
            t0 = time.perf_counter()
        row("close (saves both indexes)", f"{time.perf_counter() - t0:.2f} s")
        for label, remove in (("from side files", False), ("rebuilt from SQLite", True)):
            if remove:
                shutil.rmtree(tmp / "search.db.index")
            with SQLiteStore(path) as store:
                t0 = time.perf_counter()
                store.batch([Search(prefix=NS, query=qs[0])])
                lexical_s = time.perf_counter() - t0
                t0 = time.perf_counter()
                store.batch([VectorSearch(prefix=NS, vector=vq[0], model=MODEL)])
                vector_s = time.perf_counter() - t0
            row(
                f"first search after reopen, {label}",
                f"lexical {lexical_s:.2f} s, vector {vector_s:.2f} s",
            )

    width = max(len(r[0]) for r in rows)
    print()
    print(f"{'metric':<{width}}  {'measured':<28}  target")
    for metric, value, target in rows:
        print(f"{metric:<{width}}  {value:<28}  {target}")


def vector_recall(store: SQLiteStore, rng: np.random.Generator) -> tuple[float, float]:
    """Share of the exact top 10 (brute force over the index's own matrix) that search
    finds, and the brute force's median time in ms."""
    index = store._vectors[MODEL]
    n = index.count
    matrix, ids = index._units(0, n), index._ids[:n]
    found = 0.0
    exact_times = []
    for _ in range(50):
        q = rng.standard_normal(DIM, dtype=np.float32)
        q /= np.linalg.norm(q)
        t0 = time.perf_counter()
        top = ids[np.argpartition(-(matrix @ q), 10)[:10]]
        exact_times.append(time.perf_counter() - t0)
        hits = store.batch([VectorSearch(prefix=NS, vector=q, model=MODEL)])[0]
        expected = {key for (key,) in _keys(store, top)}
        found += len({h.record.key for h in hits} & expected) / 10
    return found / 50, median_ms(exact_times)


def _keys(store: SQLiteStore, ids: np.ndarray) -> list[tuple[str]]:
    assert store._conn is not None
    marks = ",".join("?" * len(ids))
    return store._conn.execute(
        f"SELECT key FROM records WHERE id IN ({marks})", [int(i) for i in ids]
    ).fetchall()


if __name__ == "__main__":
    main()

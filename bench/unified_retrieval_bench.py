"""Unified retrieval (issue 5): `UnifiedRetrievalSource.collect` over L4 memory and a knowledge
base, at 10k and 100k stored turns, with a 2,000- and an 8,000-token ceiling.

Run: .venv/bin/python bench/unified_retrieval_bench.py [--sizes 10000 100000] [--queries 100]
     [--fixture DIR] [--profile N] [--no-e5]

- Memory: LoCoMo turns cycled to 10k / 100k tasks (a counter appended so every turn is
  distinct) in a `LoomMemory` on a SQLite file; a 1,000-document `KnowledgeBase` (20-40
  consecutive LoCoMo turns each, under headings) on a second SQLite file.
- Both embedded with the model-free `HashingEmbedder` (384-d, the e5 model's dimension), so
  the fixture builds in a minute: the dense half costs what it costs with any 384-d model,
  but the vectors are lexical, not semantic.
- The source as an agent gets it by default: rewriting on (a second recall with the
  rewritten query when L1 has tasks and the query has at most 4 content terms: 36% of
  these questions; a row with it off), `fill` on, the real `TiktokenCounter`. The
  grant equals the ceiling, so `fill` asks for the most: 62 candidates per source at 2,000
  tokens, 250 at 8,000 (the rewritten query: 20, the recall limit).
- Every timed query is new to the process (LoCoMo questions, a disjoint set per row), its
  vector and its rewrite's put in the embedder's cache before timing: the timings exclude
  the query embedding, reported on its own for the default embedder (multilingual-e5-small,
  uncached) and the hashing one. The records they find are not new: the store keeps the
  last 16,384 search hits decoded (`SQLiteStore(record_cache=...)`), warm from the rows
  before, as in a process that has answered queries before. "again" times the same
  queries once more, as the agent loop re-retrieves before every model call.
- Stage columns time `LoomMemory.search` and `KnowledgeBase.search_sync` alone at the limit
  the source asks for; `--profile N` runs cProfile over N more new collects at the largest
  size, 2,000-token ceiling (worker threads run inline, so their time is seen), top items.

`--fixture DIR` keeps the SQLite files (and their saved indexes) in DIR and reuses them, so
two versions of the code can be timed on the same data (`PYTHONPATH=<src> python ...`).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _common import LOCOMO, locomo_turns, median_ms

from loomctx import MemoryEmbedding
from loomctx.context.block import BuildContext, TokenBudget
from loomctx.context.sources.retrieval import TOKENS_PER_CANDIDATE, UnifiedRetrievalSource
from loomctx.embeddings import default_embedder
from loomctx.knowledge import KnowledgeBase
from loomctx.memory.core import LoomMemory
from loomctx.memory.enrichment import BackgroundEmbedder
from loomctx.memory.task import USER_MESSAGE, Task, TaskStatus, task_text
from loomctx.stores.sqlite import SQLiteStore
from loomctx.testing.embedders import HashingEmbedder
from loomctx.tokens import TiktokenCounter

DIM = 384
DOCS = 1_000
CEILINGS = (2_000, 8_000)


def p90_ms(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))] * 1000


def questions(n: int) -> list[str]:
    data = json.loads(LOCOMO.read_text(encoding="utf-8"))
    return [qa["question"] for conv in data for qa in conv["qa"]][:n]


def tasks(turns: list[str], start: int, stop: int) -> list[Task]:
    return [
        Task(
            action=USER_MESSAGE,
            source_agent="user",
            parameters={"content": f"{turns[i % len(turns)]} #{i}"},
            status=TaskStatus.COMPLETED,
        )
        for i in range(start, stop)
    ]


def documents(turns: list[str]) -> list[str]:
    """`DOCS` Markdown documents of 20-40 consecutive turns, a sub-heading every 8 turns."""
    out = []
    for i in range(DOCS):
        start, length = (i * 37) % len(turns), 20 + i % 21
        lines = [f"# Conversation notes {i}"]
        for k in range(length):
            if k % 8 == 0:
                lines.append(f"## Part {k // 8 + 1}")
            lines.append(turns[(start + k) % len(turns)])
        out.append("\n\n".join(lines))
    return out


def open_memory(
    folder: Path, size: int, turns: list[str], embedder: HashingEmbedder, counter: TiktokenCounter
) -> LoomMemory:
    """A memory of `size` turns in ``memory-<size>.db`` under `folder`, filled if new."""
    store = SQLiteStore(folder / f"memory-{size}.db")
    memory = LoomMemory(
        "bench",
        store=store,
        embedder=embedder,
        counter=counter,
        embedding=MemoryEmbedding(in_background=False),
    )
    have = len(memory.get_l1_tasks(limit=memory.max_l1_size))
    if have == 0:
        t0 = time.perf_counter()
        for start in range(0, size, 2_000):
            memory.add_tasks(tasks(turns, start, min(size, start + 2_000)))
        added = time.perf_counter() - t0
        t0 = time.perf_counter()
        BackgroundEmbedder(store, embedder, prefix=memory.namespace, batch_size=4_096).drain()
        print(
            f"  built memory-{size}: add_tasks {added:.1f} s, "
            f"hashing embeddings {time.perf_counter() - t0:.1f} s"
        )
    return memory


def open_knowledge(
    folder: Path, turns: list[str], embedder: HashingEmbedder, counter: TiktokenCounter
) -> KnowledgeBase:
    store = SQLiteStore(folder / "knowledge.db")
    kb = KnowledgeBase("handbook", store, embedder=embedder, counter=counter)
    if not kb.documents():
        t0 = time.perf_counter()
        for i, text in enumerate(documents(turns)):
            kb.add_text(text, document_id=f"doc{i:04}.md")
        print(f"  built the knowledge base: {time.perf_counter() - t0:.1f} s")
    return kb


def cache_query_vectors(source: UnifiedRetrievalSource, queries: list[str]) -> None:
    """Embed each query, and its rewrite as the source makes it, into the embedder's cache."""
    memory = source.memory
    assert memory is not None
    assert memory.embedder is not None
    embedder = memory.embedder
    recent = [task_text(t) for t in memory.get_l1_tasks(limit=memory.max_l1_size)]
    for q in queries:
        embedder.embed([q], kind="query")
        if source.rewriter is not None:
            embedder.embed([source.rewriter.rewrite(q, recent)], kind="query")


async def collect_times(
    source: UnifiedRetrievalSource, queries: list[str], ceiling: int, counter: TiktokenCounter
) -> tuple[list[float], list[float], int, int]:
    """Seconds per collect over `queries`, each new to the source (its vector cached), then
    the same again (re-retrieval, as the agent loop does before every model call); and the
    last call's blocks and tokens."""
    budget = TokenBudget(tokens=ceiling, ceiling=ceiling)
    ctx = BuildContext(counter=counter)
    cache_query_vectors(source, queries)
    passes: list[list[float]] = [[], []]
    blocks: list[Any] = []
    for samples in passes:
        for q in queries:
            t0 = time.perf_counter()
            blocks = await source.collect(q, budget, ctx=ctx)
            samples.append(time.perf_counter() - t0)
    return passes[0], passes[1], len(blocks), sum(b.token_count for b in blocks)


def stage_times(fn: Callable[[str], object], queries: list[str]) -> list[float]:
    for q in queries[:5]:
        fn(q)
    samples = []
    for q in queries:
        t0 = time.perf_counter()
        fn(q)
        samples.append(time.perf_counter() - t0)
    return samples


@contextmanager
def inline_threads() -> Iterator[None]:
    """`asyncio.to_thread` runs its function in the calling thread (cProfile sees one thread)."""
    original = asyncio.to_thread

    async def inline(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    asyncio.to_thread = inline  # type: ignore[assignment]
    try:
        yield
    finally:
        asyncio.to_thread = original


def profile(
    source: UnifiedRetrievalSource, queries: list[str], n: int, counter: TiktokenCounter
) -> None:
    budget = TokenBudget(tokens=CEILINGS[0], ceiling=CEILINGS[0])
    ctx = BuildContext(counter=counter)

    async def run() -> None:
        for q in queries[:n]:
            await source.collect(q, budget, ctx=ctx)

    cache_query_vectors(source, queries[:n])
    with inline_threads():
        profiler = cProfile.Profile()
        profiler.enable()
        asyncio.run(run())
        profiler.disable()
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats(order).print_stats(22)
        text = out.getvalue()
        print(f"\ncProfile, {n} collects, ceiling {CEILINGS[0]:,}, by {order}:")
        print(text[text.index("   ncalls") :].rstrip())


def query_embedding(queries: list[str], use_e5: bool) -> None:
    print(f"\n{'query embedding (uncached, distinct texts)':<44} {'p50 ms':>8} {'p90 ms':>8}")
    embedders: list[tuple[str, Any]] = [("hashing-384", HashingEmbedder(DIM))]
    if use_e5:
        e5 = default_embedder()
        e5.embed(["warm up"], kind="query")
        embedders.insert(0, ("multilingual-e5-small (default)", e5))
    for label, embedder in embedders:
        samples = stage_times(
            lambda q, e=embedder: e.embed([f"{q} #{time.perf_counter_ns()}"], kind="query"),
            queries,
        )
        print(f"{label:<44} {median_ms(samples):>8.2f} {p90_ms(samples):>8.2f}")


def measure(
    source: UnifiedRetrievalSource,
    kb: KnowledgeBase,
    queries: list[str],
    ceiling: int,
    counter: TiktokenCounter,
) -> tuple[list[float], list[float], int, int, str, str]:
    """`collect_times`, and with rewriting on the p50 of each search alone (ms, as text)."""
    new, again, blocks, tokens = asyncio.run(collect_times(source, queries, ceiling, counter))
    if source.rewriter is None or source.memory is None:
        return new, again, blocks, tokens, "", ""
    memory = source.memory
    limit = max(source.recall_limit, ceiling // TOKENS_PER_CANDIDATE)
    mem = stage_times(lambda q: memory.search(q, limit=limit), queries)
    know = stage_times(lambda q: kb.search_sync(q, limit=limit), queries)
    return new, again, blocks, tokens, f"{median_ms(mem):.2f}", f"{median_ms(know):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=100, help="per size and ceiling")
    parser.add_argument("--fixture", type=Path, help="keep and reuse the SQLite files here")
    parser.add_argument("--profile", type=int, default=0, metavar="N")
    parser.add_argument("--no-e5", action="store_true", help="skip the e5 query embedding")
    args = parser.parse_args()
    turns = locomo_turns()
    runs = [(size, ceiling, rewrite) for size in args.sizes for ceiling in CEILINGS
            for rewrite in (True, False) if rewrite or ceiling == CEILINGS[0]]  # fmt: skip
    # Disjoint query sets (one per run, each across all conversations), and a few more to
    # load the indexes: every timed query is new to the process.
    asked = questions(5 + len(runs) * args.queries + args.profile)
    warm, fresh = asked[:5], asked[len(asked) - args.profile :]
    pool = asked[5 : len(asked) - args.profile]
    counter = TiktokenCounter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.fixture or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        embedder = HashingEmbedder(DIM, query_cache_size=1 << 16)
        print(
            f"fixture in {folder}: LoCoMo turns, {DOCS:,} documents; vectors from "
            f"HashingEmbedder({DIM}) (model-free, for a fast build); query vectors cached"
        )
        kb = open_knowledge(folder, turns, embedder, counter)
        rows = []
        source = None
        for size in args.sizes:
            memory = open_memory(folder, size, turns, embedder, counter)
            for i, (run_size, ceiling, rewrite) in enumerate(runs):
                if run_size != size:
                    continue
                source = UnifiedRetrievalSource(memory, [kb], rewrite=rewrite)
                asyncio.run(collect_times(source, warm, ceiling, counter))  # loads the indexes
                measured = measure(source, kb, pool[i :: len(runs)], ceiling, counter)
                rows.append((size, ceiling, rewrite, *measured))
            if size != args.sizes[-1]:
                memory.store.close()
        print(
            f"\n{'stored':>8} {'ceiling':>8} {'rewrite':>8} {'collect p50':>12} {'p90':>7} "
            f"{'again p50':>10} {'blocks':>7} {'tokens':>7} {'memory.search':>14} "
            f"{'kb.search':>10}"
        )
        for size, ceiling, rewrite, new, again, blocks, tokens, mem_ms, kb_ms in rows:
            print(
                f"{size:>8,} {ceiling:>8,} {'on' if rewrite else 'off':>8} "
                f"{median_ms(new):>12.2f} {p90_ms(new):>7.2f} {median_ms(again):>10.2f} "
                f"{blocks:>7} {tokens:>7,} {mem_ms:>14} {kb_ms:>10}"
            )
        print(
            f"(ms, {args.queries} queries per row, each new; 'again': the same queries once "
            "more; stages: p50 of one call at the source's limit)"
        )
        if args.profile and source is not None:
            profile(UnifiedRetrievalSource(source.memory, [kb]), fresh, args.profile, counter)
        query_embedding(pool[: args.queries], not args.no_e5)
        if source is not None and source.memory is not None:
            source.memory.store.close()
        kb.store.close()


if __name__ == "__main__":
    main()

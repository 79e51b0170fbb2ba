"""Loom on one size of the workload, measured in the process that calls `measure_size`
(`loomctx bench perf` calls it in a fresh subprocess per size, so resident memory is the
size's own).

Two strategies, each built by the window recipe with its default settings (`PERF_SETTINGS`,
those an `Agent` and the proxy use) and the window and reserve of `SizeConfig` (8,000 tokens
with 1,000 reserved unless `loomctx bench perf --window --reserve` says otherwise):

- `orchestrator`: `ContextOrchestrator` over the history (`HistorySource`), the knowledge base
  (`UnifiedRetrievalSource`), the tools, the system prompt and the user's turn;
- `memory`: the same, with the history recorded in a `LoomMemory` on a SQLite file and read
  through `L1RecentSource`, `L2ImportantSource` and `UnifiedRetrievalSource` (the archive,
  L4, and the knowledge base), as `Agent` builds it.

For each: `builds` timed builds rotating over the queries, whose vectors are embedded before
timing (the query embedding is measured on its own, uncached), then `calls` calls of the
conversation going on (one exchange added per call) for the tokens a provider bills under
prompt caching; every window of both phases is scored (`score.score_window`). Also: ingest
throughput into the memory, promotion, how many records have vectors when builds start, and
resident memory twice: this process's peak, which also holds the workload (N messages, their
tasks) and the orchestrator path's history, and that of a serving process (`serving`): a fresh
interpreter that opens the memory's SQLite file and the knowledge base, as a worker would,
and builds windows from them; the "RSS with 100k stored turns" target is judged on it.
"""

from __future__ import annotations

import asyncio
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from loomctx.context.block import ContextSource
from loomctx.context.orchestrator import ContextOrchestrator, LayoutState, repeated_prefix_tokens
from loomctx.context.recipe import (
    WindowSettings,
    memory_sources,
    window_orchestrator,
    window_sources,
)
from loomctx.context.sources import HistorySource, UnifiedRetrievalSource
from loomctx.embeddings import Embedder, default_embedder
from loomctx.errors import ConfigError
from loomctx.evaluation.cost import HEADLINE
from loomctx.evaluation.perf._spawn import in_subprocess
from loomctx.evaluation.perf._workload import (
    SYSTEM,
    TOOLS,
    Workload,
    build_workload,
    load_source,
)
from loomctx.evaluation.perf.score import (
    DocumentProbe,
    WindowScore,
    percentile,
    score_window,
    summarize,
)
from loomctx.knowledge import KnowledgeBase
from loomctx.memory.core import LoomMemory, shipped_fast_embedder
from loomctx.memory.settings import MemoryEmbedding
from loomctx.memory.task import tasks_from_messages
from loomctx.messages import Message
from loomctx.stores.base import Unembedded
from loomctx.stores.sqlite import SQLiteStore
from loomctx.tokens import TOKENS_REPLY_PRIMING, TiktokenCounter, TokenCounter

__all__ = ["SizeConfig", "measure_size", "peak_rss_mb", "serving"]

EmbedderChoice = Literal["default", "none"]
_INGEST_BATCH = 1000
_SERVE_TIMEOUT = 600.0  # seconds: opening a 100k-turn file and building takes well under one


@dataclass(frozen=True, slots=True, kw_only=True)
class SizeConfig:
    """What one size's measurement needs; plain values, so it crosses a process boundary."""

    data: str
    n: int
    builds: int = 50
    calls: int = 20
    documents: int = 200
    embedder: EmbedderChoice = "default"
    embed_wait: float = 60.0
    window: int = 8000
    reserve: int = 1000


def peak_rss_mb() -> float:
    """This process's peak resident memory, in MB.

    On Linux, the high-water mark of its own address space (``VmHWM``): `getrusage`'s
    ``ru_maxrss`` survives `exec`, so a process started by a large one reports its parent's
    size at the fork (a serving process started by the 100k measurement said 712 MB, the
    parent's, with 283 MB resident). Elsewhere ``ru_maxrss`` (macOS reports bytes)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)  # kB
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


class _Judge:
    def __init__(self, workload: Workload, counter: TokenCounter) -> None:
        self.workload = workload
        self.counter = counter
        self.probe = DocumentProbe(workload.documents)

    def __call__(self, window: Mapping[str, Any], query: str) -> WindowScore:
        return score_window(
            window,
            counter=self.counter,
            available=self.workload.available,
            system=SYSTEM,
            query=query,
            documents=self.probe,
        )


PERF_SETTINGS = WindowSettings()
"""The window recipe's settings here: its defaults, those an `Agent` and the proxy build
with (the dynamic tail capped, `DEFAULT_MAX_DYNAMIC`; history filling its room from the
store, `DEFAULT_HISTORY_DEPTH`), so the figures describe the window users get."""


def _orchestrator(
    sources: list[ContextSource], workload: Workload, counter: TokenCounter
) -> ContextOrchestrator:
    return window_orchestrator(
        window_sources(SYSTEM, tools=TOOLS, memory=sources),
        counter=counter,
        window=workload.window,
        settings=PERF_SETTINGS,
        output_reserve_ratio=workload.reserve / workload.window,
        state=LayoutState(),
    )


def _history_orchestrator(
    history: HistorySource, kb: KnowledgeBase, workload: Workload, counter: TokenCounter
) -> ContextOrchestrator:
    """The `orchestrator` strategy: the history as given, and the knowledge base."""
    return _orchestrator([history, UnifiedRetrievalSource(knowledge_bases=[kb])], workload, counter)


def _memory_orchestrator(
    memory: LoomMemory, kb: KnowledgeBase, workload: Workload, counter: TokenCounter
) -> ContextOrchestrator:
    """The `memory` strategy: the memory's tiers and archive, and the knowledge base."""
    return _orchestrator(
        list(memory_sources(memory, [kb], settings=PERF_SETTINGS)), workload, counter
    )


def _knowledge_base(
    store: SQLiteStore, workload: Workload, embedder: Embedder | None, counter: TokenCounter
) -> KnowledgeBase:
    # Embedded while writing, as before fast vectors: no background thread beside the timing.
    kb = KnowledgeBase("notes", store, embedder=embedder, counter=counter, fast_embedder=None)
    for i, doc in enumerate(workload.documents):
        kb.add_text(doc, document_id=f"note-{i:04}")
    return kb


async def _latency(
    orch: ContextOrchestrator, workload: Workload, judge: _Judge, builds: int
) -> dict[str, Any]:
    for query in workload.queries:  # warm: each query's vector is cached from here on
        await orch.build(query=query)
    samples: list[float] = []
    scores: list[WindowScore] = []
    for i in range(builds):
        query = workload.queries[i % len(workload.queries)]
        start = time.perf_counter()
        window = await orch.build(query=query)
        samples.append((time.perf_counter() - start) * 1000)
        scores.append(judge(window.to_openai(), query))
    return summarize(samples, scores, available=workload.available)


async def _calls(
    orch: ContextOrchestrator,
    workload: Workload,
    judge: _Judge,
    record: Callable[[Message, Message], None],
) -> tuple[dict[str, Any], list[WindowScore]]:
    """The conversation going on: a build per exchange, then the exchange recorded."""
    previous: tuple[Sequence[Message], Sequence[Mapping[str, Any]]] | None = None
    prompts: list[tuple[int, int]] = []
    scores: list[WindowScore] = []
    for asked, said in workload.continuation:
        window = await orch.build(query=asked)
        cached = repeated_prefix_tokens(judge.counter, previous, window.messages, window.tools)
        score = judge(window.to_openai(), asked)
        prompts.append((score.tokens, cached))
        scores.append(score)
        previous = (window.messages, window.tools)
        record(Message.user(asked), Message.assistant(said))
    return _billed(prompts), scores


def _billed(prompts: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """Per call, over the calls after the first (whose cache is cold for every strategy):
    mean prompt tokens, the cached share and billed tokens per provider (`cost.HEADLINE`, as
    a client marks a prompt: one breakpoint at its end)."""
    warm = list(prompts[1:]) or list(prompts)
    prompt = sum(p for p, _ in warm)
    cached = sum(c for _, c in warm)
    out: dict[str, Any] = {
        "calls": len(prompts),
        "mean_prompt_tokens": round(prompt / len(warm), 1) if warm else 0.0,
        "cached_share": round(cached / prompt, 4) if prompt else 0.0,
    }
    for provider, pricing in HEADLINE.items():
        billed = sum(pricing.billed_marked_at_end(prompt=p, cached=c) for p, c in warm)
        out[f"billed_{provider}"] = round(billed / len(warm), 1) if warm else 0.0
    return out


def _whole_history(workload: Workload, counter: TokenCounter) -> dict[str, Any]:
    """Sending the system prompt, the tools and every earlier message on every call: the
    prompt grows by the last exchange, all of the previous one is a cached prefix."""
    tools = list(TOOLS)
    base = counter.count_messages([Message.system(SYSTEM), *workload.history], tools=tools)
    prompts: list[tuple[int, int]] = []
    previous = 0
    over = 0
    for asked, said in workload.continuation:
        user = counter.count_messages([Message.user(asked)]) - TOKENS_REPLY_PRIMING
        tokens = base + user
        over += tokens > workload.available
        prompts.append((tokens, previous))
        previous = tokens
        base = tokens + counter.count_messages([Message.assistant(said)]) - TOKENS_REPLY_PRIMING
    out = _billed(prompts)
    out["over_budget"] = over
    out["first_call_tokens"] = prompts[0][0] if prompts else 0
    return out


def _with_calls(
    latency: dict[str, Any], billed: dict[str, Any], scores: list[WindowScore], available: int
) -> dict[str, Any]:
    """The latency summary, with the calls' windows counted in its violations too."""
    calls = summarize([], scores, available=available)
    out = dict(latency)
    for key in ("over_budget", "split_tool_units", "windows", "system_present", "query_present"):
        out[key] += calls[key]
    out["calls"] = {
        **billed,
        "utilization": calls["utilization"],
        "over_budget": calls["over_budget"],
    }
    return out


def _unembedded(store: SQLiteStore, model: str, memory: LoomMemory, *, limit: int = 10**9) -> int:
    """How many of the memory's records lack a vector of `model` (counting up to `limit`)."""
    op = Unembedded(model=model, prefix=memory.namespace, limit=limit, exact=True)
    return len(store.batch([op])[0])


def _wait_for_vectors(
    memory: LoomMemory, store: SQLiteStore, embedder: Embedder, seconds: float
) -> dict[str, Any]:
    """Let the background embedder work up to `seconds`, then stop it (builds are timed
    without it competing for the cores) and count what has vectors: the `embedder`'s, and
    with the memory's `fast_embedder` (on by default with the shipped e5), the fast ones,
    which come first, with the time by which every record had one."""
    start = time.perf_counter()
    background = memory.background
    assert background is not None  # an embedder was given
    first = background.first
    first_done: float | None = None
    while time.perf_counter() - start < seconds:
        time.sleep(0.5)
        if (
            first is not None
            and first_done is None
            and not _unembedded(store, first.model, memory, limit=1)
        ):
            first_done = time.perf_counter() - start
        if not _unembedded(store, embedder.name, memory, limit=1):
            break
    background.stop()
    out = {
        "waited_s": round(time.perf_counter() - start, 1),
        **_coverage(store, background.embedder, background.embedded, background.seconds, memory),
    }
    if first is not None:
        out["fast"] = {
            "model": first.model,
            "all_after_s": None if first_done is None else round(first_done, 1),
            **_coverage(store, first.embedder, first.embedded, first.seconds, memory),
        }
    return out


def _coverage(
    store: SQLiteStore, embedder: Embedder, embedded: int, seconds: float, memory: LoomMemory
) -> dict[str, Any]:
    missing = _unembedded(store, embedder.name, memory)
    total = embedded + missing
    return {
        "embedded": embedded,
        "without_vectors": missing,
        "coverage": round(embedded / total, 4) if total else 1.0,
        "texts_per_s": round(embedded / seconds, 1) if seconds else None,
    }


def _query_embedding(embedder: Embedder, queries: Sequence[str]) -> dict[str, Any]:
    """Uncached query embedding, p50/p95 ms: alone, then while another process keeps one
    core busy (the target: <= 25 ms with the build "also while the other core is busy"; an
    engine that spins its threads took seconds then)."""
    alone = _embed_queries(embedder, queries, tag="a")
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)  # let it take its core
        loaded = _embed_queries(embedder, queries, tag="b")
    finally:
        busy.kill()
        busy.wait()
    return {
        "p50_ms": round(percentile(alone, 50), 3),
        "p95_ms": round(percentile(alone, 95), 3),
        "busy_p50_ms": round(percentile(loaded, 50), 3),
        "busy_p95_ms": round(percentile(loaded, 95), 3),
        "uncached": True,
    }


def _embed_queries(embedder: Embedder, queries: Sequence[str], *, tag: str) -> list[float]:
    samples = []
    for i, q in enumerate([*queries, *queries][:20]):
        start = time.perf_counter()
        embedder.embed([f"{q} ({tag}{i})"], kind="query")  # distinct: never from the cache
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def measure_size(config: SizeConfig) -> dict[str, Any]:
    """Loom on the workload of size `config.n` (see the module docstring); JSON-ready."""
    if config.builds < 1 or config.calls < 2:
        raise ConfigError(
            f"`builds` must be >= 1 and `calls` >= 2, got {config.builds!r}, {config.calls!r}"
        )
    counter = TiktokenCounter()
    source = load_source(config.data, documents=config.documents)
    workload = build_workload(
        source, config.n, calls=config.calls, window=config.window, reserve=config.reserve
    )
    judge = _Judge(workload, counter)
    embedder: Embedder | None = default_embedder() if config.embedder == "default" else None
    out: dict[str, Any] = {"n": config.n, "tool_units": workload.tool_units}
    with tempfile.TemporaryDirectory(prefix="loomctx-perf-") as tmp:
        kb_store = SQLiteStore(Path(tmp) / "knowledge.db")
        memory_store = SQLiteStore(Path(tmp) / "memory.db")
        start = time.perf_counter()
        kb = _knowledge_base(kb_store, workload, embedder, counter)
        out["knowledge_ingest_s"] = round(time.perf_counter() - start, 2)
        if embedder is not None:
            out["query_embedding"] = _query_embedding(embedder, workload.queries)

        history = HistorySource(workload.history)
        orch = _history_orchestrator(history, kb, workload, counter)
        latency = asyncio.run(_latency(orch, workload, judge, config.builds))
        billed, scores = asyncio.run(
            _calls(orch, workload, judge, lambda u, a: history.extend([u, a]))
        )
        out["orchestrator"] = _with_calls(latency, billed, scores, workload.available)
        out["whole_history"] = _whole_history(workload, counter)

        memory = LoomMemory("perf", store=memory_store, embedder=embedder, counter=counter)
        try:
            tasks = tasks_from_messages(workload.history)
            start = time.perf_counter()
            for k in range(0, len(tasks), _INGEST_BATCH):
                memory.add_tasks(tasks[k : k + _INGEST_BATCH])
            took = time.perf_counter() - start
            out["ingest"] = {
                "turns": config.n,
                "tasks": len(tasks),
                "seconds": round(took, 3),
                "turns_per_s": round(config.n / took, 1),
            }
            start = time.perf_counter()
            memory.promote_tasks()
            out["promotion_s"] = round(time.perf_counter() - start, 3)
            if embedder is not None:
                out["vectors"] = _wait_for_vectors(
                    memory, memory_store, embedder, config.embed_wait
                )
            orch = _memory_orchestrator(memory, kb, workload, counter)
            latency = asyncio.run(_latency(orch, workload, judge, config.builds))
            billed, scores = asyncio.run(
                _calls(
                    orch,
                    workload,
                    judge,
                    lambda u, a: memory.add_tasks(tasks_from_messages([u, a])),
                )
            )
            out["memory"] = _with_calls(latency, billed, scores, workload.available)
        finally:
            memory.close()
            kb.close()
            kb_store.close()
            memory_store.close()
        request = {
            "task": "serve",
            "memory": str(Path(tmp) / "memory.db"),
            "knowledge": str(Path(tmp) / "knowledge.db"),
            "queries": list(workload.queries),
            "embedder": config.embedder,
            "window": config.window,
            "reserve": config.reserve,
            "builds": config.builds,
        }
        out["serving"] = in_subprocess(request, timeout=_SERVE_TIMEOUT)
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def serving(
    *,
    memory: str,
    knowledge: str,
    queries: Sequence[str],
    embedder: EmbedderChoice,
    window: int,
    reserve: int,
    builds: int,
) -> dict[str, Any]:
    """Resident memory of a process serving the `memory` and `knowledge` files that
    `measure_size` wrote: it opens them, as a worker would, builds `builds` memory-path
    windows over `queries`, and reports its resident memory then and at its peak. Vectors
    are held as stored (the background embedder is off: it would add the model's vectors
    of the records still without one while being measured)."""
    if not queries or builds < 1:
        raise ConfigError(f"serving needs queries and builds >= 1, got {len(queries)}, {builds}")
    counter = TiktokenCounter()
    model = default_embedder() if embedder == "default" else None
    workload = Workload(
        n=0,
        history=(),
        tool_units=0,
        documents=(),
        queries=tuple(queries),
        continuation=(),
        window=window,
        reserve=reserve,
    )
    kb_store, memory_store = SQLiteStore(Path(knowledge)), SQLiteStore(Path(memory))
    kb = KnowledgeBase("notes", kb_store, embedder=model, counter=counter, fast_embedder=None)
    loom = LoomMemory(
        "perf",
        store=memory_store,
        embedder=model,
        counter=counter,
        embedding=MemoryEmbedding(in_background=False),
    )
    try:
        orch = _memory_orchestrator(loom, kb, workload, counter)

        async def go() -> None:
            for i in range(builds):
                await orch.build(query=queries[i % len(queries)])

        asyncio.run(go())
        return {"builds": builds, "rss_mb": _rss_mb(), "peak_rss_mb": peak_rss_mb()}
    finally:
        loom.close()
        kb.close()
        kb_store.close()
        memory_store.close()


def embedding_throughput(data: str, *, texts: int = 256, batch: int = 32) -> dict[str, Any]:
    """Texts per second of the shipped embedder on LoCoMo turns, in batches of `batch`; and
    under ``"fast"``, of the static table the memory embeds with first (`texts` x 16, in its
    own batches)."""
    embedder = default_embedder()
    turns = load_source(data, documents=1).turns
    out = _throughput(embedder, turns, texts=texts, batch=batch)
    fast = shipped_fast_embedder(embedder)
    if fast is not None:
        size = getattr(fast, "batch_size", batch)
        out["fast"] = _throughput(fast, turns, texts=texts * 16, batch=size)
    return out


def _throughput(
    embedder: Embedder, turns: Sequence[str], *, texts: int, batch: int
) -> dict[str, Any]:
    embedder.embed(["warm up the model"])
    sample = [f"{turns[i % len(turns)]} ({i})" for i in range(texts)]
    start = time.perf_counter()
    for k in range(0, texts, batch):
        embedder.embed(sample[k : k + batch])
    took = time.perf_counter() - start
    return {
        "model": embedder.name,
        "texts": texts,
        "batch": batch,
        "seconds": round(took, 2),
        "texts_per_s": round(texts / took, 1),
    }


def soak(config: SizeConfig, *, builds: int) -> dict[str, Any]:
    """Each strategy's build latency over `builds` builds in one long-lived process (lexical,
    as a long run must not wait on vectors): p50 of the first and the last tenth, their ratio
    (the target: flat over a 10,000-build process), and resident memory before and after."""
    if builds < 100:
        raise ConfigError(f"a soak needs at least 100 builds, got {builds!r}")
    counter = TiktokenCounter()
    source = load_source(config.data, documents=config.documents)
    workload = build_workload(source, config.n, window=config.window, reserve=config.reserve)
    out: dict[str, Any] = {"n": config.n, "builds": builds}
    with tempfile.TemporaryDirectory(prefix="loomctx-soak-") as tmp:
        kb_store = SQLiteStore(Path(tmp) / "knowledge.db")
        memory_store = SQLiteStore(Path(tmp) / "memory.db")
        kb = _knowledge_base(kb_store, workload, None, counter)
        memory = LoomMemory("soak", store=memory_store, embedder=None, counter=counter)
        try:
            tasks = tasks_from_messages(workload.history)
            for k in range(0, len(tasks), _INGEST_BATCH):
                memory.add_tasks(tasks[k : k + _INGEST_BATCH])
            memory.promote_tasks()
            strategies = {
                "orchestrator": _history_orchestrator(
                    HistorySource(workload.history), kb, workload, counter
                ),
                "memory": _memory_orchestrator(memory, kb, workload, counter),
            }
            for name, orch in strategies.items():
                out[name] = asyncio.run(_soak(orch, workload, builds))
        finally:
            memory.close()
            kb.close()
            kb_store.close()
            memory_store.close()
    return out


async def _soak(orch: ContextOrchestrator, workload: Workload, builds: int) -> dict[str, Any]:
    samples: list[float] = []
    rss_start = _rss_mb()
    for i in range(builds):
        start = time.perf_counter()
        await orch.build(query=workload.queries[i % len(workload.queries)])
        samples.append((time.perf_counter() - start) * 1000)
    tenth = max(1, builds // 10)
    first, last = percentile(samples[:tenth], 50), percentile(samples[-tenth:], 50)
    return {
        "first_p50_ms": round(first, 3),
        "last_p50_ms": round(last, 3),
        "drift": round(last / first, 3) if first else None,
        "rss_start_mb": rss_start,
        "rss_end_mb": _rss_mb(),
    }


def _rss_mb() -> float | None:
    """This process's resident memory now, in MB (Linux; None elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return round(pages * resource.getpagesize() / 2**20, 1)

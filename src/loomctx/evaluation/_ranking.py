"""What the retrieval benches share: the rankings of one memory per stage of the pipeline
(`Rankers`), the memory they rank over (`open_rankers`), the embedder a run uses, and a clock
that estimates the time left."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from loomctx.memory.core import TASK, LoomMemory
from loomctx.memory.settings import MemoryEmbedding, MemoryRanking
from loomctx.memory.task import Task
from loomctx.retrieval.settings import RetrievalSettings
from loomctx.stores.base import Hit, VectorSearch

if TYPE_CHECKING:
    from loomctx.context.compactor import CachePolicy
    from loomctx.embeddings import Embedder

__all__ = [
    "MAIN_STAGE",
    "STAGES",
    "Clock",
    "Progress",
    "Rankers",
    "bench_embedder",
    "close_rankers",
    "open_rankers",
    "stages_of",
    "uncached",
]

MAIN_STAGE: Final = "+reranker"  # the whole pipeline, as `UnifiedRetrievalSource` runs it
STAGES: Final = ("lexical", "dense", "fused", "+rewriter", "+reranker")
Progress = Callable[[str], None]


class Rankers:
    """Task-id rankings of one memory's store, one per stage of the retrieval pipeline."""

    def __init__(self, fused: LoomMemory, lexical: LoomMemory | None) -> None:
        self.fused = fused
        self.lexical = lexical or fused
        self.settings = RetrievalSettings()
        self.policy: CachePolicy | None = None  # the windows' (None: `CachePolicy()`)

    def configure(self, settings: RetrievalSettings) -> None:
        """Search with `settings` from now on (the memories' own search constants too; the
        stored turns and their vectors stay as they are)."""
        self.settings = settings
        for memory in {id(self.fused): self.fused, id(self.lexical): self.lexical}.values():
            memory.fusion_weights = settings.fusion_weights
            memory.fast_weight = settings.fast_weight
            memory.neighbour_weight = settings.neighbour_weight
            memory.answer_weight = settings.answer_weight
            memory.date_weight = settings.date_weight
            if memory.time_decay:  # 0 where the dataset gives no "now" (`_open`)
                memory.time_decay = settings.time_decay

    def rank(self, query: str, stage: str, limit: int) -> list[str]:
        if stage == "lexical":
            return [h.task.task_id for h in self.lexical.search(query, limit=limit)]
        if stage == "fused":
            return [h.task.task_id for h in self.fused.search(query, limit=limit)]
        if stage in ("+rewriter", "+reranker"):
            source = self.source(reranker=stage == "+reranker")
            ranked = asyncio.run(source.candidates(query, limit=limit))
            return [c.id for c in ranked][:limit]
        embedder = self.fused.embedder
        assert embedder is not None
        vector = embedder.embed([query], kind="query")[0]
        hits: list[Hit] = self.fused.store.batch(
            [
                VectorSearch(
                    prefix=self.fused.search_scope,
                    vector=vector,
                    model=embedder.name,
                    kind=TASK,
                    limit=limit,
                )
            ]
        )[0]
        return [str(h.record.data["task_id"]) for h in hits]

    def source(self, *, reranker: bool = True) -> Any:
        """The engine's `UnifiedRetrievalSource` over this memory (without reranking: ranked
        by recall relevance alone)."""
        from loomctx.context.sources.retrieval import UnifiedRetrievalSource
        from loomctx.retrieval.reranker import Reranker
        from loomctx.retrieval.signals import RelevanceSignal

        return UnifiedRetrievalSource(
            self.fused,
            reranker=None if reranker else Reranker([RelevanceSignal()]),
            settings=self.settings,
        )


def bench_embedder(dense: bool, embedder: Embedder | None, cache_dir: str | Path | None) -> Any:
    """The embedder of a run: None without `dense`; else `embedder` (default: the shipped
    one), its vectors kept in `cache_dir` between runs when given."""
    if not dense:
        return None
    if embedder is None:
        from loomctx.embeddings import default_embedder

        embedder = default_embedder()
    if cache_dir is None:
        return embedder
    from loomctx.evaluation._vector_cache import CachedEmbedder

    return CachedEmbedder(embedder, cache_dir)


def open_rankers(
    node_id: str, tasks: list[Task], embedder: Any, now: datetime | None = None
) -> Rankers:
    """Rankers over a fresh memory of `tasks`. `now`: when the questions are asked (the
    memory's clock, for "5 days ago"); None where the dataset does not say (LoCoMo): time
    references are then not resolved, rather than against the day the benchmark runs."""
    options: dict[str, Any] = (
        {"ranking": MemoryRanking(time_decay=0.0)} if now is None else {"clock": lambda: now}
    )
    memory = LoomMemory(
        node_id, embedder=embedder, embedding=MemoryEmbedding(in_background=False), **options
    )
    memory.add_tasks(tasks)
    lexical = None
    if memory.background is not None:
        memory.background.drain()
        lexical = LoomMemory(
            node_id, store=memory.store, namespace=memory.namespace, embedder=None, **options
        )
    return Rankers(memory, lexical)


def close_rankers(rankers: Rankers, embedder: Any) -> None:
    """Close the rankers' memories, and keep the embedder's new vectors if it caches them."""
    if rankers.lexical is not rankers.fused:
        rankers.lexical.close()
    rankers.fused.close()
    if hasattr(embedder, "save"):
        embedder.save()


class Clock:
    """Elapsed time and an estimate of what is left, from the work done so far."""

    def __init__(self, total: float) -> None:
        self.total = total
        self.start = time.perf_counter()

    def line(self, done: float) -> str:
        """``"1m05s elapsed, about 3m20s left"`` once something is done."""
        elapsed = time.perf_counter() - self.start
        if done <= 0:
            return f"{_duration(elapsed)} elapsed"
        left = elapsed / done * max(0.0, self.total - done)
        return f"{_duration(elapsed)} elapsed, about {_duration(left)} left"


def _duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def uncached(embedder: Any, kind: str, texts: Sequence[str]) -> int:
    """How many of `texts` the embedder must still embed (all, without a cache)."""
    missing = getattr(embedder, "missing", None)
    return int(missing(texts, kind=kind)) if callable(missing) else len(texts)


def stages_of(dense: bool, stages: bool) -> tuple[str, ...]:
    """The stages a run ranks with: the whole pipeline, or with `stages` each step (the
    dense ones only with `dense`)."""
    if not stages:
        return (MAIN_STAGE,)
    return STAGES if dense else tuple(s for s in STAGES if s not in ("dense", "fused"))

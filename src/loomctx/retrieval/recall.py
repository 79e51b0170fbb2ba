"""Recall: `Evidence` for a query from memory (L4) and knowledge bases, concurrently.

Memory recall is `LoomMemory.search` (lexical and dense ranks fused); the plain `KnowledgeBase`s
are searched after it, in the same thread (both searches are Python work under the interpreter
lock, and in two threads each waited for the other's switch interval rather than running); any
other knowledge base searches itself, concurrently. That thread is a worker when a model must
embed the query (its work frees the lock for the event loop) or a remote knowledge base is
waited on; otherwise it is the caller's own: a worker only added the wait for it to take the
lock, and for the loop to take it back. Each piece's ``relevance`` score is its recall score on
0..1: the fused score of `LoomMemory.search` or of the knowledge base's own search;
``vector_score`` and ``lexical_score`` are added when those searches found it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Final

from loomctx._memo import Memo
from loomctx.embeddings import BaseEmbedder
from loomctx.knowledge import KnowledgeBase
from loomctx.memory.core import LoomMemory
from loomctx.memory.task import Task, task_line
from loomctx.retrieval.evidence import MEMORY_ORIGIN, Evidence, new_evidence

if TYPE_CHECKING:
    from loomctx.knowledge import KnowledgeBaseProvider, KnowledgeHit

__all__ = ["recall", "recall_knowledge", "recall_memory"]

_LINES: Final = 8192  # candidate texts kept, by task object

_line: Memo[Task, str] = Memo(task_line, _LINES)


POOL_CAP: Final = 4000
"""The deepest pool `depth` asks of each memory search beyond three hits per result. A deep
pool lifts an answer its own words rank low in a small window (`RetrievalSettings.pool_depth`);
a 128k window's ~1,400 candidates are deep enough at three each, where eight each made one
search fuse ~11,000 hits. LoCoMo's windows (up to 8,000 tokens) stay below the cap."""


def recall_memory(
    memory: LoomMemory,
    query: str,
    *,
    limit: int = 20,
    min_score: float = 0.0,
    exclude: Iterable[str] = (),
    depth: int = 3,
) -> list[Evidence]:
    """Up to `limit` tasks of `memory` for `query`, best first, `relevance >= min_score`;
    the lexical and the dense search each bring `depth` times `limit` hits to be fused
    (`LoomMemory.search`'s `pool`), at most `POOL_CAP` unless three per result are more."""
    pool = min(limit * depth, max(POOL_CAP, limit * min(depth, 3)))
    out = []
    for hit in memory.search(query, limit=limit, exclude=exclude, pool=pool):
        if hit.score < min_score:
            continue
        metadata: dict[str, object] = {"task_id": hit.task.task_id, "via": list(hit.via)}
        if hit.time_match is not None:  # the query named a time: how close this task is
            metadata["time_match"] = round(hit.time_match, 4)
        out.append(
            new_evidence(
                hit.task.task_id,
                MEMORY_ORIGIN,
                _line(hit.task),
                hit.task,
                metadata,
                _scores(hit.score, hit.vector_score, hit.lexical_score),
            )
        )
    return out


async def recall_knowledge(
    kb: KnowledgeBaseProvider, query: str, *, limit: int = 20, min_score: float = 0.0
) -> list[Evidence]:
    """Up to `limit` chunks of `kb` for `query`, best first, `score >= min_score`."""
    return _chunks(kb, await kb.search(query, limit=limit, min_relevance=min_score))


def _embeds(query: str, memory: LoomMemory | None, local: Iterable[KnowledgeBase]) -> bool:
    """Whether searching `memory` and the `local` knowledge bases for `query` would run an
    embedding model: an `embedder` without the query in its cache (`BaseEmbedder.has_query`;
    one that keeps no cache is taken to). A fast (static) embedder looks its vector up in a
    table: no model runs."""
    models = [memory.embedder if memory is not None else None, *(kb.embedder for kb in local)]
    return any(
        model is not None and not (isinstance(model, BaseEmbedder) and model.has_query(query))
        for model in models
    )


def _local(kb: KnowledgeBaseProvider) -> KnowledgeBase | None:
    """`kb` if it is a `KnowledgeBase` whose search is its own `search_sync` in a thread."""
    if isinstance(kb, KnowledgeBase) and type(kb).search is KnowledgeBase.search:
        return kb
    return None


def _chunks(kb: KnowledgeBaseProvider, hits: Sequence[KnowledgeHit]) -> list[Evidence]:
    origin = f"knowledge:{kb.name}"
    return [
        new_evidence(
            h.chunk_id,
            origin,
            h.text,
            h,
            {"chunk_id": h.chunk_id, "document_id": h.document_id, **h.metadata},
            _scores(h.score, h.vector_score, h.lexical_score),
        )
        for h in hits
    ]


def _scores(relevance: float, vector: float | None, lexical: float | None) -> dict[str, float]:
    """Recall's named scores (`Evidence.scores`): a search that did not find it adds none."""
    scores = {"relevance": relevance}
    if vector is not None:
        scores["vector_score"] = vector
    if lexical is not None:
        scores["lexical_score"] = lexical
    return scores


async def recall(
    query: str,
    *,
    memory: LoomMemory | None = None,
    knowledge_bases: Sequence[KnowledgeBaseProvider] = (),
    limit: int = 20,
    min_score: float = 0.0,
    exclude: Iterable[str] = (),
    depth: int = 3,
) -> list[Evidence]:
    """Every source's candidates (`limit` per source), memory first, in recall order;
    `depth`: see `recall_memory`."""
    skip = tuple(exclude)
    # Local knowledge bases are searched with the memory, in one thread (module docstring).
    local = {i: plain for i, kb in enumerate(knowledge_bases) if (plain := _local(kb)) is not None}
    parts: dict[int, list[Evidence]] = {}

    async def remote(i: int, kb: KnowledgeBaseProvider) -> None:
        parts[i] = await recall_knowledge(kb, query, limit=limit, min_score=min_score)

    def search_local() -> None:
        if memory is not None:
            parts[-1] = recall_memory(
                memory, query, limit=limit, min_score=min_score, exclude=skip, depth=depth
            )
        for i, kb in local.items():
            parts[i] = _chunks(kb, kb.search_sync(query, limit=limit, min_relevance=min_score))

    jobs = [remote(i, kb) for i, kb in enumerate(knowledge_bases) if i not in local]
    if memory is None and not local:
        await asyncio.gather(*jobs)
    elif not jobs and not _embeds(query, memory, local.values()):
        search_local()  # nothing to wait on: a worker thread would only add handoffs
    else:
        await asyncio.gather(asyncio.to_thread(search_local), *jobs)
    # In the order of the sources: memory, then each knowledge base.
    return [c for i in sorted(parts) for c in parts[i]]

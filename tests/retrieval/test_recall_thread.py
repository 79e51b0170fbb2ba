"""recall searches a memory and the plain knowledge bases beside it in one thread: a worker
while a model embeds the query, the caller's own when every query vector is at hand."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from loomctx.knowledge import KnowledgeBase, KnowledgeHit
from loomctx.memory.core import LoomMemory, MemoryHit
from loomctx.retrieval import recall
from loomctx.testing import HashingEmbedder

from .fixtures import CHAT, HANDBOOK, RUNBOOK, open_store, remember

QUERY = "rollback of the deploy"


class _Memory(LoomMemory):
    threads: list[int]

    def search(self, query: str, **kwargs: Any) -> list[MemoryHit]:
        self.threads.append(threading.get_ident())
        return super().search(query, **kwargs)


class _Knowledge(KnowledgeBase):
    threads: list[int]

    def search_sync(self, query: str, **kwargs: Any) -> list[KnowledgeHit]:
        self.threads.append(threading.get_ident())
        return super().search_sync(query, **kwargs)


def _kb(store: Any, name: str, docs: dict[str, str], threads: list[int]) -> _Knowledge:
    kb = _Knowledge(name, store, embedder=None, embed_in_background=False)
    kb.threads = threads
    for doc_id, text in docs.items():
        kb.add_text(text, document_id=doc_id)
    return kb


async def test_local_knowledge_bases_are_searched_in_the_memory_s_thread(tmp_path: Path) -> None:
    threads: list[int] = []
    with open_store(tmp_path) as store:
        memory = _Memory("s1", store=store, embedder=None)
        memory.threads = threads
        remember(memory, CHAT)
        kbs = [_kb(store, "handbook", HANDBOOK, threads), _kb(store, "runbook", RUNBOOK, threads)]
        found = await recall(QUERY, memory=memory, knowledge_bases=kbs)
        assert len(threads) == 3
        assert len(set(threads)) == 1
        assert threads[0] == threading.get_ident()  # no model to wait on: the loop's thread
        origins = [c.origin for c in found]
        assert set(origins) == {"memory", "knowledge:handbook", "knowledge:runbook"}
        # memory first, then the knowledge bases in the order given
        assert origins == sorted(
            origins, key=["memory", "knowledge:handbook", "knowledge:runbook"].index
        )
        memory.close()


async def test_without_a_memory_the_knowledge_bases_are_searched_together(tmp_path: Path) -> None:
    threads: list[int] = []
    with open_store(tmp_path) as store:
        kbs = [_kb(store, "handbook", HANDBOOK, threads), _kb(store, "runbook", RUNBOOK, threads)]
        found = await recall(QUERY, knowledge_bases=kbs)
        assert threads == [threading.get_ident()] * 2
        assert [c.origin for c in found] == sorted(
            (c.origin for c in found), key=["knowledge:handbook", "knowledge:runbook"].index
        )


async def test_a_query_a_model_must_embed_is_searched_in_a_worker_thread(tmp_path: Path) -> None:
    threads: list[int] = []
    with open_store(tmp_path) as store:
        memory = _Memory("s1", store=store, embedder=HashingEmbedder(query_cache_size=8))
        memory.threads = threads
        remember(memory, CHAT)
        kbs = [_kb(store, "handbook", HANDBOOK, threads)]
        await recall(QUERY, memory=memory, knowledge_bases=kbs)
        assert len(threads) == 2
        assert len(set(threads)) == 1
        assert threads[0] != threading.get_ident()  # embedding it: a worker thread
        # Asked again, the query's vector is in the embedder's cache: nothing to wait on.
        await recall(QUERY, memory=memory, knowledge_bases=kbs)
        assert threads[2:] == [threading.get_ident()] * 2
        memory.close()

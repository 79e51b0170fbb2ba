"""recall: memory (L4) and knowledge bases searched concurrently, per-source limits."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loomctx.knowledge import KnowledgeBaseProvider, KnowledgeHit
from loomctx.memory.core import LoomMemory, MemoryHit
from loomctx.memory.task import Task
from loomctx.retrieval import MEMORY_ORIGIN, recall, recall_knowledge, recall_memory
from loomctx.retrieval.recall import POOL_CAP

from .fixtures import CHAT, HANDBOOK, RUNBOOK, knowledge, open_store, remember

QUERY = "rollback of the deploy"


World = tuple[LoomMemory, list[KnowledgeBaseProvider]]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    """A session's memory and two knowledge bases, in one SQLite file."""
    with open_store(tmp_path) as store:
        memory = LoomMemory("s1", store=store, embedder=None)
        remember(memory, CHAT)
        yield memory, [knowledge(store, "handbook", HANDBOOK), knowledge(store, "runbook", RUNBOOK)]


async def test_memory_and_two_knowledge_bases_memory_first(world: World) -> None:
    memory, kbs = world
    found = await recall(QUERY, memory=memory, knowledge_bases=kbs)
    origins = [c.origin for c in found]
    assert origins == sorted(
        origins, key=["memory", "knowledge:handbook", "knowledge:runbook"].index
    )
    assert set(origins) == {"memory", "knowledge:handbook", "knowledge:runbook"}
    # Each source's candidates are its own search, best first.
    for origin in set(origins):
        part = [c.relevance for c in found if c.origin == origin]
        assert part == sorted(part, reverse=True)
    top = {c.origin: c for c in reversed(found)}  # the first of each origin
    assert top["knowledge:runbook"].id == "rollback#0"
    assert top["knowledge:handbook"].id == "deploys#0"
    memory_hit = top[MEMORY_ORIGIN]
    assert isinstance(memory_hit.item, Task)
    assert memory_hit.id == memory_hit.metadata["task_id"] == memory_hit.item.task_id
    assert memory_hit.text.startswith(("user: ", "assistant: "))
    assert "lexical" in memory_hit.metadata["via"]
    assert memory_hit.lexical_score is not None
    assert memory_hit.vector_score is None  # no embedder
    assert "time_match" not in memory_hit.metadata  # the query names no time
    kb_hit = top["knowledge:runbook"]
    assert isinstance(kb_hit.item, KnowledgeHit)
    assert kb_hit.metadata["document_id"] == "rollback"
    assert kb_hit.metadata["chunk_id"] == "rollback#0"
    assert kb_hit.metadata["title"] == "Rollback runbook"
    assert kb_hit.relevance == kb_hit.item.score


async def test_limit_is_per_source(world: World) -> None:
    memory, kbs = world
    found = await recall(
        "deploy rollback Tuesday billing", memory=memory, knowledge_bases=kbs, limit=1
    )
    assert [c.origin for c in found] == ["memory", "knowledge:handbook", "knowledge:runbook"]
    more = await recall(
        "deploy rollback Tuesday billing", memory=memory, knowledge_bases=kbs, limit=3
    )
    assert sum(c.origin == "memory" for c in more) == 3


async def test_min_score_and_exclude(world: World) -> None:
    memory, kbs = world
    everything = await recall(QUERY, memory=memory, knowledge_bases=kbs)
    floor = sorted(c.relevance for c in everything)[len(everything) // 2]
    strong = await recall(QUERY, memory=memory, knowledge_bases=kbs, min_score=floor)
    assert [c.key for c in strong] == [c.key for c in everything if c.relevance >= floor]
    assert 0 < len(strong) < len(everything)
    skipped = {c.id for c in everything if c.origin == MEMORY_ORIGIN}
    without = await recall(QUERY, memory=memory, knowledge_bases=kbs, exclude=skipped)
    assert all(c.origin != MEMORY_ORIGIN for c in without)
    assert [c.key for c in without] == [c.key for c in everything if c.origin != MEMORY_ORIGIN]


async def test_single_sources(world: World) -> None:
    memory, kbs = world
    only_kbs = await recall(QUERY, knowledge_bases=kbs)
    assert {c.origin for c in only_kbs} == {"knowledge:handbook", "knowledge:runbook"}
    assert await recall(QUERY) == []
    direct = recall_memory(memory, QUERY, limit=2, exclude=["m2"])
    assert len(direct) == 2
    assert "m2" not in {c.id for c in direct}
    assert [c.id for c in await recall_knowledge(kbs[1], QUERY, limit=1)] == ["rollback#0"]
    assert recall_memory(memory, QUERY, min_score=1.01) == []


class Rendezvous:
    """A knowledge base that answers only once every other one has started searching: recall
    deadlocks unless the searches run at the same time."""

    def __init__(self, name: str, started: dict[str, asyncio.Event]) -> None:
        self.name = name
        self.started = started

    async def search(
        self, query: str, *, limit: int = 20, min_relevance: float = 0.0
    ) -> list[KnowledgeHit]:
        self.started[self.name].set()
        for event in self.started.values():
            await event.wait()
        return [
            KnowledgeHit(
                chunk_id=f"{self.name}#0",
                document_id=self.name,
                text=query,
                score=0.5,
                vector_score=None,
                lexical_score=1.0,
                metadata={},
                knowledge_base=self.name,
            )
        ]


async def test_knowledge_bases_are_searched_concurrently(world: World) -> None:
    memory, _ = world
    started = {"a": asyncio.Event(), "b": asyncio.Event()}
    kbs = [Rendezvous("a", started), Rendezvous("b", started)]
    assert all(isinstance(kb, KnowledgeBaseProvider) for kb in kbs)
    found = await asyncio.wait_for(recall(QUERY, memory=memory, knowledge_bases=kbs), 60)
    assert [c.origin for c in found][-2:] == ["knowledge:a", "knowledge:b"]
    assert found[0].origin == MEMORY_ORIGIN


def test_a_memory_candidate_says_how_close_it_is_to_the_time_the_query_names(
    world: World,
) -> None:
    memory, _ = world
    found = recall_memory(memory, f"{QUERY} today")  # every task was recorded just now
    assert found
    assert all(c.metadata["time_match"] > 0.99 for c in found)  # 1, or near at midnight


class _Pools(LoomMemory):
    """A memory that notes the pool each search was asked for."""

    pools: list[int | None]

    def search(self, query: str, **kwargs: Any) -> list[MemoryHit]:
        self.pools.append(kwargs.get("pool"))
        return super().search(query, **kwargs)


@pytest.mark.parametrize(
    ("limit", "depth", "pool"),
    [(20, 8, 160), (82, 8, 656), (500, 8, POOL_CAP), (1411, 8, 4233), (50, 2, 100)],
)
def test_the_pool_is_deep_for_small_windows_and_capped_for_large_ones(
    tmp_path: Path, limit: int, depth: int, pool: int
) -> None:
    with open_store(tmp_path) as store:
        memory = _Pools("s1", store=store, embedder=None)
        memory.pools = []
        remember(memory, CHAT)
        assert recall_memory(memory, QUERY, limit=limit, depth=depth)
        assert memory.pools == [pool]

"""The embedding cascade: a fast embedder's vectors for every record first, the slow one's after.

Real SQLite stores and real embedders: the shipped `StaticEmbedder` as the fast one, and
`HashingEmbedder` standing in for the transformer (cheap, and a different model name)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from loomctx import (
    ConfigError,
    LoomMemory,
    MemoryEmbedding,
    MemoryRanking,
    SQLiteStore,
    Task,
    TaskStatus,
)
from loomctx.embeddings import StaticEmbedder
from loomctx.embeddings._e5 import E5_NAME
from loomctx.embeddings._static import default_static_embedder
from loomctx.memory.enrichment import BackgroundEmbedder
from loomctx.memory.task import USER_MESSAGE
from loomctx.retrieval.settings import RetrievalSettings
from loomctx.stores.base import Unembedded
from loomctx.testing.embedders import HashingEmbedder

FACTS = [
    "The database is copied automatically every night and kept for thirty days.",
    "Our puppy loves chasing a ball around the park.",
    "Maria bakes sourdough loaves for the Friday team lunch.",
    "The staging server was moved to the Frankfurt data centre.",
]


@pytest.fixture(scope="module")
def static() -> StaticEmbedder:
    return StaticEmbedder()


def note(n: int, text: str) -> Task:
    return Task(task_id=f"t{n}", action=USER_MESSAGE, parameters={"content": text},
                status=TaskStatus.COMPLETED)  # fmt: skip


def missing(memory: LoomMemory, model: str) -> int:
    op = Unembedded(model=model, prefix=memory.namespace, exact=True, limit=10_000)
    return len(memory.store.batch([op])[0])


def test_fast_vectors_come_first_then_the_slow_ones(tmp_path: Path, static: StaticEmbedder) -> None:
    slow = HashingEmbedder(dim=32)
    with SQLiteStore(tmp_path / "m.db") as store:
        memory = LoomMemory(
            "agent",
            store=store,
            embedder=slow,
            embedding=MemoryEmbedding(fast_embedder=static, in_background=False),
        )
        background = memory.background
        assert background is not None
        assert background.first is not None
        assert background.embedder is slow
        assert background.first.embedder is static
        background.batch_size = 3  # the slow one embeds a few at a time, as the model would
        memory.add_tasks([note(n, f"entry {n} about the garden") for n in range(20)])
        assert memory.unembedded == 20
        assert memory.unembedded_by == {static.name: 20, slow.name: 20}

        # Every record gets its fast vector first (a batch of 256), and only then the slow one.
        assert background.run_once() == 20
        assert missing(memory, static.name) == 0
        assert missing(memory, slow.name) == 20
        assert memory.unembedded == 0  # nothing is searched by its words only any more
        assert memory.unembedded_by == {static.name: 0, slow.name: 20}
        assert background.run_once() == 3
        assert memory.unembedded_by == {static.name: 0, slow.name: 17}

        # New writes get their fast vector in the next step, ahead of the slow backlog.
        memory.add_tasks([note(100 + n, "a late entry") for n in range(2)])
        assert memory.unembedded_by == {static.name: 2, slow.name: 19}
        assert background.run_once() == 2
        assert missing(memory, static.name) == 0
        assert background.run_once() == 3
        assert missing(memory, slow.name) == 16

        assert background.drain() == 16
        assert memory.unembedded_by == {static.name: 0, slow.name: 0}
        assert missing(memory, slow.name) == 0
        memory.close()


def test_the_thread_fills_both(static: StaticEmbedder) -> None:
    slow = HashingEmbedder(dim=32)
    memory = LoomMemory("agent", embedder=slow, embedding=MemoryEmbedding(fast_embedder=static))
    try:
        memory.add_tasks([note(n, f"entry {n}") for n in range(30)])
        deadline = time.monotonic() + 20
        while missing(memory, slow.name) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert missing(memory, static.name) == missing(memory, slow.name) == 0
        assert memory.background is not None
        assert memory.background.first is not None
        assert memory.background.first.embedded == memory.background.embedded == 30
    finally:
        memory.close()


def test_before_the_slow_vectors_search_finds_by_meaning(static: StaticEmbedder) -> None:
    # The query shares no word with the fact it asks about: lexical search alone misses it.
    query = "How often are backups made?"
    memory = LoomMemory(
        "agent",
        embedder=HashingEmbedder(dim=64),
        embedding=MemoryEmbedding(fast_embedder=static, in_background=False),
    )
    try:
        memory.add_tasks([note(n, t) for n, t in enumerate(FACTS)])
        assert memory.search(query, limit=1) == []  # no vector, no shared word
        assert memory.background is not None
        assert memory.background.first is not None
        memory.background.first.drain()  # the fast vectors only
        hit = memory.search(query, limit=1)[0]
        assert hit.task.task_id == "t0"
        assert hit.via == ("dense",)
        assert hit.vector_score is not None  # the fast vectors' cosine, wanting the slow one
        note_text = memory.recall(query).note
        assert "4 item(s) without vectors of 'hashing:v1:64'" in note_text
        assert static.name in note_text
        memory.background.drain()
        assert memory.recall(query).note == ""
    finally:
        memory.close()


def test_the_fast_ranking_is_weighed_by_fast_weight(static: StaticEmbedder) -> None:
    slow = HashingEmbedder(dim=64)
    memory = LoomMemory(
        "agent", embedder=slow, embedding=MemoryEmbedding(fast_embedder=static, in_background=False)
    )
    try:
        memory.add_tasks([note(n, t) for n, t in enumerate(FACTS)])
        assert memory.background is not None
        memory.background.drain()
        query = "Who brings bread for lunch on Fridays?"
        with_fast = {h.task.task_id: h.score for h in memory.search(query, limit=4)}
        memory.fast_weight = 0.0
        without = {h.task.task_id: h.score for h in memory.search(query, limit=4)}
        assert with_fast != without
        memory.fast_embedder = None  # the same as a fast weight of 0
        assert {h.task.task_id: h.score for h in memory.search(query, limit=4)} == without
    finally:
        memory.close()


def test_a_fast_embedder_alone(static: StaticEmbedder) -> None:
    memory = LoomMemory(
        "agent", embedder=None, embedding=MemoryEmbedding(fast_embedder=static, in_background=False)
    )
    try:
        memory.add_tasks([note(n, t) for n, t in enumerate(FACTS)])
        assert memory.unembedded == 4
        assert memory.background is not None
        assert memory.background.embedder is static
        memory.background.drain()
        assert memory.unembedded == 0
        assert memory.unembedded_by == {static.name: 0}
        assert memory.search("How often are backups made?", limit=1)[0].task.task_id == "t0"
    finally:
        memory.close()


def test_validation(static: StaticEmbedder) -> None:
    with pytest.raises(ConfigError, match="another model"):
        LoomMemory("agent", embedder=static, embedding=MemoryEmbedding(fast_embedder=static))
    with pytest.raises(ConfigError, match="fast_weight"):
        LoomMemory(
            "agent",
            embedder=None,
            embedding=MemoryEmbedding(fast_embedder=static),
            ranking=MemoryRanking(fast_weight=-0.1),
        )
    store = SQLiteStore(":memory:")
    fast = BackgroundEmbedder(store, static)
    with pytest.raises(ConfigError, match="another model"):
        BackgroundEmbedder(store, static, first=fast)
    store.close()


class _NamedE5(HashingEmbedder):
    """A stand-in that carries the shipped e5's name (as a wrapper of it, a cache, would)."""

    @property
    def name(self) -> str:
        return E5_NAME


def test_the_shipped_e5_gets_the_static_table_by_default() -> None:
    memory = LoomMemory(
        "agent", embedder=_NamedE5(dim=384), embedding=MemoryEmbedding(in_background=False)
    )
    try:
        assert memory.fast_embedder is default_static_embedder()
        assert memory.fast_weight == RetrievalSettings().fast_weight
        assert memory.background is not None
        assert memory.background.first is not None
    finally:
        memory.close()
    # Another model has no static table of its own: no fast vectors, unless given.
    other = LoomMemory(
        "agent", embedder=HashingEmbedder(dim=32), embedding=MemoryEmbedding(in_background=False)
    )
    assert other.fast_embedder is None
    other.close()
    lexical = LoomMemory("agent", embedder=None)
    assert lexical.fast_embedder is None
    assert lexical.background is None
    lexical.close()
    off = LoomMemory(
        "agent", embedder=_NamedE5(dim=384), embedding=MemoryEmbedding(fast_embedder=None)
    )
    assert off.fast_embedder is None
    off.close()

"""Background embedding: vectors arrive off the write path and make search hybrid."""

from __future__ import annotations

import time

import pytest

from loomctx import ConfigError, LoomMemory, SQLiteStore, Task, TaskStatus
from loomctx.embeddings import default_embedder
from loomctx.memory.enrichment import BackgroundEmbedder
from loomctx.stores.base import Unembedded
from loomctx.testing.embedders import HashingEmbedder


def note(n: int, text: str) -> Task:
    return Task(task_id=f"t{n}", action="note", parameters={"text": text},
                status=TaskStatus.COMPLETED)  # fmt: skip


def test_drain_embeds_everything_and_search_becomes_hybrid() -> None:
    embedder = HashingEmbedder(dim=64)
    memory = LoomMemory("agent", embedder=embedder, embed_in_background=False)
    for n in range(40):
        memory.add_task(note(n, f"fact{n} about the garden and its roses"))
    assert memory.background is not None
    assert memory.background.drain() == 40
    left = memory.store.batch([Unembedded(model=embedder.name, prefix=memory.namespace)])[0]
    assert left == []
    hits = memory.search("fact7 roses", limit=3)
    assert hits[0].task.task_id == "t7"
    assert set(hits[0].via) == {"dense", "lexical"}
    memory.close()


def test_the_thread_keeps_up_with_writes_and_stops_on_close() -> None:
    embedder = HashingEmbedder(dim=32)
    memory = LoomMemory("agent", embedder=embedder)
    background = memory.background
    assert background is not None
    assert background.running
    for n in range(25):
        memory.add_task(note(n, f"entry{n}"))
    deadline = time.monotonic() + 10
    while background.embedded < 25 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert background.embedded == 25
    memory.close()
    assert not background.running


def test_a_failing_batch_is_reported_and_retried() -> None:
    class Flaky(HashingEmbedder):
        fails = 1

        def embed(self, texts, *, kind="document"):  # type: ignore[no-untyped-def]
            if self.fails:
                self.fails -= 1
                raise RuntimeError("model hiccup")
            return super().embed(texts, kind=kind)

    with SQLiteStore() as store:
        memory = LoomMemory("agent", store=store, embedder=Flaky(dim=16), embed_in_background=False)
        memory.add_task(note(1, "something"))
        background = memory.background
        assert background is not None
        background.interval = 0.01
        background.start()
        deadline = time.monotonic() + 10
        while background.embedded < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        background.stop()
        assert isinstance(background.last_error, RuntimeError)
        assert background.embedded == 1


def test_the_default_embedder_finds_a_paraphrase() -> None:
    memory = LoomMemory("agent", embedder=default_embedder(), embed_in_background=False)
    memory.add_task(note(1, "Caroline adopted a rescue puppy named Max last spring"))
    memory.add_task(note(2, "The quarterly budget review is scheduled for Tuesday"))
    memory.add_task(note(3, "我们下周去杭州看西湖"))
    assert memory.background is not None
    memory.background.drain()
    dense = memory.search("who got a new dog?", limit=1)
    assert dense[0].task.task_id == "t1"
    assert "dense" in dense[0].via
    assert memory.search("trip to West Lake in Hangzhou", limit=1)[0].task.task_id == "t3"
    memory.close()


def test_validation() -> None:
    with SQLiteStore() as store, pytest.raises(ConfigError, match="`batch_size`"):
        BackgroundEmbedder(store, HashingEmbedder(), batch_size=0)

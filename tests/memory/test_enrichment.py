"""Background embedding: vectors arrive off the write path and make search hybrid."""

from __future__ import annotations

import logging
import re
import time

import numpy as np
import pytest

from loomctx import ConfigError, LoomMemory, MemoryEmbedding, SQLiteStore, Task, TaskStatus
from loomctx.embeddings import default_embedder
from loomctx.errors import EmbeddingError
from loomctx.memory.enrichment import BackgroundEmbedder
from loomctx.stores.base import Record, Unembedded
from loomctx.testing.embedders import HashingEmbedder


def note(n: int, text: str) -> Task:
    return Task(task_id=f"t{n}", action="note", parameters={"text": text},
                status=TaskStatus.COMPLETED)  # fmt: skip


def test_drain_embeds_everything_and_search_becomes_hybrid() -> None:
    embedder = HashingEmbedder(dim=64)
    memory = LoomMemory("agent", embedder=embedder, embedding=MemoryEmbedding(in_background=False))
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


def test_the_thread_stops_when_its_store_is_closed_under_it(
    tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    # Its owner closed the store but never stopped the thread: retrying forever (with a
    # warning each time) helps no one; a closed store does not come back.
    store = SQLiteStore(tmp_path / "m.db")
    background = BackgroundEmbedder(store, HashingEmbedder(dim=8), interval=0.01)
    background.start()
    store.close()
    background.notify()
    deadline = time.monotonic() + 10
    while background.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not background.running
    assert background.failures == 0  # stopped, not backing off
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_failing_batch_is_reported_and_retried() -> None:
    class Flaky(HashingEmbedder):
        fails = 1

        def embed(self, texts, *, kind="document"):  # type: ignore[no-untyped-def]
            if self.fails:
                self.fails -= 1
                raise RuntimeError("model hiccup")
            return super().embed(texts, kind=kind)

    with SQLiteStore() as store:
        memory = LoomMemory(
            "agent",
            store=store,
            embedder=Flaky(dim=16),
            embedding=MemoryEmbedding(in_background=False),
        )
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
    memory = LoomMemory(
        "agent", embedder=default_embedder(), embedding=MemoryEmbedding(in_background=False)
    )
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
    with SQLiteStore() as store, pytest.raises(ConfigError, match="`max_backoff`"):
        BackgroundEmbedder(store, HashingEmbedder(), interval=1.0, max_backoff=0.5)
    with SQLiteStore() as store, pytest.raises(ConfigError, match="`quiet`"):
        BackgroundEmbedder(store, HashingEmbedder(), quiet=3.0, max_defer=2.0)
    with SQLiteStore() as store, pytest.raises(ConfigError, match="`quiet`"):
        BackgroundEmbedder(store, HashingEmbedder(), quiet=-1.0)


def _wait_embedded(background: BackgroundEmbedder, count: int) -> None:
    deadline = time.monotonic() + 10
    while background.embedded < count and time.monotonic() < deadline:
        time.sleep(0.01)


def test_the_thread_waits_while_a_writer_writes_then_catches_up() -> None:
    # Embedding during a bulk import took the interpreter from it (issue 19): a batch waits
    # until the writer has left `writing()` for `quiet` seconds.
    memory = LoomMemory(
        "agent", embedder=HashingEmbedder(dim=8), embedding=MemoryEmbedding(in_background=False)
    )
    background = BackgroundEmbedder(
        memory.store, HashingEmbedder(dim=8), prefix=memory.namespace, interval=0.01,
        quiet=0.05, max_defer=60.0,
    )  # fmt: skip
    memory.add_task(note(0, "written before the thread starts"))
    with background.writing():
        background.start()
        background.notify(1)
        time.sleep(0.5)
        assert background.embedded == 0
    _wait_embedded(background, 1)
    assert background.embedded == 1
    background.stop()
    memory.close()


def test_a_writer_that_never_pauses_still_gets_vectors_every_max_defer() -> None:
    memory = LoomMemory("agent", embedder=None)
    background = BackgroundEmbedder(
        memory.store, HashingEmbedder(dim=8), prefix=memory.namespace, batch_size=1,
        interval=0.01, quiet=0.05, max_defer=0.2,
    )  # fmt: skip
    with background.writing():
        for n in range(3):
            memory.add_task(note(n, f"entry{n}"))
        background.start()
        background.notify(3)
        _wait_embedded(background, 3)
        assert background.embedded == 3
    background.stop()
    memory.close()


def test_a_memory_holds_its_embedder_back_while_it_writes() -> None:
    memory = LoomMemory(
        "agent", embedder=HashingEmbedder(dim=8), embedding=MemoryEmbedding(in_background=False)
    )
    background = memory.background
    assert background is not None
    seen: list[int] = []
    store_batch = memory.store.batch

    def batch(ops, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(background._writers)
        return store_batch(ops, **kwargs)

    memory.store.batch = batch  # type: ignore[method-assign]
    memory.add_tasks([note(0, "a"), note(1, "b")])
    assert seen
    assert all(w == 1 for w in seen)
    assert background._writers == 0
    memory.close()


# --- one bad text, and an embedder that is down -------------------------------------------------


class Picky(HashingEmbedder):
    """Fails on texts with "poison" in them (raising) and gives NaN for "nanpoison"; counts
    its calls. Overrides `embed` itself, as a third-party embedder might, unchecked."""

    def __init__(self) -> None:
        super().__init__(dim=16)
        self.calls = 0

    def embed(self, texts, *, kind="document"):  # type: ignore[no-untyped-def]
        self.calls += 1
        if any("poison" in t and "nanpoison" not in t for t in texts):
            raise ValueError("the model cannot tokenize this")
        out = super().embed(texts, kind=kind)
        for i, text in enumerate(texts):
            if "nanpoison" in text:
                out[i] = np.nan
        return out


def test_a_text_that_fails_alone_is_quarantined_and_the_rest_embedded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    embedder = Picky()
    with SQLiteStore() as store:
        memory = LoomMemory(
            "agent", store=store, embedder=embedder, embedding=MemoryEmbedding(in_background=False)
        )
        for n in range(40):
            bad = {7: "poison", 23: "nanpoison"}.get(n, "")
            memory.add_task(note(n, f"fact{n} about the garden {bad}"))
        background = memory.background
        assert background is not None
        with caplog.at_level(logging.WARNING, logger="loomctx.memory.enrichment"):
            assert background.drain() == 40
        assert background.embedded == 38
        assert [(q.key, q.namespace) for q in background.quarantined] == [
            ("task:t7", memory.namespace),
            ("task:t23", memory.namespace),
        ]
        assert "ValueError: the model cannot tokenize this" in background.quarantined[0].reason
        assert "NaN" in background.quarantined[1].reason
        assert background.quarantined_total == 2
        assert sum("quarantined" in r.getMessage() for r in caplog.records) == 2
        # Left without vectors (never a NaN one), and the rest is searched densely.
        left = store.batch([Unembedded(model=embedder.name, prefix=memory.namespace)])[0]
        assert sorted(r.key for r in left) == ["task:t23", "task:t7"]
        hits = memory.search("fact12 garden", limit=1)
        assert hits[0].task.task_id == "t12"
        assert "dense" in hits[0].via
        found = {h.task.task_id: h.via for h in memory.search("fact7", limit=5)}
        assert found["t7"] == ("lexical",)  # still found, lexically
        # Nothing is tried again until a text changes.
        calls = embedder.calls
        assert background.drain() == 0
        assert embedder.calls == calls
        memory.add_task(note(7, "fact7 about the garden, cleaned"))
        assert background.drain() == 1
        assert background.embedded == 39
        memory.close()


class Down(HashingEmbedder):
    """Raises on its first `outage` calls (probes included), like a model server that is down."""

    def __init__(self, outage: int) -> None:
        super().__init__(dim=16)
        self.outage = outage

    def embed(self, texts, *, kind="document"):  # type: ignore[no-untyped-def]
        if self.outage:
            self.outage -= 1
            raise ConnectionError("model server unreachable")
        return super().embed(texts, kind=kind)


def test_an_embedder_that_is_down_is_waited_for_not_quarantined(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with SQLiteStore() as store:
        memory = LoomMemory(
            "agent", store=store, embedder=Down(9), embedding=MemoryEmbedding(in_background=False)
        )
        for n in range(5):
            memory.add_task(note(n, f"entry{n} of the log"))
        background = memory.background
        assert background is not None
        with pytest.raises(EmbeddingError, match="probe"):
            background.run_once()  # the batch and the probe fail: the embedder is down
        assert background.quarantined == ()
        background.interval, background.max_backoff = 0.01, 0.04
        with caplog.at_level(logging.WARNING, logger="loomctx.memory.enrichment"):
            background.start()
            deadline = time.monotonic() + 10
            while background.embedded < 5 and time.monotonic() < deadline:
                time.sleep(0.01)
            background.stop()
        assert background.embedded == 5
        assert background.quarantined == ()
        assert background.failures == 0
        assert isinstance(background.last_error, ConnectionError)
        # It backed off: the pauses doubled, up to `max_backoff`.
        pauses = [
            float(m.group(1))
            for r in caplog.records
            if (m := re.search(r"retrying in ([\d.]+) s", r.getMessage()))
        ]
        assert pauses == [0.02, 0.04, 0.04]
        memory.close()


def test_a_bare_embedder_reads_exactly_its_namespace_when_asked() -> None:
    with SQLiteStore() as store:
        store.put_many(
            [
                Record(namespace=("t", "a"), key="own", kind="note", text="mine"),
                Record(namespace=("t", "a", "s"), key="below", kind="note", text="not mine"),
            ]
        )
        exact = BackgroundEmbedder(store, HashingEmbedder(dim=8), prefix=("t", "a"), exact=True)
        assert exact.drain() == 1
        wide = BackgroundEmbedder(store, HashingEmbedder(dim=8), prefix=("t", "a"))
        assert wide.drain() == 1  # the one below; its own is embedded already


def test_an_embedder_that_returns_the_wrong_shape_is_down() -> None:
    class Short(HashingEmbedder):
        def embed(self, texts, *, kind="document"):  # type: ignore[no-untyped-def]
            return super().embed(texts, kind=kind)[:1]  # one row, whatever it is asked

    with SQLiteStore() as store:
        store.put_many([Record(namespace=("t",), key=k, kind="note", text=k) for k in "ab"])
        background = BackgroundEmbedder(store, Short(dim=8), prefix=("t",), exact=True)
        # One text at a time would embed; the batch of two does not: each is tried alone.
        assert background.drain() == 2
        assert background.embedded == 2
        assert isinstance(background.last_error, EmbeddingError)
        background.start()
        background.start()  # idempotent
        assert background.running
        background.stop()
        assert not background.running

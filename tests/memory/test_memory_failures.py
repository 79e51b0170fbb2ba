"""A write that fails changes nothing: the tiers hold only what the store holds, whatever made
the write fail (a full disk, a read-only database, a closed store, text it cannot encode)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from loomctx import ConfigError, LoomMemory, MemoryTiers, SQLiteStore, StoreError, Task, TaskStatus
from loomctx.memory import MemoryTier
from loomctx.stores.base import Put, Record, Scan


def task(n: int, importance: float = 0.3, text: str = "") -> Task:
    return Task(
        task_id=f"t{n}",
        action="note",
        parameters={"text": text or f"failmark{n} fact number {n}"},
        status=TaskStatus.COMPLETED,
        metadata={"importance": importance},
    )


def tiers(memory: LoomMemory) -> tuple[list[str], list[str], list[str]]:
    return (
        [t.task_id for t in memory.get_l1_tasks(limit=100)],
        [t.task_id for t in memory.get_l2_tasks()],
        [s.task_id for s in memory.get_l3_summaries()],
    )


Breaker = Callable[[SQLiteStore], None]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "memory.db") as store:
        yield store


def _full_disk(store: SQLiteStore) -> None:
    # SQLite's own "database or disk is full" (SQLITE_FULL): the file may not grow a page.
    assert store._conn is not None
    (pages,) = store._conn.execute("PRAGMA page_count").fetchone()
    store._conn.execute(f"PRAGMA max_page_count = {pages}")


def _read_only(store: SQLiteStore) -> None:
    # "attempt to write a readonly database" (chmod does not stop root, who runs CI here).
    assert store._conn is not None
    store._conn.execute("PRAGMA query_only = ON")


def _writable(store: SQLiteStore) -> None:
    assert store._conn is not None
    store._conn.execute("PRAGMA query_only = OFF")
    store._conn.execute("PRAGMA max_page_count = 1073741823")


@pytest.mark.parametrize("break_store", [_full_disk, _read_only], ids=["full", "read-only"])
def test_a_failed_add_leaves_no_trace(store: SQLiteStore, break_store: Breaker) -> None:
    memory = LoomMemory("s", store=store, tiers=MemoryTiers(max_l1_size=3), embedder=None)
    memory.add_tasks([task(1), task(2), task(3)])
    before = tiers(memory)
    break_store(store)
    big = task(4, text="failmark4 " + "x" * 200_000)  # more than the file may grow by
    with pytest.raises(StoreError):
        memory.add_task(big)
    # Not in L1 (so in no window), and t1 was not pushed out by it.
    assert tiers(memory) == before
    assert memory.search_tasks("failmark4") == []
    _writable(store)
    memory.add_task(task(5))
    assert tiers(memory)[0] == ["t2", "t3", "t5"]
    assert tiers(
        LoomMemory("again", store=store, namespace=memory.namespace, embedder=None)
    ) == tiers(memory)
    orders = [r.data["order"] for r in store.scan(memory.namespace, exact=True, kind="task")]
    assert len(orders) == len(set(orders))


@pytest.mark.parametrize("break_store", [_full_disk, _read_only], ids=["full", "read-only"])
def test_a_failed_promotion_leaves_the_tiers_as_they_were(
    store: SQLiteStore, break_store: Breaker
) -> None:
    memory = LoomMemory(
        "s", store=store, tiers=MemoryTiers(max_l1_size=2, max_l2_size=1), embedder=None
    )
    memory.add_tasks([task(1, 0.9), task(2, 0.2), task(3, 0.2)])  # t1 left L1, unpromoted
    before = tiers(memory)
    break_store(store)
    # The summaries to write are big enough to need new pages on a full disk.
    memory.summary_tokens = 4_000
    failure = None
    for n in range(4, 40):  # each promotion writes; one of them will not fit
        try:
            memory.promote_tasks()
            memory.add_tasks([task(n, 0.9, text=f"failmark{n} " + "y" * 50_000)])
        except StoreError as error:
            failure = error
            break
    assert failure is not None
    failed = tiers(memory)
    _writable(store)
    assert failed == tiers(
        LoomMemory("again", store=store, namespace=memory.namespace, embedder=None)
    )
    if break_store is _read_only:
        assert failed == before  # the very first write failed
    memory.promote_tasks()
    assert "t1" in tiers(memory)[2] or "t1" in tiers(memory)[1]


def test_text_that_cannot_be_encoded_is_made_valid_before_it_is_stored(
    store: SQLiteStore,
) -> None:
    """A Task records what already happened, so its text is kept, made valid (a lone surrogate
    becomes U+FFFD, see `loomctx.messages.valid_text`); the store refuses what a caller writes
    to it directly with such text, and nothing of a refused batch is kept."""
    memory = LoomMemory("s", store=store, tiers=MemoryTiers(max_l1_size=2), embedder=None)
    memory.add_tasks([task(1), task(2)])
    memory.add_task(task(3, text="failmark3 caf\udce9"))  # decoded with surrogateescape
    reopened = LoomMemory("again", store=store, namespace=memory.namespace, embedder=None)
    stored = next(t for t in reopened.get_l1_tasks(limit=10) if t.task_id == "t3")
    assert "caf\ufffd" in str(stored.parameters)
    raw = Record(namespace=("raw",), key="k", kind="note", text="caf\udce9")
    with pytest.raises(ConfigError, match="not valid Unicode"):
        store.batch([Put(record=raw), Put(record=replace(raw, key="k2", text="fine"))])
    assert store.batch([Scan(prefix=("raw",))]) == [[]]


def test_a_closed_store_fails_the_add_and_keeps_nothing(store: SQLiteStore) -> None:
    memory = LoomMemory("s", store=store, tiers=MemoryTiers(max_l1_size=2), embedder=None)
    memory.add_task(task(1, 0.9))  # to be promoted
    store.close()
    with pytest.raises(StoreError, match="closed"):
        memory.add_task(task(2))
    with pytest.raises(StoreError, match="closed"):
        memory.promote_tasks()
    # Nothing to read the tiers from; what the memory holds is what was stored.
    assert "L1=1/2" in repr(memory)
    with pytest.raises(StoreError, match="closed"):
        memory.get_l1_tasks()


def test_an_empty_add_writes_nothing(store: SQLiteStore) -> None:
    memory = LoomMemory("s", store=store, embedder=None)
    memory.add_tasks([])
    assert store.version(memory.namespace).seq == 0


def test_tier_changes_that_a_restore_would_order_alike(store: SQLiteStore) -> None:
    """What the tiers hold after a change is exactly what a restore of the store gives."""
    memory = LoomMemory(
        "s", store=store, tiers=MemoryTiers(max_l1_size=5, max_l2_size=2), embedder=None
    )
    memory.add_tasks([task(1, 0.7), task(2, 0.8)])
    memory.promote_tasks()
    assert tiers(memory)[1] == ["t2", "t1"]
    memory.add_task(task(1, 0.95))  # re-added, more important: first in L2 now
    assert tiers(memory)[1] == ["t1", "t2"]
    memory.add_task(task(3, 0.75), tier=MemoryTier.L2)  # L2 is full, and it is not above
    memory.promote_tasks()  # so it waited to be summarized
    assert tiers(memory) == (["t1", "t2"], ["t1", "t2"], ["t3"])
    assert tiers(
        LoomMemory("again", store=store, namespace=memory.namespace, embedder=None)
    ) == tiers(memory)

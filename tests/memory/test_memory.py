"""LoomMemory: tiers, promotion, summaries, search, restore; and a state machine of the tiers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from loomctx import ConfigError, LoomMemory, MemoryTiers, SQLiteStore, Task, TaskStatus
from loomctx.memory import MemoryTier
from loomctx.memory.task import USER_MESSAGE


def task(n: int, importance: float | None = None, text: str = "") -> Task:
    meta = {} if importance is None else {"importance": importance}
    return Task(
        task_id=f"t{n}",
        action="note",
        parameters={"text": text or f"marker{n} remembered fact number {n}"},
        status=TaskStatus.COMPLETED,
        result=f"stored fact {n}",
        metadata=meta,
    )


def test_l1_is_a_ring_buffer_oldest_first() -> None:
    memory = LoomMemory("agent", tiers=MemoryTiers(max_l1_size=3), embedder=None)
    for n in range(5):
        memory.add_task(task(n, 0.1))
    assert [t.task_id for t in memory.get_l1_tasks(limit=10)] == ["t2", "t3", "t4"]
    assert [t.task_id for t in memory.get_l1_tasks(limit=2)] == ["t3", "t4"]
    assert memory.get_l1_tasks(limit=0) == []


def test_promotion_to_l2_by_importance_and_replacement_when_full() -> None:
    memory = LoomMemory("agent", tiers=MemoryTiers(max_l1_size=10, max_l2_size=2), embedder=None)
    memory.add_task(task(1, 0.65))
    memory.add_task(task(2, 0.9))
    memory.add_task(task(3, 0.5))  # not important enough
    memory.promote_tasks()
    assert [t.task_id for t in memory.get_l2_tasks()] == ["t2", "t1"]
    memory.add_task(task(4, 0.95))
    memory.add_task(task(5, 0.62))  # full, and not above the least important (0.65)
    memory.promote_tasks()
    assert [t.task_id for t in memory.get_l2_tasks()] == ["t4", "t2"]


def test_what_leaves_l1_and_l2_is_summarized_into_l3() -> None:
    memory = LoomMemory("agent", tiers=MemoryTiers(max_l1_size=2, max_l2_size=1), embedder=None)
    memory.add_task(task(1, 0.7))
    memory.add_task(task(2, 0.2))
    memory.promote_tasks()
    assert [t.task_id for t in memory.get_l2_tasks()] == ["t1"]
    for n in (3, 4, 5):
        memory.add_task(task(n, 0.99 if n == 5 else 0.2))
    memory.promote_tasks()
    # t2, t3 left L1 unpromoted; t1 was displaced from L2 by t5 after leaving L1.
    summarized = [s.task_id for s in memory.get_l3_summaries()]
    assert sorted(summarized) == ["t1", "t2", "t3"]
    summary = next(s for s in memory.get_l3_summaries() if s.task_id == "t2")
    assert summary.action == "note"
    assert "marker2" in summary.param_summary
    assert "stored fact 2" in summary.result_summary


def test_among_equally_important_tasks_the_newer_take_l2() -> None:
    # Most user turns score the same: L2 must follow the conversation, not freeze on its
    # first important tasks.
    memory = LoomMemory("agent", tiers=MemoryTiers(max_l1_size=3, max_l2_size=2), embedder=None)
    for n in range(8):
        memory.add_task(task(n, 0.9))
        memory.promote_tasks()
    assert [t.task_id for t in memory.get_l2_tasks()] == ["t7", "t6"]
    memory.add_task(task(8, 0.95))
    memory.add_task(task(9, 0.7))  # less important than both: stays out
    memory.promote_tasks()
    assert [t.task_id for t in memory.get_l2_tasks()] == ["t8", "t7"]


def test_a_bulk_import_fills_l2_and_summarizes_only_the_rest() -> None:
    # One add_tasks call with no promotion in between: what leaves L1 on the way is
    # considered for L2 as promotion would have considered it.
    memory = LoomMemory("agent", tiers=MemoryTiers(max_l1_size=4, max_l2_size=3), embedder=None)
    memory.add_tasks([task(n, 0.9 if n % 5 == 0 else 0.2) for n in range(40)])
    memory.promote_tasks()
    assert [t.task_id for t in memory.get_l1_tasks(limit=10)] == ["t36", "t37", "t38", "t39"]
    assert [t.task_id for t in memory.get_l2_tasks()] == ["t35", "t30", "t25"]
    summarized = {s.task_id for s in memory.get_l3_summaries()}
    assert not summarized & {"t35", "t30", "t25"}


def test_search_decodes_a_task_once_per_version() -> None:
    memory = LoomMemory("agent", tiers=MemoryTiers(max_l1_size=2), embedder=None)
    for n in range(6):
        memory.add_task(task(n, 0.1))
    first = memory.search_tasks("marker1", limit=1)[0]
    assert memory.search_tasks("marker1", limit=1)[0] is first  # not decoded again
    memory.add_task(task(1, 0.1, text="marker1 now says something else"))
    again = memory.search_tasks("marker1", limit=1)[0]
    assert again.parameters["text"] == "marker1 now says something else"


def test_l3_overflow_stays_searchable_in_l4() -> None:
    memory = LoomMemory(
        "agent", tiers=MemoryTiers(max_l1_size=1, max_l2_size=1, max_l3_size=2), embedder=None
    )
    for n in range(6):
        memory.add_task(task(n, 0.1))
        memory.promote_tasks()
    assert len(memory.get_l3_summaries()) == 2
    for n in range(6):
        assert memory.search_tasks(f"marker{n}", limit=1)[0].task_id == f"t{n}"


def test_search_in_english_and_chinese() -> None:
    memory = LoomMemory("agent", embedder=None)
    for text in ("我下周要去上海出差，帮我订酒店", "Book a table for two in Paris on Friday"):
        memory.add_task(
            Task(action=USER_MESSAGE, source_agent="user", parameters={"content": text})
        )
    assert memory.search_tasks("上海的酒店", limit=1)[0].parameters["content"].startswith("我下周")
    assert (
        "Paris" in memory.search_tasks("restaurant table Paris", limit=1)[0].parameters["content"]
    )
    assert memory.search_tasks("   ") == []


def test_direct_tiers() -> None:
    memory = LoomMemory("agent", embedder=None)
    memory.add_task(task(1, 0.1), tier=MemoryTier.L2)
    memory.add_task(task(2), tier=MemoryTier.L3)
    memory.add_task(task(3), tier=MemoryTier.L4)
    assert [t.task_id for t in memory.get_l2_tasks()] == ["t1"]
    assert [s.task_id for s in memory.get_l3_summaries()] == ["t2"]
    assert memory.get_l1_tasks() == []
    assert memory.search_tasks("marker3", limit=1)[0].task_id == "t3"


def test_re_adding_a_task_updates_it() -> None:
    memory = LoomMemory("agent", embedder=None)
    memory.add_task(task(1))
    memory.add_task(task(1, text="marker1 changed its mind"))
    assert len(memory.get_l1_tasks()) == 1
    assert memory.search_tasks("changed mind", limit=1)[0].parameters["text"].endswith("mind")


def test_restore_after_restart_has_the_same_tiers_and_searches(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with SQLiteStore(path) as store:
        memory = LoomMemory(
            "agent", tiers=MemoryTiers(max_l1_size=3, max_l2_size=2), store=store, embedder=None
        )
        for n in range(8):
            memory.add_task(task(n, 0.9 if n % 3 == 0 else 0.2))
            memory.promote_tasks()
        memory.add_task(task(8, 0.2))  # evicts t5 without a promotion yet: pending
        before = (
            memory.get_l1_tasks(),
            memory.get_l2_tasks(),
            memory.get_l3_summaries(),
            [memory.search_tasks(f"marker{n}", limit=1) for n in range(9)],
        )
    with SQLiteStore(path) as store:
        again = LoomMemory(
            "agent", tiers=MemoryTiers(max_l1_size=3, max_l2_size=2), store=store, embedder=None
        )
        after = (
            again.get_l1_tasks(),
            again.get_l2_tasks(),
            again.get_l3_summaries(),
            [again.search_tasks(f"marker{n}", limit=1) for n in range(9)],
        )
        assert after == before
        again.promote_tasks()  # the pending eviction survived the restart
        assert "t5" in {s.task_id for s in again.get_l3_summaries()}


def test_namespaces_keep_memories_apart() -> None:
    with SQLiteStore() as store:
        a = LoomMemory("a", store=store, namespace=("acme", "bot", "s1"), embedder=None)
        b = LoomMemory("b", store=store, namespace=("acme", "bot", "s2"), embedder=None)
        both = LoomMemory("all", store=store, namespace=("acme", "bot", "x"),
                          search_scope=("acme", "bot"), embedder=None)  # fmt: skip
        a.add_task(task(1, text="marker1 secret of session one"))
        assert b.search_tasks("secret session") == []
        assert [t.task_id for t in both.search_tasks("secret session")] == ["t1"]


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"tiers": {"max_l1_size": 0}}, "`max_l1_size`"),
        ({"tiers": {"max_l2_size": True}}, "`max_l2_size`"),
        ({"tiers": {"promote_threshold": 2}}, "`promote_threshold`"),
        ({"tiers": {"summary_tokens": 0}}, "`summary_tokens`"),
        ({"ranking": {"max_l1_size": 5}}, "`ranking` must be a `MemoryRanking`"),
        ({"namespace": ("t", "a"), "search_scope": ("other",)}, "`search_scope`"),
    ],
)
def test_validation(kwargs: dict[str, object], needle: str) -> None:
    options = dict(kwargs)
    tiers: Any = options.pop("tiers", {})
    with pytest.raises(ConfigError, match=needle):
        LoomMemory("agent", **options, embedder=None, tiers=MemoryTiers(**tiers))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="`node_id`"):
        LoomMemory("", embedder=None)
    with pytest.raises(ConfigError, match="takes a Task"):
        LoomMemory("x", embedder=None).add_task("not a task")  # type: ignore[arg-type]


class Tiers(RuleBasedStateMachine):
    """Random adds and promotions; the tier rules hold after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.memory = LoomMemory(
            "agent", tiers=MemoryTiers(max_l1_size=4, max_l2_size=3, max_l3_size=5), embedder=None
        )
        self.added: list[str] = []

    @rule(importance=st.sampled_from([0.1, 0.5, 0.61, 0.7, 0.8, 0.9, 0.95, 1.0]))
    def add(self, importance: float) -> None:
        n = len(self.added)
        self.memory.add_task(task(n, importance))
        self.added.append(f"t{n}")

    @rule()
    def promote(self) -> None:
        self.memory.promote_tasks()
        # Every eviction is summarized by a promotion.
        assert not any(entry.pending for entry in self.memory._entries.values())

    @invariant()
    def capacities_are_never_exceeded(self) -> None:
        assert len(self.memory.get_l1_tasks(limit=100)) <= 4
        assert len(self.memory.get_l2_tasks()) <= 3
        assert len(self.memory.get_l3_summaries()) <= 5

    @invariant()
    def l2_is_ordered_by_importance_and_above_the_threshold(self) -> None:
        imps = [t.metadata["importance"] for t in self.memory.get_l2_tasks()]
        assert imps == sorted(imps, reverse=True)
        assert all(i > 0.6 for i in imps)

    @invariant()
    def nothing_is_lost(self) -> None:
        m = self.memory
        held = {t.task_id for t in m.get_l1_tasks(limit=100)} | {
            t.task_id for t in m.get_l2_tasks()
        }
        pending = {e for e, entry in m._entries.items() if entry.pending}
        summarized = {s.task_id for s in m.get_l3_summaries()}
        for task_id in self.added:
            assert task_id in held | pending | summarized or self._retired(task_id)
        if self.added:  # every task stays findable in L4
            last = self.added[-1]
            assert m.search_tasks(f"marker{last[1:]}", limit=1)[0].task_id == last

    def _retired(self, task_id: str) -> bool:
        """Summarized once and since retired from L3 into the archive; or archived as it is
        because at least L3's size of newer tasks also left the tiers before a promotion."""
        hits = self.memory.store.search(self.memory.namespace, f"marker{task_id[1:]}",
                                        kind="summary")  # fmt: skip
        if any(h.record.data["task_id"] == task_id and not h.record.data["l3"] for h in hits):
            return True
        record = self.memory.store.get(self.memory.namespace, f"task:{task_id}")
        if record is None or any(record.data[f] for f in ("l1", "l2", "pending")):
            return False
        m = self.memory
        held = {t.task_id for t in m.get_l1_tasks(limit=100)} | {
            t.task_id for t in m.get_l2_tasks()
        }
        newer = self.added[self.added.index(task_id) + 1 :]
        return sum(t not in held for t in newer) >= m.max_l3_size

    def teardown(self) -> None:
        for task_id in self.added:
            n = task_id[1:]
            assert self.memory.search_tasks(f"marker{n}", limit=1)[0].task_id == task_id
        self.memory.close()


TestTiers = Tiers.TestCase

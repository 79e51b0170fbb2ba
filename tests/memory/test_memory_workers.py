"""Several workers serve one conversation: `LoomMemory` objects on one namespace, in one
process or in several, each see every turn, in the store's write order, and agree on the
tiers (the store is the truth; each memory's tiers are a cache it keeps current)."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from loomctx import (
    Agent,
    LoomMemory,
    MemoryTiers,
    SQLiteStore,
    Task,
    TaskStatus,
    TiktokenCounter,
    ToolCall,
)
from loomctx.context.recipe import memory_sources, window_orchestrator, window_sources
from loomctx.errors import ConflictError
from loomctx.memory.core import same_view
from loomctx.stores.base import Expect, Put, Record, Version
from loomctx.testing import ScriptedLLM

NS = ("acme", "bot", "session", "s1")


def turn(n: int, importance: float = 0.3) -> Task:
    return Task(
        task_id=f"turn{n}",
        action="note",
        parameters={"text": f"talkmark{n} said in turn {n}"},
        status=TaskStatus.COMPLETED,
        metadata={"importance": importance},
    )


def tiers(memory: LoomMemory) -> tuple[list[str], list[str], list[str]]:
    return (
        [t.task_id for t in memory.get_l1_tasks(limit=1000)],
        [t.task_id for t in memory.get_l2_tasks()],
        [s.task_id for s in memory.get_l3_summaries()],
    )


def test_two_memories_on_one_file_see_one_conversation(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    with SQLiteStore(path) as one, SQLiteStore(path) as two:
        a = LoomMemory("a", store=one, namespace=NS, embedder=None)
        b = LoomMemory("b", store=two, namespace=NS, embedder=None)
        for n in range(6):
            (a if n % 2 == 0 else b).add_task(turn(n))
        expected = [f"turn{n}" for n in range(6)]
        assert tiers(a)[0] == tiers(b)[0] == expected
        # Each knows the other's turns as neighbours too: orders are the write order.
        orders = [r.data["order"] for r in one.scan(NS, exact=True, kind="task")]
        assert orders == list(range(6))


def test_a_stale_writer_catches_up_before_its_write_lands(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    with SQLiteStore(path) as one, SQLiteStore(path) as two:
        a = LoomMemory(
            "a", store=one, namespace=NS, tiers=MemoryTiers(max_l1_size=3), embedder=None
        )
        b = LoomMemory(
            "b", store=two, namespace=NS, tiers=MemoryTiers(max_l1_size=3), embedder=None
        )
        a.add_tasks([turn(0), turn(1), turn(2)])
        # `b` has not read since: its add is worked out on stale tiers, refused by the
        # store's guard, and worked out again on the current ones.
        b.add_task(turn(3))
        assert tiers(a)[0] == tiers(b)[0] == ["turn1", "turn2", "turn3"]
        assert b._seen == two.version(NS)
        fresh = LoomMemory(
            "c", store=one, namespace=NS, tiers=MemoryTiers(max_l1_size=3), embedder=None
        )
        assert tiers(fresh) == tiers(a) == tiers(b)
        a.promote_tasks()
        b.promote_tasks()  # nothing left to do once it caught up
        assert (
            tiers(a) == tiers(b) == tiers(LoomMemory("d", store=two, namespace=NS, embedder=None))
        )
        assert tiers(a)[2] == ["turn0"]


def test_a_callers_guard_is_written_with_the_tasks_or_nothing_is(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    ledger = ("acme", "ledger")
    mark = Record(namespace=ledger, key="m", kind="mark")
    with SQLiteStore(path) as one, SQLiteStore(path) as two:
        a = LoomMemory("a", store=one, namespace=NS, embedder=None)
        b = LoomMemory("b", store=two, namespace=NS, embedder=None)
        seen = one.version(ledger).seq
        a.add_tasks([turn(0)], guard=[Expect(namespace=ledger, seq=seen), Put(record=mark)])
        assert one.get(ledger, "m") is not None  # written with the task, in one batch
        # `b` is stale on the memory (it catches up and writes) and on the caller's ledger
        # (its view moved: nothing is written, the tiers are as they were).
        before = tiers(b)
        with pytest.raises(ConflictError):
            b.add_tasks([turn(1)], guard=[Expect(namespace=ledger, seq=seen), Put(record=mark)])
        assert tiers(b) == before == (["turn0"], [], [])
        assert [
            t.task_id
            for t in LoomMemory("c", store=one, namespace=NS, embedder=None).get_l1_tasks()
        ] == ["turn0"]
        # Stale on its memory only: it catches up and writes, guard and all.
        now = one.version(ledger).seq
        a.add_task(turn(2))
        b.add_tasks([turn(3)], guard=[Expect(namespace=ledger, seq=now), Put(record=mark)])
        assert tiers(b)[0] == tiers(a)[0] == ["turn0", "turn2", "turn3"]
        assert one.version(ledger).seq > now


def test_a_delete_by_another_writer_is_seen_through_a_full_restore(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    with SQLiteStore(path) as one, SQLiteStore(path) as two:
        a = LoomMemory("a", store=one, namespace=NS, embedder=None)
        a.add_tasks([turn(0), turn(1), turn(2)])
        assert two.delete(NS, "task:turn1")
        a_l1 = tiers(a)[0]
        two.put(Record(namespace=NS, key="note", kind="other"))  # a later write, too
        assert a_l1 == ["turn0", "turn2"]
        assert tiers(a)[0] == ["turn0", "turn2"]


def test_a_namespace_that_keeps_changing_is_an_error_not_a_hang() -> None:
    class Busy(SQLiteStore):
        """Another writer gets in before every guarded batch of ours."""

        def batch(self, ops, *, ctx=None):  # type: ignore[no-untyped-def]
            if any(isinstance(op, Put) and op.record.kind == "task" for op in ops):
                super().batch([Put(record=Record(namespace=NS, key="x", kind="other"))])
            return super().batch(ops, ctx=ctx)

    with Busy() as store:
        memory = LoomMemory("a", store=store, namespace=NS, embedder=None)
        with pytest.raises(ConflictError, match="changed under every one"):
            memory.add_task(turn(0))
        assert tiers(memory)[0] == []


class CountingStore(SQLiteStore):
    """Counts the `Version` reads: one per check of another writer's changes."""

    versions = 0

    def batch(self, ops, *, ctx=None):  # type: ignore[no-untyped-def]
        self.versions += sum(isinstance(op, Version) for op in ops)
        return super().batch(ops, ctx=ctx)


def test_in_one_view_a_memory_checks_the_store_once(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    with CountingStore(path) as one, SQLiteStore(path) as two:
        a = LoomMemory("a", store=one, namespace=NS, embedder=None)
        b = LoomMemory("b", store=two, namespace=NS, embedder=None)
        b.add_task(turn(0))
        assert tiers(a)[0] == ["turn0"]
        one.versions = 0
        tiers(a)
        assert one.versions == 3  # outside a view: every read checks
        with same_view():
            assert tiers(a)[0] == ["turn0"]
            b.add_task(turn(1))  # another worker, during the view: seen in the next one
            assert tiers(a)[0] == ["turn0"]
            assert one.versions == 4
        with same_view():
            assert tiers(a)[0] == ["turn0", "turn1"]
            a.add_task(turn(2))  # its own writes are in its view
            assert tiers(a)[0] == ["turn0", "turn1", "turn2"]
            b.add_task(turn(3))
            a.add_task(turn(4))  # stale: refused by the store's guard, caught up, written
            assert tiers(a)[0] == tiers(b)[0] == [f"turn{n}" for n in range(5)]


async def test_an_agent_checks_the_store_once_per_model_call(tmp_path: Path) -> None:
    """An agent's window build reads the memory's tiers four times (L1, L2 twice, the
    retrieval's exclusions); it checks other workers' writes once, as a session's does."""

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    with CountingStore(tmp_path / "agent.db") as store:
        llm = ScriptedLLM([[ToolCall(id="c1", name="add", arguments={"a": 2, "b": 3})], "5."])
        agent = Agent(llm=llm, memory=LoomMemory("agent", store=store, embedder=None), tools=[add])
        store.versions = 0
        checks = [store.versions async for e in agent.stream("2 + 3?") if e.type == "llm_completed"]
        assert checks == [1, 2]  # one per model call


async def test_a_window_build_outside_a_view_checks_the_store_once(tmp_path: Path) -> None:
    """A build reads the tiers four times (history twice, important memory, retrieval's
    exclusions); outside an agent's or a session's view it opens one of its own, so another
    worker's writes are checked once, and seen by the next build."""
    path = tmp_path / "shared.db"
    with CountingStore(path) as one, SQLiteStore(path) as two:
        a = LoomMemory("a", store=one, namespace=NS, embedder=None)
        b = LoomMemory("b", store=two, namespace=NS, embedder=None)
        a.add_task(turn(0))
        sources = window_sources("Be brief.", memory=memory_sources(a))
        orch = window_orchestrator(sources, counter=TiktokenCounter(), window=8000)
        one.versions = 0
        await orch.build(query="what was said?")
        assert one.versions == 1
        b.add_task(turn(1))
        window = await orch.build(query="what was said?")
        assert one.versions == 3  # one check, which read the changes with the version again
        assert "talkmark1" in str(window.to_openai())


async def test_a_view_follows_the_task_that_opened_it(tmp_path: Path) -> None:
    with CountingStore(tmp_path / "one.db") as store:
        a = LoomMemory("a", store=store, namespace=NS, embedder=None)
        opened, read = asyncio.Event(), asyncio.Event()
        checks: dict[str, int] = {}

        async def build() -> None:
            with same_view():
                tiers(a)
                checks["view opened"] = store.versions
                opened.set()
                await read.wait()
                # Tasks and threads started in the view share it: no second check.
                async with asyncio.TaskGroup() as group:
                    group.create_task(asyncio.to_thread(tiers, a))
                checks["view's task"] = store.versions

        async def other() -> None:
            await opened.wait()
            tiers(a)  # another task, outside the view: checks, on every read
            checks["other task"] = store.versions
            read.set()

        store.versions = 0
        await asyncio.gather(build(), other())
        assert checks == {"view opened": 1, "other task": 4, "view's task": 4}


class TwoWorkers(RuleBasedStateMachine):
    """Two memories on one namespace, each on its own connection, used in any order: both
    always hold exactly what a memory restored from the store holds."""

    def __init__(self, path: Path, namespace: tuple[str, ...]) -> None:
        super().__init__()
        self.stores = [SQLiteStore(path), SQLiteStore(path)]
        self.namespace = namespace
        sizes = MemoryTiers(max_l1_size=3, max_l2_size=2, max_l3_size=3)
        self.memories = [
            LoomMemory(f"w{i}", store=s, namespace=namespace, tiers=sizes, embedder=None)
            for i, s in enumerate(self.stores)
        ]
        self.sizes = sizes
        self.added: list[str] = []
        self.last_was_add = False

    def teardown(self) -> None:
        for store in self.stores:
            store.close()

    @rule(worker=st.integers(0, 1), importance=st.sampled_from([0.2, 0.7, 0.9]))
    def add(self, worker: int, importance: float) -> None:
        n = len(self.added)
        self.memories[worker].add_task(turn(n, importance))
        self.added.append(f"turn{n}")
        self.last_was_add = True

    @rule(worker=st.integers(0, 1))
    def promote(self, worker: int) -> None:
        self.memories[worker].promote_tasks()
        self.last_was_add = False

    @rule(worker=st.integers(0, 1))
    def re_add_the_first(self, worker: int) -> None:
        if self.added:
            self.memories[worker].add_task(turn(0, 0.95))
            self.last_was_add = False

    @invariant()
    def both_hold_what_the_store_holds(self) -> None:
        fresh = LoomMemory(
            "fresh", store=self.stores[0], namespace=self.namespace, tiers=self.sizes, embedder=None
        )
        expected = tiers(fresh)
        for memory in self.memories:
            assert tiers(memory) == expected
        # L1 is in the order the turns were written, whoever wrote them.
        found = self.stores[1].scan(self.namespace, exact=True, kind="task")
        records = {r.data["task_id"]: r for r in found}
        orders = [int(records[task_id].data["order"]) for task_id in expected[0]]
        assert orders == sorted(orders)
        if self.last_was_add:
            assert expected[0][-1] == self.added[-1]

    @invariant()
    def each_turn_has_its_own_place(self) -> None:
        records = self.stores[1].scan(self.namespace, exact=True, kind="task")
        orders = [int(r.data["order"]) for r in records if int(r.data["order"]) >= 0]
        assert len(orders) == len(set(orders))


def test_two_workers_in_any_order_agree_with_the_store(tmp_path: Path) -> None:
    sessions = itertools.count()
    run_state_machine_as_test(
        lambda: TwoWorkers(tmp_path / "workers.db", ("t", "a", "session", f"s{next(sessions)}")),
        settings=settings(max_examples=40, stateful_step_count=20, deadline=None),
    )


WORKER = textwrap.dedent(
    """
    import json, sys
    from loomctx import LoomMemory, MemoryTiers, SQLiteStore, Task, TaskStatus

    store = SQLiteStore(sys.argv[1])
    memory = LoomMemory(sys.argv[2], store=store, namespace=("acme", "bot", "session", "s1"),
                        tiers=MemoryTiers(max_l1_size=8, max_l2_size=4), embedder=None)

    def state():
        return [[t.task_id for t in memory.get_l1_tasks(limit=100)],
                [t.task_id for t in memory.get_l2_tasks()],
                [s.task_id for s in memory.get_l3_summaries()]]

    for line in sys.stdin:
        n = int(line)
        if n < 0:
            break
        seen = state()
        memory.add_task(Task(task_id=f"turn{n}", action="note", status=TaskStatus.COMPLETED,
                             parameters={"text": f"talkmark{n} said in turn {n}"},
                             metadata={"importance": 0.9 if n % 4 == 0 else 0.3}))
        if n % 3 == 0:
            memory.promote_tasks()
        print(json.dumps(seen), flush=True)
    print(json.dumps(state()), flush=True)
    store.close()
    """
)


def ask(worker: subprocess.Popen[str], n: int) -> Any:
    """Tell a worker to write turn `n` (-1: to stop); its answer: the tiers it saw first."""
    assert worker.stdin is not None
    assert worker.stdout is not None
    worker.stdin.write(f"{n}\n")
    worker.stdin.flush()
    return json.loads(worker.stdout.readline())


def test_two_processes_writing_in_turn_each_see_the_whole_conversation(tmp_path: Path) -> None:
    path = tmp_path / "workers.db"
    SQLiteStore(path).close()  # created (and migrated) once, before the workers race to
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(path), name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in ("worker-a", "worker-b")
    ]
    try:
        for n in range(24):
            l1, _, _ = ask(workers[n % 2], n)
            # Before writing turn n, this worker sees turns n-8 .. n-1: the other's as well.
            assert l1 == [f"turn{i}" for i in range(max(0, n - 8), n)]
        finals = []
        for worker in workers:
            finals.append(ask(worker, -1))
            assert worker.wait(timeout=60) == 0
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
            for pipe in (worker.stdin, worker.stdout):
                if pipe is not None:
                    pipe.close()
    with SQLiteStore(path) as store:
        restored = LoomMemory(
            "reader",
            store=store,
            namespace=NS,
            tiers=MemoryTiers(max_l1_size=8, max_l2_size=4),
            embedder=None,
        )
        expected = [list(part) for part in tiers(restored)]
    assert finals[0] == finals[1] == expected
    assert expected[0] == [f"turn{i}" for i in range(16, 24)]
    # The four newest important turns (every fourth), promoted by either worker, seen by both.
    assert expected[1] == ["turn20", "turn16", "turn12", "turn8"]

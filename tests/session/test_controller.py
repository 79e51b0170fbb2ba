"""`ContextController`: sessions found and made, Tasks distributed, durability, persistence."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from loomctx.errors import ConfigError
from loomctx.memory.settings import MemoryTiers
from loomctx.session import topics
from loomctx.session.bus import InProcessEventBus
from loomctx.session.controller import ContextController
from loomctx.session.session import Session, SessionState
from loomctx.stores.sqlite import SQLiteStore
from tests.session._helpers import Recorder, note, said


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    return SQLiteStore(tmp_path / "sessions.db")


@pytest.fixture
async def env(store: SQLiteStore) -> AsyncIterator[tuple[ContextController, Recorder]]:
    bus = InProcessEventBus()
    recorder = Recorder()
    bus.subscribe("*", recorder, name="recorder")
    async with ContextController(store, bus) as controller:
        yield controller, recorder
    await bus.close()
    store.close()


def l1(session: Session) -> list[str]:
    return [t.task_id for t in session.memory.get_l1_tasks(limit=1000)]


# --- finding and making sessions --------------------------------------------------------------


async def test_create_and_get_sessions(env: tuple[ContextController, Recorder]) -> None:
    controller, recorder = env
    made = await controller.create_session()
    assert len(made.id) == 32
    named = await controller.create_session("alice", priority=0.7)
    assert controller.get_session("alice") is named
    assert controller.session_ids() == [made.id, "alice"]
    assert controller.session_ids("active") == [made.id, "alice"]
    assert controller.session_ids(SessionState.ENDED) == []
    created = await recorder.wait_for(topics.SESSION_CREATED, 2)
    assert [e.payload["session_id"] for e in created] == [made.id, "alice"]
    assert repr(controller).startswith("ContextController(agent='agent', loaded_sessions=2")


@pytest.mark.parametrize("bad", ["", "  ", "a/b", 7])
async def test_session_ids_must_be_namespace_parts(
    env: tuple[ContextController, Recorder], bad: object
) -> None:
    controller, _ = env
    with pytest.raises(ConfigError, match="`session_id` must be a non-empty string without '/'"):
        await controller.create_session(bad)  # type: ignore[arg-type]


async def test_ids_are_unique_even_across_processes(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, _ = env
    await controller.create_session("alice")
    with pytest.raises(ConfigError, match="'alice' already exists; reopen it with `get_session`"):
        await controller.create_session("alice")
    other = ContextController(controller.store, InProcessEventBus())  # has not loaded alice
    with pytest.raises(ConfigError, match="already exists"):
        await other.create_session("alice")
    await other.close()


async def test_an_unknown_session_is_a_config_error(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, _ = env
    with pytest.raises(ConfigError, match="no session 'bob' for agent 'agent'; create it"):
        controller.get_session("bob")


async def test_agents_and_tenants_do_not_see_each_others_sessions(store: SQLiteStore) -> None:
    async with (
        ContextController(store, agent_id="a1") as a1,
        ContextController(store, agent_id="a2") as a2,
        ContextController(store, agent_id="a1", tenant_id="t2") as t2,
    ):
        await a1.create_session("s")
        await a2.create_session("s")
        assert t2.session_ids() == []
        with pytest.raises(ConfigError, match="`agent_id` must be"):
            ContextController(store, agent_id="x/y")


# --- distribution -----------------------------------------------------------------------------


async def test_distribute_task_reaches_exactly_the_named_sessions(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, _ = env
    a, b, c = [await controller.create_session(s) for s in "abc"]
    await c.pause()
    got = await controller.distribute_task(note("memo", "new policy"), ["a", "c", "a"])
    assert got == ["a", "c"]
    assert l1(a) == ["memo"]
    assert l1(b) == []
    assert [t.task_id for t in c.queued] == ["memo"]


async def test_a_bad_target_means_the_task_goes_nowhere(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, _ = env
    a = await controller.create_session("a")
    ended = await controller.create_session("z")
    await ended.end()
    with pytest.raises(ConfigError, match="no session 'ghost'"):
        await controller.distribute_task(note("m", "x"), ["a", "ghost"])
    with pytest.raises(ConfigError, match="cannot distribute a Task to ended session\\(s\\) 'z'"):
        await controller.distribute_task(note("m", "x"), ["a", "z"])
    with pytest.raises(ConfigError, match="got the string 'a'; wrap one id in a list"):
        await controller.distribute_task(note("m", "x"), "a")
    with pytest.raises(ConfigError, match="takes a Task, got str"):
        await controller.distribute_task("m", ["a"])  # type: ignore[arg-type]
    assert l1(a) == []


async def test_broadcast_reaches_every_live_session_including_unloaded_ones(
    store: SQLiteStore,
) -> None:
    async with ContextController(store) as first:
        for sid in ("a", "b", "c", "d"):
            await first.create_session(sid)
        await first.get_session("c").pause()
        await first.get_session("d").end()
    async with ContextController(store) as controller:
        got = await controller.broadcast(note("policy", "refunds now take 5 days"))
        assert got == ["a", "b", "c"]
        assert l1(controller.get_session("a")) == ["policy"]
        assert [t.task_id for t in controller.get_session("c").queued] == ["policy"]
        assert l1(controller.get_session("d")) == []


async def test_distribute_filtered_asks_the_predicate(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, _ = env
    await controller.create_session("gold1", metadata={"plan": "gold"})
    await controller.create_session("free1", metadata={"plan": "free"})
    await controller.create_session("gold2", metadata={"plan": "gold"})
    await (await controller.create_session("gold3", metadata={"plan": "gold"})).end()
    got = await controller.distribute_filtered(
        note("perk", "free shipping"), lambda s: s.metadata.get("plan") == "gold"
    )
    assert got == ["gold1", "gold2"]
    assert l1(controller.get_session("free1")) == []
    with pytest.raises(ConfigError, match="`predicate` must be a function"):
        await controller.distribute_filtered(note("x", "y"), "gold")  # type: ignore[arg-type]


# --- durability -------------------------------------------------------------------------------


async def test_sessions_survive_a_restart_with_the_same_state(store: SQLiteStore) -> None:
    options = {
        "system_prompt": "Be brief.",
        "tiers": MemoryTiers(max_l1_size=4, max_l2_size=2, max_l3_size=3),
        "priority": 0.8,
        "metadata": {"customer": "c-17"},
        "model_context_window": 4096,
        "max_output_tokens": 512,
    }
    async with ContextController(store) as first:
        a = await first.create_session("a", **options)
        for i in range(8):
            await a.add_task(note(f"n{i}", f"fact {i}", importance=0.9 if i % 3 == 0 else 0.2))
        await a.promote_tasks()
        b = await first.create_session("b")
        await b.add_task(said("u1", "hello"))
        await b.pause()
        await b.add_task(said("u2", "are you there"))
        c = await first.create_session("c")
        await c.end()
        before = {
            "l1": l1(a),
            "l2": [t.task_id for t in a.memory.get_l2_tasks()],
            "l3": [s.task_id for s in a.memory.get_l3_summaries()],
        }
    assert before["l3"]  # the small tiers overflowed into L3

    store = SQLiteStore(store.path)
    async with ContextController(store) as second:
        a2, b2, c2 = (second.get_session(s) for s in "abc")
        assert (a2.state, b2.state, c2.state) == (
            SessionState.ACTIVE,
            SessionState.PAUSED,
            SessionState.ENDED,
        )
        assert a2.options == a.options
        assert a2.created_at == a.created_at
        assert {
            "l1": l1(a2),
            "l2": [t.task_id for t in a2.memory.get_l2_tasks()],
            "l3": [s.task_id for s in a2.memory.get_l3_summaries()],
        } == before
        assert [t.task_id for t in b2.queued] == ["u2"]
        await b2.resume()
        assert l1(b2) == ["u1", "u2"]
        window = await a2.build_context("fact")
        assert window.messages[0].content == "Be brief."
        assert window.report.available == 4096 - 512
    store.close()


# --- persistence (L3 -> L4) and the timer -----------------------------------------------------


async def test_ending_a_session_archives_it_at_the_agent_level(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, recorder = env
    a = await controller.create_session("a")
    await a.add_task(note("n1", "the warehouse in Porto closed"))
    assert controller.memory.search_tasks("Porto") == []
    await controller.end_session("a")
    assert a.state is SessionState.ENDED
    (done,) = await recorder.wait_for(topics.MEMORY_PERSISTED)
    assert dict(done.payload) == {"session_id": "a", "reason": "session_ended", "tasks": 1}
    assert [t.task_id for t in controller.memory.search_tasks("Porto")] == ["n1"]
    assert controller.persister.unfinished() == []
    persist = recorder.of(topics.MEMORY_PERSIST)
    assert [e.payload["reason"] for e in persist] == ["session_ended"]


async def test_persist_copies_only_what_is_new(env: tuple[ContextController, Recorder]) -> None:
    controller, recorder = env
    a = await controller.create_session("a")
    b = await controller.create_session("b")
    await a.add_task(note("n1", "first fact"))
    assert await controller.persist() == ["a"]
    assert await controller.persist() == []  # nothing new since
    await recorder.wait_for(topics.MEMORY_PERSISTED)
    await a.add_task(note("n2", "second fact"))
    assert await controller.persist(["a", "b"]) == ["a", "b"]
    done = await recorder.wait_for(topics.MEMORY_PERSISTED, 3)
    assert [(e.payload["session_id"], e.payload["tasks"]) for e in done] == [
        ("a", 1),
        ("a", 1),
        ("b", 0),
    ]
    assert {e.payload["reason"] for e in done} == {"requested"}
    assert b.state is SessionState.ACTIVE


async def test_the_timer_persists_sessions_that_changed(store: SQLiteStore) -> None:
    bus = InProcessEventBus()
    recorder = Recorder()
    bus.subscribe(topics.MEMORY_PERSISTED, recorder)
    async with ContextController(store, bus, persist_interval=0.01) as controller:
        a = await controller.create_session("a")
        await a.add_task(note("n1", "a fact for the timer"))
        (done,) = await recorder.wait_for(topics.MEMORY_PERSISTED)
        assert dict(done.payload) == {"session_id": "a", "reason": "timer", "tasks": 1}
        assert controller.memory.search_tasks("timer")[0].task_id == "n1"
    await bus.close()
    assert asyncio.all_tasks() == {asyncio.current_task()}


@pytest.mark.parametrize("bad", [0, -1, "1", float("nan")])
def test_persist_interval_must_be_positive(bad: object) -> None:
    with pytest.raises(ConfigError, match="`persist_interval` must be a number of seconds > 0"):
        ContextController(persist_interval=bad)  # type: ignore[arg-type]


async def test_archiving_interrupted_by_a_crash_is_requested_again_on_start(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, recorder = env
    a = await controller.create_session("a")
    await a.add_task(note("n1", "the Porto warehouse"))
    await a.end()
    await recorder.wait_for(topics.MEMORY_PERSISTED)
    # As if the process died after storing ENDED and before the persister finished.
    store = controller.store
    layout = controller.layout
    assert isinstance(store, SQLiteStore)
    assert store.delete(layout.sessions, layout.archived_key("a"))
    assert controller.persister.unfinished() == ["a"]
    bus = InProcessEventBus()
    again = Recorder()
    bus.subscribe(topics.MEMORY_PERSISTED, again)
    async with ContextController(store, bus, agent_id="agent") as restarted:
        (done,) = await again.wait_for(topics.MEMORY_PERSISTED)
        assert dict(done.payload) == {"session_id": "a", "reason": "session_ended", "tasks": 1}
        assert restarted.persister.unfinished() == []
    await bus.close()


# --- the controller's own lifecycle -----------------------------------------------------------


async def test_a_controller_without_store_or_bus_owns_and_closes_them() -> None:
    controller = ContextController()
    await controller.start()
    await controller.start()  # idempotent
    session = await controller.create_session("a")
    await session.add_task(said("u1", "hi"))
    bus = controller.bus
    assert isinstance(bus, InProcessEventBus)
    await controller.close()
    await controller.close()  # idempotent
    assert bus.closed
    with pytest.raises(ConfigError, match="the ContextController is closed"):
        controller.get_session("a")
    with pytest.raises(ConfigError, match="the ContextController is closed"):
        await controller.start()
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_the_promotion_trigger_ignores_sessions_it_does_not_hold(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, recorder = env
    await controller.bus.publish(topics.TASK_ADDED, {"session_id": "elsewhere", "task_id": "t"})
    ended = await controller.create_session("z")
    await ended.end()
    ended.needs_promotion = True
    await controller.bus.publish(topics.TASK_ADDED, {"session_id": "z", "task_id": "t"})
    await recorder.wait_for(topics.TASK_ADDED, 2)
    await controller.close()
    assert isinstance(controller.bus, InProcessEventBus)
    assert list(controller.bus.failures) == []
    assert recorder.of(topics.TASK_PROMOTED) == []

"""`Session`: lifecycle, Tasks in each state, the window it builds, options, promotion."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from loomctx.context.sources import ToolSource
from loomctx.errors import ConfigError
from loomctx.memory.core import LoomMemory
from loomctx.memory.settings import MemoryTiers
from loomctx.session import topics
from loomctx.session.bus import InProcessEventBus
from loomctx.session.controller import ContextController
from loomctx.session.options import SessionOptions
from loomctx.session.session import Session, SessionState
from loomctx.stores.sqlite import SQLiteStore
from tests.session._helpers import Knowledge, Recorder, note, said, text_of

PROMPT = "You are the support agent of a bookshop. Quote order numbers exactly."


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[tuple[ContextController, Recorder]]:
    store = SQLiteStore(tmp_path / "sessions.db")
    bus = InProcessEventBus()
    recorder = Recorder()
    bus.subscribe("*", recorder, name="recorder")
    controller = ContextController(store, bus)
    await controller.start()
    yield controller, recorder
    await controller.close()
    await bus.close()
    store.close()


async def in_state(controller: ContextController, state: SessionState) -> Session:
    session = await controller.create_session(f"s-{state.value}", system_prompt=PROMPT)
    if state is SessionState.PAUSED:
        await session.pause()
    elif state is SessionState.ENDED:
        await session.end()
    return session


# --- lifecycle --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "final"),
    [
        (["pause", "resume", "end"], SessionState.ENDED),
        (["pause", "end"], SessionState.ENDED),
        (["end"], SessionState.ENDED),
        (["pause", "resume", "pause"], SessionState.PAUSED),
    ],
)
async def test_valid_transitions_are_stored_and_published(
    env: tuple[ContextController, Recorder], path: list[str], final: SessionState
) -> None:
    controller, recorder = env
    session = await controller.create_session("s1")
    assert session.state is SessionState.ACTIVE
    for call in path:
        await getattr(session, call)()
    assert session.state is final
    other = ContextController(controller.store, InProcessEventBus())
    assert other.get_session("s1").state is final
    names = {
        "pause": topics.SESSION_PAUSED,
        "resume": topics.SESSION_RESUMED,
        "end": topics.SESSION_ENDED,
    }
    expected = [topics.SESSION_CREATED, *(names[c] for c in path)]
    await recorder.wait_for(expected[-1], expected.count(expected[-1]))
    lifecycle = [t for t in recorder.topics() if t.startswith("session.")]
    assert lifecycle == expected
    assert all(e.payload["session_id"] == "s1" for e in recorder.events)
    await other.close()


@pytest.mark.parametrize(
    ("state", "call", "allowed"),
    [
        (SessionState.ACTIVE, "resume", "`pause()` or `end()`"),
        (SessionState.PAUSED, "pause", "`resume()` or `end()`"),
        (SessionState.ENDED, "pause", "none (ended is final)"),
        (SessionState.ENDED, "resume", "none (ended is final)"),
        (SessionState.ENDED, "end", "none (ended is final)"),
    ],
)
async def test_invalid_transitions_raise_and_change_nothing(
    env: tuple[ContextController, Recorder], state: SessionState, call: str, allowed: str
) -> None:
    controller, _ = env
    session = await in_state(controller, state)
    with pytest.raises(ConfigError, match=rf"cannot `{call}\(\)`.*it is {state.value}") as err:
        await getattr(session, call)()
    assert allowed in str(err.value)
    assert session.state is state
    assert controller.session_ids(state) == [session.id]


# --- Tasks in each state ----------------------------------------------------------------------


async def test_an_acknowledged_task_is_in_the_store(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, recorder = env
    session = await controller.create_session("s1")
    await session.add_task(note("t1", "the parcel left Lisbon"))
    # Another memory on the same store and namespace sees it: it was committed.
    reader = LoomMemory(
        "s1", store=controller.store, namespace=controller.layout.memory("s1"), embedder=None
    )
    assert [t.task_id for t in reader.get_l1_tasks()] == ["t1"]
    (added,) = await recorder.wait_for(topics.TASK_ADDED)
    assert dict(added.payload) == {"session_id": "s1", "task_id": "t1", "importance": 0.3}


async def test_a_paused_session_queues_tasks_durably_and_records_them_on_resume(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, recorder = env
    session = await controller.create_session("s1", system_prompt=PROMPT)
    await session.add_task(said("u1", "where is order 1234"))
    await session.pause()
    await session.add_task(said("u2", "also order 5678"))
    await session.add_task(note("n3", "order 5678 shipped"))
    await session.add_task(said("u2", "also order 5678, please"))  # an update keeps one entry
    assert [t.task_id for t in session.queued] == ["n3", "u2"]
    assert [t.task_id for t in session.memory.get_l1_tasks()] == ["u1"]
    window = await session.build_context("status?")
    assert "5678" not in text_of(window)  # a paused session's window is as it was paused

    # A new controller on the same store sees the queue.
    other = ContextController(controller.store, InProcessEventBus())
    assert [t.task_id for t in other.get_session("s1").queued] == ["n3", "u2"]
    await other.close()

    await session.resume()
    assert session.queued == ()
    assert [t.task_id for t in session.memory.get_l1_tasks()] == ["u1", "n3", "u2"]
    assert "5678, please" in text_of(await session.build_context("status?"))
    queued = await recorder.wait_for(topics.TASK_QUEUED, 3)
    assert [e.payload["task_id"] for e in queued] == ["u2", "n3", "u2"]
    added = await recorder.wait_for(topics.TASK_ADDED, 3)
    assert [e.payload["task_id"] for e in added] == ["u1", "n3", "u2"]
    again = ContextController(controller.store, InProcessEventBus())
    assert again.get_session("s1").queued == ()
    await again.close()


async def test_ending_a_paused_session_records_its_queue_first(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, recorder = env
    session = await controller.create_session("s1")
    await session.pause()
    await session.add_task(said("u1", "cancel order 42"))
    await session.end()
    assert [t.task_id for t in session.memory.get_l1_tasks()] == ["u1"]
    assert [t.task_id for t in session.memory.get_l2_tasks()] == ["u1"]  # end promotes
    await recorder.wait_for(topics.MEMORY_PERSISTED)
    assert controller.memory.search_tasks("cancel order 42")[0].task_id == "u1"


@pytest.mark.parametrize("call", ["add_task", "build_context", "promote_tasks"])
async def test_an_ended_session_refuses_work(
    env: tuple[ContextController, Recorder], call: str
) -> None:
    controller, _ = env
    session = await in_state(controller, SessionState.ENDED)
    args = {"add_task": (said("u", "hi"),), "build_context": ("hi",), "promote_tasks": ()}[call]
    with pytest.raises(ConfigError, match="has ended and its content is archived"):
        await getattr(session, call)(*args)


async def test_add_task_takes_only_tasks(env: tuple[ContextController, Recorder]) -> None:
    controller, _ = env
    session = await controller.create_session("s1")
    with pytest.raises(ConfigError, match="takes a Task, got dict"):
        await session.add_task({"action": "x"})  # type: ignore[arg-type]


# --- the window -------------------------------------------------------------------------------


async def test_the_window_has_the_prompt_once_knowledge_memory_and_the_query_last(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, recorder = env
    kb = Knowledge(["Refunds are paid within 5 days.", "Parcels to Lisbon arrive within a week."])
    session = await controller.create_session("s1", system_prompt=PROMPT, sources=[kb])
    for i in range(3):
        await session.add_task(said(f"u{i}", f"question {i} about my refund"))
    window = await session.build_context("how long does a refund take")
    text = text_of(window)
    assert text.count(PROMPT) == 1
    assert window.messages[0].role == "system"
    assert window.messages[0].content == PROMPT
    assert "Refunds are paid within 5 days." in text
    assert "Lisbon" not in text  # the knowledge source offered only what matches
    assert window.messages[-1].role == "user"
    assert window.messages[-1].content == "how long does a refund take"
    used = {s.name: s.used for s in window.report.sources}
    assert used["RAG_knowledge"] > 0
    assert used["L1_recent"] > 0
    assert window.token_count == controller.counter.count_messages(window.messages)
    (event,) = await recorder.wait_for(topics.CONTEXT_ASSEMBLED)
    assert event.payload["session_ids"] == ("s1",)
    assert event.payload["strategy"] is None
    assert event.payload["report"]["total_tokens"] == window.token_count


async def test_sources_can_be_added_later_but_not_twice(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, _ = env
    session = await controller.create_session("s1")
    session.add_source(ToolSource([]))
    with pytest.raises(ConfigError, match="two sources are named `L1_recent`"):
        session.add_source(Knowledge([], name="L1_recent"))


# --- options ----------------------------------------------------------------------------------


async def test_unknown_options_name_the_option_and_the_accepted_ones(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, _ = env
    with pytest.raises(ConfigError, match="unknown session option `prompt`") as err:
        await controller.create_session("s1", prompt="hi")
    for name in SessionOptions.names():
        assert f"`{name}`" in str(err.value)
    assert controller.session_ids() == []  # nothing was stored


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"system_prompt": 3}, "`system_prompt` must be a string"),
        ({"sources": "kb"}, "`sources` must be a list"),
        ({"sources": [object()]}, "holds object, which is not a ContextSource"),
        ({"model_context_window": 0}, "`model_context_window` must be an int >= 1"),
        ({"tiers": {"max_l1_size": 3}}, "option `tiers` must be a `MemoryTiers`"),
        ({"max_l1_size": 3}, r"pass `tiers=MemoryTiers\(max_l1_size=...\)`"),
        ({"max_l3_size": 3}, r"pass `tiers=MemoryTiers\(max_l3_size=...\)`"),
        ({"output_reserve_ratio": 0.2, "max_output_tokens": 10}, "not both"),
        ({"priority": 1.5}, "`priority` must be a number from 0 to 1"),
        ({"priority": True}, "`priority` must be a number from 0 to 1"),
        ({"metadata": ["x"]}, "`metadata` must be a mapping with string keys"),
        ({"metadata": {1: "x"}}, "`metadata` must be a mapping with string keys"),
        ({"metadata": {"x": object()}}, "`metadata` must be JSON"),
        ({"metadata": {"x": float("nan")}}, "`metadata` must be JSON"),
    ],
)
def test_bad_option_values_are_config_errors(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SessionOptions.from_options(options)


def test_options_round_trip_through_their_stored_form() -> None:
    options = SessionOptions.from_options(
        {
            "system_prompt": "p",
            "priority": 1,
            "metadata": {"plan": "gold", "seats": [1, 2]},
            "tiers": MemoryTiers(max_l1_size=7, promote_threshold=0.5),
        }
    )
    assert options.priority == 1.0
    data = options.to_dict()
    assert "sources" not in data
    assert json.loads(json.dumps(data)) == data
    assert SessionOptions.from_dict(data) == options


def test_options_stored_by_earlier_versions_keep_their_tier_sizes() -> None:
    stored = {"system_prompt": "p", "max_l1_size": 4, "max_l2_size": 2, "max_l3_size": 3}
    options = SessionOptions.from_dict(stored)
    assert options.tiers == MemoryTiers(max_l1_size=4, max_l2_size=2, max_l3_size=3)
    assert options.system_prompt == "p"
    assert SessionOptions.from_dict({"system_prompt": "p"}).tiers == MemoryTiers()
    with pytest.raises(ConfigError, match="stored option `tiers` is not a MemoryTiers"):
        SessionOptions.from_dict({"tiers": {"max_l9_size": 1}})


async def test_a_session_s_memory_takes_its_tiers(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, _ = env
    tiers = MemoryTiers(max_l1_size=2, max_l2_size=3, promote_threshold=0.95)
    session = await controller.create_session("s1", tiers=tiers)
    assert session.memory.tiers == tiers
    for i in range(3):
        await session.add_task(said(f"u{i}", f"hello {i}"))  # importance 0.9 < 0.95
    assert [t.task_id for t in session.memory.get_l1_tasks()] == ["u1", "u2"]
    assert await session.promote_tasks() == []


async def test_session_exposes_its_options(env: tuple[ContextController, Recorder]) -> None:
    controller, _ = env
    session = await controller.create_session("s1", priority=0.9, metadata={"plan": "gold"})
    assert session.priority == 0.9
    assert session.metadata == {"plan": "gold"}
    assert repr(session).startswith("Session('s1', state='active'")


# --- promotion --------------------------------------------------------------------------------


async def test_promote_tasks_moves_important_tasks_to_l2_and_says_so(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, recorder = env
    bus = InProcessEventBus()  # no controller on this bus: no trigger promotes behind our back
    session = Session(
        "solo",
        options=SessionOptions(),
        store=controller.store,
        bus=bus,
        layout=controller.layout,
        counter=controller.counter,
    )
    await session.add_task(said("u1", "refund order 7"))
    await session.add_task(note("n1", "looked it up"))
    await session.add_task(note("n2", "decisive fact", importance=0.95))
    assert session.needs_promotion
    assert await session.promote_tasks() == ["n2", "u1"]
    assert not session.needs_promotion
    assert [t.task_id for t in session.memory.get_l2_tasks()] == ["n2", "u1"]
    assert await session.promote_tasks() == []
    await bus.close()
    assert recorder.of(topics.TASK_ADDED) == []


async def test_an_important_task_triggers_promotion_through_the_bus(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, recorder = env
    session = await controller.create_session("s1")
    await session.add_task(note("n1", "minor"))
    await session.add_task(said("u1", "I want a refund"))
    (event,) = await recorder.wait_for(topics.TASK_PROMOTED)
    assert dict(event.payload) == {
        "session_id": "s1",
        "task_ids": ("u1",),
        "from_tier": "L1",
        "to_tier": "L2",
    }
    assert [t.task_id for t in session.memory.get_l2_tasks()] == ["u1"]


async def test_no_important_task_misses_l2_when_tasks_outrun_the_trigger(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, _ = env
    bus = InProcessEventBus()  # no controller here: only the inline guard promotes
    session = Session(
        "fast",
        options=SessionOptions(tiers=MemoryTiers(max_l1_size=3)),
        store=controller.store,
        bus=bus,
        layout=controller.layout,
        counter=controller.counter,
    )
    for i in range(7):
        await session.add_task(said(f"u{i}", f"urgent {i}"))
    await session.promote_tasks()
    assert sorted(t.task_id for t in session.memory.get_l2_tasks()) == [f"u{i}" for i in range(7)]
    # A queue longer than L1 is recorded in steps, each promoted before the next.
    await session.pause()
    for i in range(7, 15):
        await session.add_task(said(f"u{i}", f"urgent {i}"))
    await session.add_task(note("n", "routine"))
    await session.resume()
    assert len(session.memory.get_l2_tasks()) == 15
    assert [t.task_id for t in session.memory.get_l1_tasks()] == ["u13", "u14", "n"]
    await bus.close()


async def test_a_reopened_session_remembers_that_promotion_is_due(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, _ = env
    bus = InProcessEventBus()  # no trigger: the process "dies" before promoting
    args = {
        "options": SessionOptions(),
        "store": controller.store,
        "bus": bus,
        "layout": controller.layout,
        "counter": controller.counter,
    }
    first = Session("s", **args)  # type: ignore[arg-type]
    await first.add_task(note("n", "routine"))
    assert not Session("s", **args).needs_promotion  # type: ignore[arg-type]
    await first.add_task(said("u", "important"))
    reopened = Session("s", **args)  # type: ignore[arg-type]
    assert reopened.needs_promotion
    await reopened.promote_tasks()
    assert not Session("s", **args).needs_promotion  # type: ignore[arg-type]
    await bus.close()

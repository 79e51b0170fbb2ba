"""History fills its room: the history a window sends is the conversation's transcript from
the store, as deep as the budget allows, not bounded by the memory's L1 (the in-memory tier).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from loomctx import (
    Agent,
    AgentWindow,
    ConfigError,
    LoomMemory,
    MemoryTiers,
    Message,
    TiktokenCounter,
)
from loomctx.context import BuildContext, TokenBudget
from loomctx.context.sources import L1RecentSource
from loomctx.memory import MemoryTier, tasks_from_messages
from loomctx.memory.core import _walk_on
from loomctx.memory.task import USER_MESSAGE, Task
from loomctx.stores.sqlite import SQLiteStore
from loomctx.testing import FunctionLLM

CTX = BuildContext(counter=TiktokenCounter())


def exchanges(n: int, start: int = 0) -> list[Message]:
    out: list[Message] = []
    for i in range(start, start + n):
        out += [Message.user(f"Question {i}: where is box {i}?"), Message.assistant(f"Box {i}.")]
    return out


def test_recent_tasks_reach_past_l1_in_order_and_after_a_restart(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    memory = LoomMemory("a", store=store, tiers=MemoryTiers(max_l1_size=4), embedder=None)
    for i in range(15):  # one exchange at a time, as a conversation records them
        memory.add_tasks(tasks_from_messages(exchanges(1, start=i)))
        memory.promote_tasks()
    texts = [t.parameters["content"] for t in memory.recent_tasks(1000)]
    assert texts == [m.content for m in exchanges(15)]
    assert len(memory.get_l1_tasks(limit=100)) == 4
    assert [t.parameters["content"] for t in memory.recent_tasks(7)] == texts[-7:]
    memory.close()
    reopened = LoomMemory("a", store=store, tiers=MemoryTiers(max_l1_size=4), embedder=None)
    assert [t.parameters["content"] for t in reopened.recent_tasks(1000)] == texts
    reopened.add_tasks(tasks_from_messages(exchanges(1, start=15)))
    assert [t.parameters["content"] for t in reopened.recent_tasks(3)] == [
        texts[-1],
        *(m.content for m in exchanges(1, start=15)),
    ]
    reopened.close()
    store.close()


def test_recent_tasks_asked_again_see_what_was_recorded_since() -> None:
    memory = LoomMemory("a", tiers=MemoryTiers(max_l1_size=2), embedder=None)
    memory.add_tasks(tasks_from_messages(exchanges(4)))

    def texts() -> list[str]:
        return [t.parameters["content"] for t in memory.recent_tasks(6)]

    before = texts()
    assert before == texts() == [m.content for m in exchanges(4)][-6:]
    memory.add_tasks(tasks_from_messages(exchanges(1, start=4)))
    assert texts() == [m.content for m in exchanges(5)][-6:]
    memory.promote_tasks()
    assert texts() == [m.content for m in exchanges(5)][-6:]
    memory.close()


def test_recent_tasks_end_at_an_archived_import() -> None:
    memory = LoomMemory("a", tiers=MemoryTiers(max_l1_size=2), embedder=None)
    memory.add_tasks(tasks_from_messages(exchanges(3)), tier=MemoryTier.L4)
    memory.add_tasks(tasks_from_messages(exchanges(3, start=3)))
    texts = [t.parameters["content"] for t in memory.recent_tasks(100)]
    assert texts == [m.content for m in exchanges(3, start=3)]
    memory.close()


async def test_history_offers_the_conversation_beyond_l1_up_to_its_depth() -> None:
    memory = LoomMemory("a", tiers=MemoryTiers(max_l1_size=4), embedder=None)
    memory.add_tasks(tasks_from_messages(exchanges(10)))
    wide = TokenBudget(tokens=100_000, ceiling=100_000)
    deep = await L1RecentSource(memory, depth=1000).collect("", wide, ctx=CTX)
    assert len(deep) == 20
    assert deep[0].metadata["capacity"] == 1000
    assert len(await L1RecentSource(memory, depth=6).collect("", wide, ctx=CTX)) == 6
    assert len(await L1RecentSource(memory).collect("", wide, ctx=CTX)) == 4  # L1's size
    with pytest.raises(ConfigError, match="`depth` must be an int >= 1"):
        L1RecentSource(memory, depth=0)
    memory.close()


async def test_while_the_conversation_fits_an_agent_s_window_is_the_whole_conversation() -> None:
    memory = LoomMemory("a", tiers=MemoryTiers(max_l1_size=4), embedder=None)
    llm = FunctionLLM(lambda messages, tools, options: "Noted.")
    agent = Agent(llm, "Be brief.", memory=memory, window=AgentWindow(model_context_window=8000))
    for i in range(12):
        await agent.run(f"Box {i} is in room {i}.")
    window = llm.calls[-1].messages
    said = [m.content for m in window if m.role in ("user", "assistant")]
    assert said == [
        *(x for i in range(11) for x in (f"Box {i} is in room {i}.", "Noted.")),
        "Box 11 is in room 11.",
    ]
    memory.close()


async def test_the_tail_offers_no_important_task_the_history_holds() -> None:
    memory = LoomMemory("a", tiers=MemoryTiers(max_l1_size=4), embedder=None)
    llm = FunctionLLM(lambda messages, tools, options: "Noted.")
    agent = Agent(llm, "Be brief.", memory=memory, window=AgentWindow(model_context_window=8000))
    for i in range(12):
        await agent.run(f"Box {i} is in room {i}.")
    assert memory.get_l2_tasks()  # the user's facts left L1 for L2
    report = (await agent.preview("Where is box 3?")).report
    (important,) = (s for s in report.sources if s.name == "L2_important")
    # All of them are in the history: the tail claims no room for them.
    assert important.blocks_offered == 0
    assert not [b for b in report.blocks if b.source == "L2_important"]
    memory.close()


@settings(max_examples=300)
@example(ids=[1, 2, 3, 2], gaps=set(), at=3, count=3, asked=5)  # a task again after the turn
@example(ids=[1, 2, 3, 4, 4], gaps=set(), at=3, count=2, asked=5)  # twice after the turn
@example(ids=[1, 2, 3, 4, 5], gaps={3}, at=3, count=4, asked=5)  # a task missing after it
@given(
    ids=st.lists(st.integers(0, 30), min_size=1, max_size=40),
    gaps=st.sets(st.integers(0, 39), max_size=3),
    at=st.integers(0, 40),
    count=st.integers(1, 30),
    asked=st.integers(1, 30),
)
def test_the_walk_worked_out_from_the_last_one_is_the_full_walk(
    ids: list[int], gaps: set[int], at: int, count: int, asked: int
) -> None:
    """`_walk_on` (after a turn) gives what `LoomMemory._walk` gives over every task known,
    or None; orders hold tasks by id, some ids twice (a task recorded again later), some
    orders missing."""
    tasks = {i: Task(action=USER_MESSAGE, task_id=f"t{i}") for i in set(ids)}
    by_order = {o: tasks[i] for o, i in enumerate(ids) if o not in gaps}
    before = len(ids)
    at = min(at, before)
    got = LoomMemory._walk({o: t for o, t in by_order.items() if o < at}, at, asked)
    newer = {o: t for o, t in by_order.items() if o >= at}
    contiguous = bool(got) and got[-1][0] - got[0][0] + 1 == len(got)
    assume(contiguous)
    walk = _walk_on(got, newer, at, before, count)
    if walk is not None:
        assert walk == LoomMemory._walk({**dict(got), **newer}, before, count)

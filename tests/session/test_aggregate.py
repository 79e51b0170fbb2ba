"""`aggregate_context`: each split strategy does what it says, duplicates appear once, and the
window fits the budget as the real tokenizer counts it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomctx.context.orchestrator import ContextWindow
from loomctx.context.sources import ToolSource
from loomctx.errors import BudgetExceededError, ConfigError
from loomctx.session import topics
from loomctx.session.aggregate import SessionView, aggregate, relevance, weights
from loomctx.session.bus import InProcessEventBus
from loomctx.session.controller import ContextController
from loomctx.stores.sqlite import SQLiteStore
from loomctx.tokens import TiktokenCounter
from tests.session._helpers import Knowledge, Recorder, note, said, text_of

PROMPT = "You help the support team of a bookshop."
COUNTER = TiktokenCounter()
# Padding that makes every session want more than its share of the budgets below.
PAD = "; the parcel left the depot this morning and travels to the customer by road"
TOOL = {
    "type": "function",
    "function": {
        "name": "find_order",
        "description": "Look up an order.",
        "parameters": {"type": "object", "properties": {"order": {"type": "string"}}},
    },
}


def session_costs(window: ContextWindow) -> dict[str, int]:
    return {s.name: s.used for s in window.report.sources if s.name.startswith("session:")}


def allocated(window: ContextWindow) -> dict[str, int]:
    return {s.name: s.allocated for s in window.report.sources if s.name.startswith("session:")}


def unused(window: ContextWindow) -> int:
    """Tokens of the room left after framing (what the sources shared) that went unused."""
    sources = window.report.sources
    return sum(s.allocated for s in sources) - sum(s.used for s in sources)


def largest_block(window: ContextWindow) -> int:
    """The largest cost in the window of a block kept from a session (fence included); the
    sessions of these tests offer blocks of similar sizes, so one that did not fit is no
    larger by much."""
    return max(b.used_tokens for b in window.report.blocks if b.source.startswith("session:"))


async def fill(controller: ContextController, sid: str, lines: Sequence[str], **options: object):
    session = await controller.create_session(sid, system_prompt=PROMPT, **options)
    for i, line in enumerate(lines):
        await session.add_task(said(f"{sid}{i}", line, importance=0.3))
    return session


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[tuple[ContextController, Recorder]]:
    store = SQLiteStore(tmp_path / "agg.db")
    bus = InProcessEventBus()
    recorder = Recorder()
    bus.subscribe("*", recorder)
    async with ContextController(store, bus, counter=COUNTER) as controller:
        yield controller, recorder
    await bus.close()
    store.close()


# --- split strategies -------------------------------------------------------------------------


async def test_equal_split_gives_each_session_the_same_share(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, _ = env
    for sid in "abc":
        await fill(
            controller, sid, [f"{sid} fact number {i} about parcels{PAD}" for i in range(40)]
        )
    window = await controller.aggregate_context(["a", "b", "c"], "parcels", 1200)
    grants = allocated(window)
    assert max(grants.values()) - min(grants.values()) <= 1
    used = session_costs(window)
    slack = largest_block(window)
    for name, grant in grants.items():
        assert grant - slack <= used[name] <= grant + 3 * slack
    # Full but for what no block could use: less than one block per session.
    assert unused(window) < 3 * slack


async def test_priority_split_follows_the_sessions_priorities(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, _ = env
    for sid, priority in (("a", 0.6), ("b", 0.3), ("c", 0.1)):
        lines = [f"{sid} note {i} on shipping{PAD}" for i in range(60)]
        await fill(controller, sid, lines, priority=priority)
    window = await controller.aggregate_context(
        ["a", "b", "c"], "shipping", 2000, strategy="priority"
    )
    grants = allocated(window)
    room = sum(grants.values())
    for sid, share in (("a", 0.6), ("b", 0.3), ("c", 0.1)):
        assert abs(grants[f"session:{sid}"] - share * room) <= 1
    used = session_costs(window)
    total = sum(used.values())
    slack = 3 * largest_block(window) / total
    for sid, share in (("a", 0.6), ("b", 0.3), ("c", 0.1)):
        assert abs(used[f"session:{sid}"] / total - share) <= slack


async def test_relevance_split_favours_the_sessions_that_cover_the_query(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, _ = env
    await fill(controller, "a", [f"refund for invoice {i} is late{PAD}" for i in range(60)])
    await fill(controller, "b", [f"refund request {i} was filed{PAD}" for i in range(60)])
    await fill(controller, "c", [f"the cat sat on mat {i}{PAD}" for i in range(60)])
    window = await controller.aggregate_context(
        ["a", "b", "c"], "refund invoice", 2000, strategy="relevance"
    )
    grants = allocated(window)
    room = sum(grants.values())
    assert abs(grants["session:a"] - room * 2 / 3) <= 1
    assert abs(grants["session:b"] - room / 3) <= 1
    assert grants["session:c"] == 0
    used = session_costs(window)
    slack = 3 * largest_block(window)
    assert abs(used["session:a"] - 2 * used["session:b"]) <= slack
    assert used["session:c"] <= slack


async def test_a_share_a_session_does_not_need_flows_to_the_others(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, _ = env
    await fill(controller, "small", ["one short fact"])
    await fill(controller, "big", [f"big fact {i} about returns{PAD}" for i in range(80)])
    window = await controller.aggregate_context(["small", "big"], "returns", 1500)
    used = session_costs(window)
    assert used["session:small"] < allocated(window)["session:small"]
    assert used["session:big"] > allocated(window)["session:big"]
    assert unused(window) < largest_block(window)


def test_weights_sum_to_one_and_fall_back_to_equal() -> None:
    window = ContextWindow(messages=(), tools=(), blocks=(), token_count=0, report=_empty_report())
    views = [
        SessionView(session_id=s, priority=0.0, window=window, source_priorities={}) for s in "ab"
    ]
    texts: dict[str, list[str]] = {"a": ["nothing here"], "b": []}
    assert weights("priority", "q", views, texts) == {"a": 0.5, "b": 0.5}
    assert weights("relevance", "refund", views, texts) == {"a": 0.5, "b": 0.5}
    with pytest.raises(ConfigError, match="unknown split strategy 'size'; use one of 'equal'"):
        weights("size", "q", views, texts)


def test_relevance_is_the_coverage_of_the_best_blocks() -> None:
    assert relevance("refund invoice", []) == 0.0
    assert relevance("refund invoice", ["Refunds for the invoice"]) == 1.0
    texts = ["refund", "invoice", "refund invoice", "x", "y", "refund invoice", "z"]
    # The best five: 1, 1, 0.5, 0.5, 0.
    assert relevance("refund invoice", texts) == pytest.approx(0.6)


# --- merging: prefix once, duplicates once, budget ----------------------------------------------


async def test_shared_prefix_and_duplicates_appear_once(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, _ = env
    kb = Knowledge(["The returns desk opens at 9 on weekdays."])
    for sid, priority in (("a", 0.2), ("b", 0.9), ("c", 0.5)):
        await fill(
            controller,
            sid,
            [f"{sid} said something about returns {i}" for i in range(5)],
            sources=[kb, ToolSource([TOOL])],
            priority=priority,
        )
    await controller.broadcast(said("policy", "New policy: returns desk moves to the annex."))
    window = await controller.aggregate_context(
        ["a", "b", "c"], "when does the returns desk open", 6000, strategy="priority"
    )
    text = text_of(window)
    assert text.count(PROMPT) == 1
    assert text.count("returns desk moves to the annex") == 1
    assert text.count("The returns desk opens at 9") == 1
    assert [t["function"]["name"] for t in window.tools] == ["find_order"]
    # The copy kept is the one of the session with the largest share.
    (policy,) = [b for b in window.blocks if b.metadata.get("task_id") == "policy"]
    assert policy.metadata["session_id"] == "b"
    for sid in "abc":
        assert f"{sid} said something about returns 4" in text
    assert window.messages[0].content == PROMPT
    assert window.messages[-1].content == "when does the returns desk open"
    assert window.token_count == COUNTER.count_messages(window.messages, tools=window.tools)


async def test_history_keeps_tool_units_whole_and_oldest_first(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, _ = env
    session = await controller.create_session("a")
    await session.add_task(said("u1", "where is order 77"))
    await session.add_task(note("n1", "order 77 is in Porto", importance=0.3))
    window = await controller.aggregate_context(["a"], "order 77", 1000)
    context = window.messages[0].content
    first = context.index("user: where is order 77")
    second = context.index('assistant: called lookup({"q":"n1"})\ntool result: order 77 is in')
    assert first < second


async def test_an_empty_query_builds_a_window_without_a_user_turn(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, _ = env
    await fill(controller, "a", ["first thing", "second thing"])
    window = await controller.aggregate_context(["a"], "", 500)
    assert [m.role for m in window.messages] == ["system", "user"]  # the dynamic tail
    assert "second thing" in window.messages[1].content


async def test_aggregation_feeds_the_agent_level_l3(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, recorder = env
    a = await controller.create_session("a")
    b = await controller.create_session("b")
    await a.add_task(said("ua", "please refund order 1"))
    await b.add_task(said("ub", "please refund order 2"))
    await b.add_task(note("nb", "minor detail"))
    await a.promote_tasks()
    await b.promote_tasks()
    assert controller.memory.get_l3_summaries() == []
    await controller.aggregate_context(["a", "b"], "refunds", 1000)
    assert sorted(s.task_id for s in controller.memory.get_l3_summaries()) == ["ua", "ub"]
    promoted = await recorder.wait_for(topics.TASK_PROMOTED, 4)
    to_l3 = [e for e in promoted if e.payload["to_tier"] == "L3"]
    assert [(e.payload["session_id"], e.payload["task_ids"]) for e in to_l3] == [
        ("a", ("ua",)),
        ("b", ("ub",)),
    ]
    await controller.aggregate_context(["a", "b"], "refunds", 1000)
    assert len(controller.memory.get_l3_summaries()) == 2  # nothing twice
    assembled = await recorder.wait_for(topics.CONTEXT_ASSEMBLED, 6)
    last = assembled[-1].payload
    assert last["session_ids"] == ("a", "b")
    assert last["strategy"] == "equal"
    assert dict(last["shares"]) == {"a": 0.5, "b": 0.5}


async def test_bad_requests_are_config_errors(env: tuple[ContextController, Recorder]) -> None:
    controller, _ = env
    await controller.create_session("a", system_prompt=PROMPT * 20)
    await (await controller.create_session("z")).end()
    with pytest.raises(ConfigError, match="`session_ids` is empty"):
        await controller.aggregate_context([], "q", 100)
    with pytest.raises(ConfigError, match="got the string 'a'"):
        await controller.aggregate_context("a", "q", 100)
    with pytest.raises(ConfigError, match="cannot aggregate ended session\\(s\\) 'z'"):
        await controller.aggregate_context(["a", "z"], "q", 100)
    for budget in (0, True, "100"):
        with pytest.raises(ConfigError, match="`budget` must be an int >= 1"):
            await controller.aggregate_context(["a"], "q", budget)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown split strategy"):
        await controller.aggregate_context(["a"], "q", 100, strategy="size")  # type: ignore[arg-type]
    with pytest.raises(BudgetExceededError, match="shared:0"):
        await controller.aggregate_context(["a"], "q", 100)


# --- the budget, as a property ------------------------------------------------------------------


def _empty_report():  # type: ignore[no-untyped-def]
    from loomctx.context.report import ContextReport

    return ContextReport(
        window=1,
        output_reserve=0,
        available=1,
        token_count=0,
        overhead_tokens=0,
        token_counter=COUNTER.name,
        sources=(),
        blocks=(),
    )


@pytest.fixture(scope="module")
def views(tmp_path_factory: pytest.TempPathFactory) -> list[SessionView]:
    """Windows of three sessions (built once): long, short, and with knowledge and a tool."""

    async def build() -> list[SessionView]:
        store = SQLiteStore(tmp_path_factory.mktemp("agg") / "views.db")
        async with ContextController(store, counter=COUNTER) as controller:
            kb = Knowledge([f"Policy {i}: returns within {i + 10} days." for i in range(8)])
            await fill(controller, "long", [f"long story part {i} returns" for i in range(50)])
            await fill(controller, "short", ["returns? yes"], priority=0.9)
            await fill(
                controller,
                "kb",
                [f"kb chat {i} policy returns" for i in range(20)],
                sources=[kb, ToolSource([TOOL])],
                priority=0.1,
            )
            await controller.broadcast(said("dup", "Returns are free this week."))
            sessions = [controller.get_session(s) for s in ("long", "short", "kb")]
            out = []
            for s in sessions:
                window = await s.build_context("returns policy")
                prios = {src.name: src.priority for src in s.orchestrator.sources}
                out.append(
                    SessionView(
                        session_id=s.id, priority=s.priority, window=window, source_priorities=prios
                    )
                )
        store.close()
        return out

    return asyncio.run(build())


@given(
    budget=st.integers(60, 4000),
    strategy=st.sampled_from(["equal", "priority", "relevance"]),
    pick=st.sets(st.sampled_from([0, 1, 2]), min_size=1),
)
def test_the_window_never_exceeds_the_budget(
    views: list[SessionView], budget: int, strategy: str, pick: set[int]
) -> None:
    chosen = [views[i] for i in sorted(pick)]

    async def run() -> ContextWindow | None:
        from loomctx.context.block import BuildContext

        try:
            window, shares = await aggregate(
                chosen, "returns policy", budget, strategy=strategy, counter=COUNTER,
                ctx=BuildContext(),
            )  # fmt: skip
        except BudgetExceededError:
            return None
        assert sum(shares.values()) == pytest.approx(1.0)
        return window

    window = asyncio.run(run())
    fixed = COUNTER.count_messages(
        [views[0].window.messages[0], views[0].window.messages[-1]],
        tools=[TOOL] if 2 in pick else [],
    )
    if window is None:  # only when the prompt, tools and query alone do not fit
        assert budget < fixed + 80
        return
    exact = COUNTER.count_messages(window.messages, tools=window.tools)
    assert window.token_count == exact <= budget
    text = text_of(window)
    assert text.count(PROMPT) == 1
    assert text.count("Returns are free this week.") <= 1

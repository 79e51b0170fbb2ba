"""History fills its room; the dynamic tail holds only what the window lacks; a due compaction
is done at a cache-cold moment; a compaction repays the cache it breaks; the tail may be
skipped; and the report names the rule that left a tail block out (the window recipe,
`loomctx.context.recipe`, on a real `LoomMemory`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from loomctx import MemoryTiers
from loomctx.context.billing import ANTHROPIC
from loomctx.context.block import BuildContext, ContextBlock
from loomctx.context.compactor import CachePolicy, Candidate
from loomctx.context.orchestrator import ContextOrchestrator, ContextWindow, LayoutState
from loomctx.context.recipe import (
    WindowSettings,
    memory_sources,
    window_orchestrator,
    window_sources,
)
from loomctx.context.selection import tail_scale, unlifted
from loomctx.errors import ConfigError
from loomctx.memory.core import LoomMemory
from loomctx.tokens import TiktokenCounter
from tests.retrieval.fixtures import open_store, remember

COUNTER = TiktokenCounter()
T0 = datetime(2024, 5, 8, 12, 0, tzinfo=UTC)
QUERY = "Which harbour did the copper shipment leave from?"
PORTS = ["Oslo", "Riga", "Kiel", "Gdansk", "Turku", "Malmo", "Hamburg", "Bergen", "Tallinn"]


def turns(n: int, start: int = 0) -> list[tuple[str, str]]:
    return [
        (
            "user" if i % 2 == 0 else "assistant",
            f"Entry {i}: the copper shipment number {i} left the port of "
            f"{PORTS[i % len(PORTS)]} on schedule, with {i * 7} crates aboard.",
        )
        for i in range(start, start + n)
    ]


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[LoomMemory]:
    with open_store(tmp_path) as store:
        memory = LoomMemory("s1", store=store, tiers=MemoryTiers(max_l1_size=8), embedder=None)
        yield memory
        memory.close()


def recipe(
    memory: LoomMemory, window: int, policy: CachePolicy, state: LayoutState
) -> ContextOrchestrator:
    settings = WindowSettings(cache_policy=policy)
    sources = window_sources(
        "You answer questions about shipments.", memory=memory_sources(memory, settings=settings)
    )
    return window_orchestrator(
        sources,
        counter=COUNTER,
        window=window,
        settings=settings,
        output_reserve_ratio=0.1,
        state=state,
    )


async def build(orchestrator: ContextOrchestrator, now: datetime) -> ContextWindow:
    window = await orchestrator.build(QUERY, ctx=BuildContext(session_id="s1", now=now))
    assert window.token_count <= orchestrator.available
    return window


def tokens_of(window: ContextWindow, source: str) -> int:
    return sum(s.used for s in window.report.sources if s.name == source)


async def test_while_the_conversation_fits_the_window_is_the_conversation(
    memory: LoomMemory,
) -> None:
    """History fills the whole budget, beyond what a tail cap would leave it: the retrieved
    copies of its tasks claim no room, so nothing is compacted and the tail is empty."""
    remember(memory, turns(30))
    policy = CachePolicy(max_dynamic=0.4, defer_ratio=0.0)
    wide = await build(recipe(memory, 20_000, policy, LayoutState()), T0)
    whole = tokens_of(wide, "L1_recent")
    assert tokens_of(wide, "unified_retrieval") == 0
    # A window whose budget holds the whole conversation, but not with 40% kept for a tail.
    size = int((whole + 200) / 0.9)
    orchestrator = recipe(memory, size, policy, LayoutState())
    assert whole > (1 - policy.max_dynamic) * orchestrator.available
    window = await build(orchestrator, T0)
    assert tokens_of(window, "L1_recent") == whole
    assert not window.report.compactions
    assert tokens_of(window, "unified_retrieval") == 0
    again = [b for b in window.report.blocks if b.source == "unified_retrieval"]
    assert again
    assert all("in the window already" in b.reason for b in again)


class Conversation:
    """A session through the recipe: turns are added a minute apart, a window built after
    each."""

    def __init__(self, memory: LoomMemory, policy: CachePolicy, window: int = 1400) -> None:
        self.memory = memory
        self.orchestrator = recipe(memory, window, policy, LayoutState())
        self.now = T0
        self.added = 0

    async def say(self, n: int, *, later: timedelta = timedelta(minutes=1)) -> ContextWindow:
        remember(self.memory, turns(n, start=self.added), prefix=f"t{self.added}-")
        self.added += n
        self.now += later
        return await build(self.orchestrator, self.now)

    async def until_deferred(self) -> ContextWindow:
        """Past the first compaction, turns until history outgrows the room the tail leaves
        it (within the budget): the window that defers the compaction."""
        await self.say(60)
        for _ in range(60):
            window = await self.say(1)
            if [n.action for n in window.report.compactions] == ["deferred"]:
                return window
        raise AssertionError("history never went past its room")


async def test_a_due_compaction_waits_while_the_cache_is_warm(memory: LoomMemory) -> None:
    policy = CachePolicy(max_dynamic=0.3, defer_ratio=1.0)
    talk = Conversation(memory, policy)
    deferred = await talk.until_deferred()
    [note] = deferred.report.compactions
    assert "taken from the dynamic context" in note.reason
    warm = await talk.say(1, later=timedelta(minutes=4))
    assert [n.action for n in warm.report.compactions] in (["deferred"], [])
    # The prefix the provider cached is read again: the history before it is in place.
    assert warm.report.reused_prefix_tokens >= tokens_of(deferred, "L1_recent")


async def test_a_due_compaction_is_done_when_the_cache_has_gone_cold(
    memory: LoomMemory,
) -> None:
    policy = CachePolicy(max_dynamic=0.3, defer_ratio=1.0)
    talk = Conversation(memory, policy)
    await talk.until_deferred()
    cold = await talk.say(1, later=timedelta(minutes=6))
    [note] = cold.report.compactions
    assert note.action == "compacted"
    assert "the cache is cold" in note.reason
    assert note.tokens_after < note.tokens_before


def test_break_even() -> None:
    """R (p + T c) > B (p - c): the most a compaction may keep of `size` tokens."""
    policy = CachePolicy(expected_calls=20)
    kept = policy.break_even(6000, ANTHROPIC)
    removed = 6000 - kept
    assert removed * (1.25 + 20 * 0.1) >= kept * (1.25 - 0.1)
    assert (removed - 2) * (1.25 + 20 * 0.1) < (kept + 2) * (1.25 - 0.1)
    # Where a write costs what plain input does and a read little less, nothing need go.
    assert policy.break_even(6000, replace(ANTHROPIC, read=1.0, write=1.0)) == 6000


async def test_a_compaction_removes_what_repays_the_cache(memory: LoomMemory) -> None:
    """A low-water mark that would keep almost everything is overruled by the break-even."""
    policy = CachePolicy(max_dynamic=0.3, defer_ratio=0.0, low_water=1.0, expected_calls=1)
    talk = Conversation(memory, policy)
    await talk.say(60)
    window = await talk.say(2)
    [note] = window.report.compactions
    assert note.action == "compacted"
    assert note.tokens_after <= policy.break_even(note.tokens_before)


async def test_the_report_names_the_tail_cap(memory: LoomMemory) -> None:
    talk = Conversation(memory, CachePolicy(max_dynamic=0.05, defer_ratio=1.0))
    await talk.say(60)
    window = await talk.say(2)
    out = [
        b
        for b in window.report.blocks
        if b.source == "unified_retrieval"
        and b.status == "dropped"
        and "in the window already" not in b.reason
    ]
    assert out
    assert any("`CachePolicy.max_dynamic`: 5% of the input" in b.reason for b in out)
    assert not any("higher-value content" in b.reason for b in out)


@pytest.mark.parametrize("min_tail_score", [None, 1.0])
async def test_a_skipped_tail_costs_nothing_and_says_why(
    memory: LoomMemory, min_tail_score: float | None
) -> None:
    policy = CachePolicy(max_dynamic=0.3, defer_ratio=1.0, min_tail_score=min_tail_score)
    talk = Conversation(memory, policy)
    await talk.say(60)
    window = await talk.say(2)
    skipped = [b for b in window.report.blocks if "the tail is skipped" in b.reason]
    if min_tail_score is None:  # the same conversation sends a tail when none is skipped
        assert tokens_of(window, "unified_retrieval") > 0
        assert not skipped
        return
    assert tokens_of(window, "unified_retrieval") == 0
    assert skipped
    assert all(b.status == "dropped" for b in skipped)
    assert "`CachePolicy.min_tail_score`" in skipped[0].reason


@pytest.mark.parametrize("tail_lift", [None, 1.0])
async def test_a_tail_below_the_lift_costs_nothing_and_says_why(
    memory: LoomMemory, tail_lift: float | None
) -> None:
    talk = Conversation(memory, CachePolicy(max_dynamic=0.3, defer_ratio=1.0, tail_lift=tail_lift))
    await talk.say(60)
    window = await talk.say(2)
    below = [b for b in window.report.blocks if "`CachePolicy.tail_lift`" in b.reason]
    if tail_lift is None:
        assert tokens_of(window, "unified_retrieval") > 0
        assert not below
        return
    assert tokens_of(window, "unified_retrieval") == 0
    assert below
    assert all(b.status == "dropped" and b.section == "context" for b in below)


def _offered(source: str, key: str, score: float | None, order: int) -> Candidate:
    meta: dict[str, object] = {"task_id": key}
    if score is not None:
        meta["score"] = score
    block = ContextBlock(
        source=source, section="context", id=key, content=key, token_count=5, metadata=meta
    )
    return Candidate(block=block, cost=5, source_priority=0.9, order=order)


def test_the_lift_is_measured_from_the_median_of_what_was_retrieved() -> None:
    scores = [0.9, 0.75, 0.5, 0.5, 0.45, 0.4]
    offered = [_offered("retrieval", f"t{k}", s, k) for k, s in enumerate(scores)]
    offered.append(_offered("L2_important", "t9", None, 9))  # chosen by importance alone
    out = unlifted(offered, CachePolicy(tail_lift=0.2))  # the bar: the median 0.5, + 0.2
    assert sorted(out) == [2, 3, 4, 5, 9]
    assert "scores 0.50, less than 0.2 above the median 0.50" in out[2]
    assert "no relevance score" in out[9]
    assert unlifted(offered, CachePolicy()) == {}
    # Two hits are all that matched: there is no level for either to stand above.
    assert unlifted(offered[4:6], CachePolicy(tail_lift=0.2)) == {}
    # A knowledge chunk (no task) is never held back, nor does it move the level.
    chunk = _offered("retrieval", "k", 0.1, 10)
    chunk = replace(chunk, block=replace(chunk.block, metadata={"score": 0.1}))
    assert unlifted([*offered, chunk], CachePolicy(tail_lift=0.2)) == out
    assert sorted(unlifted(offered, CachePolicy(tail_lift=0.0))) == [4, 5, 9]


def test_the_tail_s_cap_scales_with_how_far_its_best_new_block_stands_out() -> None:
    scores = [0.9, 0.6, 0.5, 0.5, 0.45, 0.4]
    offered = [_offered("retrieval", f"t{k}", s, k) for k, s in enumerate(scores)]
    policy = CachePolicy(full_tail_lift=0.2)
    assert tail_scale(offered, set(), policy) == (1.0, "")  # 0.9 is 0.4 above the median
    # The window holds t0: the best block it lacks, 0.6, is 0.1 above the median 0.5.
    share, note = tail_scale(offered, {"t0"}, policy)
    assert share == pytest.approx(0.5)
    assert "stands 0.10 above the median 0.50" in note
    assert tail_scale(offered, {"t0", "t1"}, policy)[0] == 0.0
    assert tail_scale(offered, {"t0"}, CachePolicy()) == (1.0, "")
    assert tail_scale(offered[4:6], set(), policy) == (1.0, "")


async def test_a_scaled_tail_says_so_in_the_report(memory: LoomMemory) -> None:
    policy = CachePolicy(max_dynamic=0.3, defer_ratio=1.0, full_tail_lift=1.0)
    talk = Conversation(memory, policy)
    await talk.say(60)
    window = await talk.say(2)
    out = [b for b in window.report.blocks if "`CachePolicy.full_tail_lift`" in b.reason]
    assert out
    assert all(b.status == "dropped" for b in out)
    # The cap it names, scaled down from 30% of the input, holds what the tail sent.
    cap = int(out[0].reason.split("capped at ")[1].split(" tokens")[0])
    assert 0 <= tokens_of(window, "unified_retrieval") <= cap < 0.3 * window.report.available


def test_policy_and_context_validation() -> None:
    for bad in (
        {"min_tail_score": 1.5},
        {"tail_lift": -0.1},
        {"expected_calls": -1},
        {"expected_calls": 2.0},
    ):
        with pytest.raises(ConfigError):
            CachePolicy(**bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="timezone-aware"):
        BuildContext(now=datetime(2024, 1, 1))
    assert replace(BuildContext(), now=T0).now == T0


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"lookup_{name}",
            "description": f"Look up the {name} records of a shipment: " + "details, " * 40,
            "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
        },
    }
    for name in ("manifest", "customs")
]


async def test_a_deferred_compaction_takes_its_overflow_from_the_tail_only(
    memory: LoomMemory,
) -> None:
    """A deferral keeps the cached prefix: its overflow never cuts a tool definition (which
    would break the prefix it is there to keep), only the dynamic tail and unused room."""
    settings = WindowSettings(cache_policy=CachePolicy(max_dynamic=0.3, defer_ratio=1.0))
    sources = window_sources(
        "You answer questions about shipments.",
        tools=TOOLS,
        memory=memory_sources(memory, settings=settings),
    )
    orchestrator = window_orchestrator(
        sources,
        counter=COUNTER,
        window=1400,
        settings=settings,
        output_reserve_ratio=0.1,
        state=LayoutState(),
    )
    now, deferred = T0, 0
    for i in range(0, 60, 2):
        remember(memory, turns(2, start=i), prefix=f"t{i}-")
        now += timedelta(minutes=1)
        window = await build(orchestrator, now)
        [tools] = [s for s in window.report.sources if s.name == "tools"]
        assert tools.used == tools.offered, window.report.compactions
        deferred += [n.action for n in window.report.compactions] == ["deferred"]
    assert deferred

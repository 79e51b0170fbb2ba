"""A task offered by two sources (recent history and unified retrieval over the same memory)
goes into the window once; the report says why the other copy is out; the room is reused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from loomctx import MemoryTiers
from loomctx.context.compactor import CachePolicy
from loomctx.context.orchestrator import ContextOrchestrator, ContextWindow
from loomctx.context.sources import L1RecentSource, UnifiedRetrievalSource, UserInputSource
from loomctx.memory.core import LoomMemory
from loomctx.tokens import TiktokenCounter
from tests.retrieval.fixtures import open_store, remember

COUNTER = TiktokenCounter()
QUERY = "copper shipment Hamburg"
GOODS = ["apple", "pear", "plum", "fig", "kiwi", "lime", "copper", "copper", "copper", "copper"]
PORTS = ["Oslo", "Riga", "Kiel", "Gdansk", "Turku", "Malmo", *["Hamburg"] * 4]
# The last four tasks (L1) match the query best: retrieval offers them first.
ENTRIES = [
    f"Entry {i}: the {good} shipment left the port of {port} on schedule."
    for i, (good, port) in enumerate(zip(GOODS, PORTS, strict=True))
]
WINDOWS = range(150, 700, 25)


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[LoomMemory]:
    with open_store(tmp_path) as store:
        memory = LoomMemory("s1", store=store, tiers=MemoryTiers(max_l1_size=4), embedder=None)
        remember(memory, [("user", text) for text in ENTRIES])
        yield memory


async def build(memory: LoomMemory, window: int, *, exclude_recent: bool = False) -> ContextWindow:
    orchestrator = ContextOrchestrator(
        token_counter=COUNTER,
        sources=[
            L1RecentSource(memory),
            UnifiedRetrievalSource(memory, exclude_recent=exclude_recent),
            UserInputSource(),
        ],
        model_context_window=window,
        output_reserve_ratio=0.2,
        # Keep all of a full L1 (no compaction to a low-water mark): this file is about
        # duplicates, not about compaction.
        cache_policy=CachePolicy(low_water=1.0),
    )
    built = await orchestrator.build(QUERY)
    assert built.token_count == COUNTER.count_messages(built.messages)
    assert built.token_count <= orchestrator.available
    return built


def tasks_in(window: ContextWindow, source: str) -> list[str]:
    return [str(b.metadata["task_id"]) for b in window.blocks if b.source == source]


@pytest.mark.parametrize("size", WINDOWS)
async def test_a_task_in_the_history_never_comes_again_as_context(
    memory: LoomMemory, size: int
) -> None:
    window = await build(memory, size)
    history = tasks_in(window, "L1_recent")
    retrieved = tasks_in(window, "unified_retrieval")
    assert history
    assert not set(history) & set(retrieved)
    assert len(set(retrieved)) == len(retrieved)
    for line in window.report.blocks:
        if "in the window already" in line.reason:
            assert line.status == "dropped"
            assert line.id.removeprefix("unified_retrieval:") in history
            assert line.reason.endswith("(from `L1_recent`)")


@pytest.mark.parametrize("size", WINDOWS)
async def test_offering_a_task_twice_costs_the_window_nothing(
    memory: LoomMemory, size: int
) -> None:
    both = await build(memory, size)
    once = await build(memory, size, exclude_recent=True)
    shown = set(tasks_in(both, "L1_recent")) | set(tasks_in(both, "unified_retrieval"))
    alone = set(tasks_in(once, "L1_recent")) | set(tasks_in(once, "unified_retrieval"))
    # The room a duplicate took is handed on: as many distinct tasks reach the window.
    assert len(shown) >= len(alone)


async def test_the_report_names_the_source_that_holds_the_task(memory: LoomMemory) -> None:
    window = await build(memory, 600)
    assert sorted(tasks_in(window, "L1_recent")) == ["m6", "m7", "m8", "m9"]
    reasons = {b.id: b.reason for b in window.report.blocks if b.status == "dropped"}
    assert reasons == {
        f"unified_retrieval:m{i}": "its task is in the window already (from `L1_recent`)"
        for i in (6, 7, 8, 9)
    }
    # Everything else the memory holds is in, once.
    assert sorted(tasks_in(window, "unified_retrieval")) == [f"m{i}" for i in range(6)]
    retrieval = next(s for s in window.report.sources if s.name == "unified_retrieval")
    assert (retrieval.blocks_offered, retrieval.blocks_kept) == (10, 6)


async def test_freed_room_goes_to_the_next_candidates(memory: LoomMemory) -> None:
    window = await build(memory, 400)
    # The window could not also hold the duplicates ...
    copies = [b for b in window.report.blocks if "in the window already" in b.reason]
    assert len(copies) == 4
    assert window.token_count + sum(b.offered_tokens for b in copies) > window.report.available
    # ... yet every task is in, once: the duplicates' room went to the other candidates.
    shown = tasks_in(window, "L1_recent") + tasks_in(window, "unified_retrieval")
    assert sorted(shown) == sorted(f"m{i}" for i in range(10))


async def test_every_copy_left_out_as_a_duplicate_says_so(memory: LoomMemory) -> None:
    window = await build(memory, 200)
    held = {str(b.metadata.get("task_id")): b.source for b in window.blocks}
    for line in window.report.blocks:
        task = line.id.removeprefix("unified_retrieval:")
        if line.status == "dropped" and line.source == "unified_retrieval" and task in held:
            assert line.reason == f"its task is in the window already (from `{held[task]}`)"

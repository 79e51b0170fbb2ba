"""The dynamic floor (`CachePolicy.min_dynamic`): in a small window the dynamic context's first
tokens come before history older than its newest `core_units` units; in a large window, or
under a cap on the dynamic tail, nothing changes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from loomctx import ConfigError, ContextWindow
from loomctx.context import BuildContext, CachePolicy, ContextBlock, TokenBudget
from loomctx.context.sources import HistorySource, UserInputSource
from loomctx.messages import split_units
from tests.context.test_orchestrator import DocsSource, conversation, orchestrator

DOCS = [f"Document {i}: " + "facts about the shop and its orders. " * 12 for i in range(60)]


def history_of(window: ContextWindow) -> list[object]:
    assert window.layout is not None
    return list(window.messages[window.layout.summary_end : window.layout.history_end])


def used(window: ContextWindow, source: str) -> int:
    return next(s.used for s in window.report.sources if s.name == source)


async def build(policy: CachePolicy, window: int, history: HistorySource | None = None):  # type: ignore[no-untyped-def]
    source = history or HistorySource(conversation(60))
    orch = orchestrator(source, DocsSource(DOCS), UserInputSource(), window=window,
                        cache_policy=policy)  # fmt: skip
    return orch, source, await orch.build(query="which orders shipped?")


async def test_a_small_window_keeps_its_newest_units_and_gives_the_rest_to_dynamic_context() -> (
    None
):
    history = conversation(60)
    _, _, old = await build(CachePolicy(min_dynamic=0), 2000)
    _, _, new = await build(CachePolicy(), 2000)
    kept = history_of(new)
    # The newest four units, from the user message before them (the fourth newest is a
    # reply): five units, and nothing older.
    assert len(split_units(kept)) == 5
    assert kept == history[len(history) - len(kept) :]
    assert kept[0].role == "user"  # type: ignore[attr-defined]
    assert len(history_of(old)) > len(kept)
    assert used(new, "RAG_knowledge") > used(old, "RAG_knowledge") + 300
    assert new.token_count <= 1750


async def test_a_large_window_or_a_capped_tail_is_unchanged() -> None:
    for window, policy in ((16000, {}), (2000, {"max_dynamic": 0.25})):
        _, _, old = await build(CachePolicy(min_dynamic=0, **policy), window)
        _, _, new = await build(CachePolicy(**policy), window)
        assert new.messages == old.messages


async def test_compaction_keeps_the_newest_units_too() -> None:
    history = conversation(80)
    source = HistorySource(history[:-10])
    orch, _, _ = await build(CachePolicy(), 2000, source)
    source.extend(history[-10:])
    window = await orch.build(query="which orders shipped?")
    assert window.report.compactions
    kept = history_of(window)
    assert len(split_units(kept)) >= 4
    assert kept == history[len(history) - len(kept) :]


class Recorder:
    """A dynamic source that records the context its collect was given."""

    name = "recorder"
    priority = 0.5

    def __init__(self) -> None:
        self.floors: list[int] = []

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> list[ContextBlock]:
        self.floors.append(ctx.dynamic_floor)
        return []


async def test_sources_are_told_the_floor_within_the_cap() -> None:
    for policy, expected in (
        (CachePolicy(), 2000),
        (CachePolicy(min_dynamic=500), 500),
        (CachePolicy(max_dynamic=0.5), 0),
        (CachePolicy(min_dynamic=0), 0),
    ):
        recorder = Recorder()
        orch = orchestrator(recorder, UserInputSource(), cache_policy=policy)
        await orch.build(query="hi")
        await orch.build(query="hi")
        assert recorder.floors == [expected, expected]
        recorder = Recorder()
        first_tail = replace(policy, first_tail=True)
        orch = orchestrator(recorder, UserInputSource(), cache_policy=first_tail)
        await orch.build(query="hi")  # a first window: the room a cold tail may take
        await orch.build(query="hi")
        assert recorder.floors == [orch.available, expected]
        recorder = Recorder()
        orch = orchestrator(
            recorder, UserInputSource(), cache_policy=replace(policy, cold_tail=False)
        )
        await orch.build(query="hi")
        assert recorder.floors == [expected]


def test_policy_validation() -> None:
    for bad in ({"min_dynamic": -1}, {"core_units": True}, {"min_dynamic": 1.5}):
        with pytest.raises(ConfigError, match="must be an int >= 0"):
            CachePolicy(**bad)  # type: ignore[arg-type]
    assert CachePolicy(max_dynamic=0.25).dynamic_floor(7000) == 0
    assert CachePolicy().dynamic_floor(7000, 1000) == 1000
    assert CachePolicy().dynamic_floor(1500) == 1500

"""Recalled turns cost no more than the history they stand in for (`CachePolicy.memory_payback`):
once history has been compacted, the conversation's memory in the dynamic tail takes at most
what re-sending the history the window no longer holds would cost as a cached read, less the
last compaction's rewrite spread over the calls it is counted over (the window recipe on a
real `LoomMemory`)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from loomctx.context.billing import ANTHROPIC
from loomctx.context.compactor import CachePolicy
from loomctx.context.orchestrator import ContextWindow
from loomctx.context.recipe import WindowSettings
from loomctx.context.selection import HistoryMark, TailLimits, recall_limit
from loomctx.errors import ConfigError
from loomctx.memory.core import LoomMemory
from tests.context.test_history_room import Conversation, memory

__all__ = ["memory"]  # the fixture, shared with the history room's tests

RECIPE = WindowSettings().cache_policy
POLICY = replace(RECIPE, tail_lift=None, memory_payback=1.0)


def recalled(window: ContextWindow) -> int:
    """The tokens of the conversation's memory in the tail (no knowledge base here: every
    context block stands for a task)."""
    return sum(b.used_tokens for b in window.report.blocks if b.section == "context")


def marks(talk: Conversation) -> dict[str, HistoryMark]:
    return talk.orchestrator.state.marks("s1")


def expected_limit(talk: Conversation, window: ContextWindow) -> int:
    """What the rule allows, from the marks and the summary the window holds."""
    held = marks(talk)
    summaries = sum(b.used_tokens for b in window.report.blocks if b.id.endswith(":summary"))
    saved = sum(m.dropped for m in held.values()) - summaries
    rewritten = sum(m.rewritten for m in held.values())
    worth = saved * ANTHROPIC.read - rewritten * (ANTHROPIC.write - ANTHROPIC.read) / 20
    return int(max(0.0, worth))


async def test_the_recalled_tail_costs_what_the_history_it_stands_in_for_would(
    memory: LoomMemory,
) -> None:
    talk = Conversation(memory, POLICY)
    first = await talk.say(60)
    assert first.report.compactions  # history kept at its low-water mark
    [mark] = marks(talk).values()
    assert mark.dropped > 0
    assert mark.rewritten == 0  # a first window rewrites nothing cached
    warm = await talk.say(1)
    limit = expected_limit(talk, warm)
    assert recalled(warm) <= limit
    # Without the rule the same call recalls more: the limit decided.
    free = Conversation(memory, replace(POLICY, memory_payback=None))
    await free.say(0)
    assert recalled(await free.say(0)) > limit
    out = [b for b in warm.report.blocks if "`CachePolicy.memory_payback`" in b.reason]
    assert out
    assert all(b.status == "dropped" for b in out)
    assert f"{limit} tokens on this call" in out[0].reason


async def test_a_warm_compaction_counts_its_rewrite_and_what_left_history(
    memory: LoomMemory,
) -> None:
    talk = Conversation(memory, POLICY)
    await talk.say(60)
    [before] = marks(talk).values()
    for _ in range(80):
        window = await talk.say(1)
        if any(n.action == "compacted" for n in window.report.compactions):
            break
    else:
        raise AssertionError("history was never compacted again")
    [after] = marks(talk).values()
    assert after.sequence > before.sequence
    assert after.dropped > before.dropped
    kept = sum(b.used_tokens for b in window.report.blocks if b.section == "history")
    assert after.rewritten == kept  # the kept units and their summary, written anew
    assert recalled(window) <= expected_limit(talk, window)


async def test_a_cold_call_is_not_held_to_it(memory: LoomMemory) -> None:
    """The first window recalls by relevance within the room history leaves
    (`CachePolicy.cold_tail`): nothing cached is at stake, so no history is being replaced
    at a cached price."""
    talk = Conversation(memory, POLICY)
    first = await talk.say(60)
    assert recalled(first) > expected_limit(talk, first)


def test_before_any_compaction_there_is_no_limit() -> None:
    """While history holds the whole conversation, what memory brings is what it lacks
    (another conversation's turns): the rule does not apply."""
    tail = TailLimits(cap=500, share=0.15)
    fresh = {"L1_recent": HistoryMark(start="a", sequence=0)}
    assert recall_limit(tail, fresh, 0, POLICY, ANTHROPIC) == tail
    assert recall_limit(tail, {}, 0, POLICY, ANTHROPIC) == tail
    compacted = {"L1_recent": HistoryMark(start="b", sequence=9, dropped=4000, rewritten=1000)}
    limited = recall_limit(tail, compacted, 200, POLICY, ANTHROPIC)
    assert limited.recall == int(3800 * 0.1 - 1000 * 1.15 / 20)
    assert (
        recall_limit(tail, compacted, 200, replace(POLICY, memory_payback=None), ANTHROPIC) == tail
    )


@pytest.mark.parametrize("bad", [-0.5, math.nan, math.inf, True, "1"])
def test_memory_payback_is_checked(bad: object) -> None:
    with pytest.raises(ConfigError, match="memory_payback"):
        CachePolicy(memory_payback=bad)  # type: ignore[arg-type]

"""On a call where nothing cached is at stake (a session's first window, or its cache gone
cold), the dynamic tail may use the room history leaves; the next, warm call caps it again
and appends to the same history (`CachePolicy.cold_tail`; the window recipe on a real
`LoomMemory`)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from loomctx.context.billing import ANTHROPIC
from loomctx.context.compactor import CachePolicy
from loomctx.context.orchestrator import ContextWindow
from loomctx.context.recipe import WindowSettings
from loomctx.memory.core import LoomMemory
from tests.context.test_history_room import Conversation, memory, tokens_of

__all__ = ["memory"]  # the fixture, shared with the history room's tests

RECIPE = WindowSettings().cache_policy
TAIL = ("unified_retrieval", "L2_important")


def tail_tokens(window: ContextWindow) -> int:
    return sum(tokens_of(window, name) for name in TAIL)


def cap(talk: Conversation, policy: CachePolicy) -> float:
    assert policy.max_dynamic is not None
    return policy.max_dynamic * talk.orchestrator.available


def units(window: ContextWindow) -> tuple[object, ...]:
    """The history units the window keeps in full (after its summary)."""
    assert window.layout is not None
    return window.messages[window.layout.summary_end : window.layout.history_end]


def head(window: ContextWindow) -> tuple[object, ...]:
    """The window's prompt and history: what its tail and the user's turn follow."""
    assert window.layout is not None
    return window.messages[: window.layout.history_end]


async def test_a_first_window_fills_its_room_with_the_tail_and_a_warm_one_caps_it(
    memory: LoomMemory,
) -> None:
    talk = Conversation(memory, RECIPE)
    first = await talk.say(60)
    assert first.report.compactions  # history kept at its low-water mark, as before
    assert tail_tokens(first) > cap(talk, RECIPE)
    assert first.token_count > 0.9 * talk.orchestrator.available
    warm = await talk.say(1)
    assert tail_tokens(warm) <= cap(talk, RECIPE)
    # History and its cache are unchanged by the wider tail: the warm window appends to it.
    assert not warm.report.compactions
    assert warm.messages[: len(head(first))] == head(first)


async def test_without_cold_tail_the_first_window_keeps_the_cap(memory: LoomMemory) -> None:
    policy = replace(RECIPE, cold_tail=False)
    talk = Conversation(memory, policy)
    first = await talk.say(60)
    assert tail_tokens(first) <= cap(talk, policy)
    lifted = await Conversation(memory, RECIPE).say(0)
    assert tail_tokens(lifted) > cap(talk, policy)


FIRST_TAIL = replace(RECIPE, first_tail=True)


def caching_any_prefix(talk: Conversation) -> Conversation:
    """`talk` with a provider that caches a prefix of any length (as an `Agent` sets its
    orchestrator's pricing from its model's)."""
    talk.orchestrator.pricing = replace(ANTHROPIC, min_tokens=0)
    return talk


async def test_a_first_window_gives_its_tail_room_before_history(memory: LoomMemory) -> None:
    """With `first_tail`, in a session's first window the tail's sources want all they offer
    before history's room is set: history keeps the newest units within what they leave it,
    not within what the capped tail would leave, and the tail takes the rest."""
    capped = await Conversation(memory, replace(RECIPE, cold_tail=False)).say(60)
    lifted = await Conversation(memory, FIRST_TAIL).say(0)
    # Without it (the recipe's default), history keeps its room as on any call, where that
    # makes a prefix the provider caches (here: any prefix).
    plain = await caching_any_prefix(Conversation(memory, RECIPE)).say(0)
    assert tokens_of(plain, "L1_recent") == tokens_of(capped, "L1_recent")
    assert 0 < tokens_of(lifted, "L1_recent") < tokens_of(capped, "L1_recent")
    assert tail_tokens(lifted) > tokens_of(lifted, "L1_recent")
    # What it keeps is history's newest units: the capped window's history ends the same way.
    kept = units(lifted)
    assert kept
    assert units(capped)[-len(kept) :] == kept


async def test_a_later_cold_call_places_history_as_a_warm_one_would(
    memory: LoomMemory,
) -> None:
    """Only the first window plans its tail first: a session idle past the cache lifetime
    keeps the history it had (the warm calls after it append to it), and lifts its tail's
    cap in the room history leaves."""
    talk = Conversation(memory, FIRST_TAIL)
    await talk.say(60)
    warm = await talk.say(1)
    cold = await talk.say(1, later=timedelta(minutes=6))
    assert cold.report.cache_cold
    assert not cold.report.compactions
    assert tail_tokens(cold) > cap(talk, RECIPE)
    assert cold.messages[: len(head(warm))] == head(warm)


async def test_a_session_idle_past_the_cache_lifetime_lifts_the_cap_once(
    memory: LoomMemory,
) -> None:
    talk = Conversation(memory, RECIPE)
    await talk.say(60)
    warm = await talk.say(1)
    assert tail_tokens(warm) <= cap(talk, RECIPE)
    cold = await talk.say(1, later=timedelta(minutes=6))
    assert cold.report.cache_cold
    assert tail_tokens(cold) > cap(talk, RECIPE)
    again = await talk.say(1)
    assert tail_tokens(again) <= cap(talk, RECIPE)


async def test_the_report_names_the_lifted_tail(memory: LoomMemory) -> None:
    """A block the lifted tail leaves out says it was the room history leaves, not the cap."""
    talk = Conversation(memory, replace(RECIPE, tail_lift=None), window=700)
    first = await talk.say(60)
    out = [
        b
        for b in first.report.blocks
        if b.source == "unified_retrieval"
        and b.status == "dropped"
        and "in the window already" not in b.reason
    ]
    assert out
    assert all("`CachePolicy.cold_tail`" in b.reason for b in out)
    assert not any("`CachePolicy.max_dynamic`" in b.reason for b in out)


async def test_a_first_window_whose_history_would_seed_no_cache_gives_its_tail_room_first(
    memory: LoomMemory,
) -> None:
    """History placed as on any call would make a prefix shorter than the provider caches
    (`CachePricing.min_tokens`), so it seeds no cache for the calls after it: the first window
    plans its tail first, as with `first_tail`, and the warm call after it appends to the
    history it kept and caps its tail again."""
    talk = Conversation(memory, RECIPE)
    first = await talk.say(60)
    seeding = await caching_any_prefix(Conversation(memory, RECIPE)).say(0)
    # The premise: history at its room, behind the prompt, is under the provider's minimum.
    assert tokens_of(seeding, "system_prompt") + tokens_of(seeding, "L1_recent") < (
        ANTHROPIC.min_tokens
    )
    planned_first = await Conversation(memory, FIRST_TAIL).say(0)
    assert units(first) == units(planned_first)
    assert 0 < tokens_of(first, "L1_recent") < tokens_of(seeding, "L1_recent")
    assert tail_tokens(first) > tail_tokens(seeding)
    [note] = first.report.compactions
    assert f"under the {ANTHROPIC.min_tokens} the provider caches" in note.reason
    warm = await talk.say(1)
    assert tail_tokens(warm) <= cap(talk, RECIPE)
    assert warm.messages[: len(head(first))] == head(first)

"""`PromptSource` and `UserInputSource`: one pinned block each, and the shared source checks."""

from __future__ import annotations

import pytest

from loomctx import ConfigError, Message, TiktokenCounter
from loomctx.context.block import BuildContext, ContextSource, TokenBudget
from loomctx.context.sources import PromptSource, UserInputSource

COUNTER = TiktokenCounter()
CTX = BuildContext(counter=COUNTER)
ROOMY = TokenBudget(tokens=1000, ceiling=4000)


async def test_prompt_source_offers_one_pinned_instructions_block() -> None:
    source = PromptSource("You are a careful assistant.\nAnswer in English.")
    (block,) = await source.collect("hi", ROOMY, ctx=CTX)
    assert block.source == "system_prompt"
    assert block.id == "system_prompt"
    assert block.section == "instructions"
    assert block.content == "You are a careful assistant.\nAnswer in English."
    assert block.token_count == COUNTER.count(block.content)
    assert block.pinned
    assert not block.truncatable
    assert block.priority == 1.0
    assert block.messages == ()


@pytest.mark.parametrize("instructions", ["", "   ", "\n\t"])
async def test_blank_instructions_offer_nothing(instructions: str) -> None:
    assert await PromptSource(instructions).collect("hi", ROOMY, ctx=CTX) == []


async def test_pinned_instructions_are_offered_even_beyond_the_ceiling() -> None:
    # Dropping them would lose the instructions silently; the orchestrator raises instead.
    (block,) = await PromptSource("Rules. " * 50).collect(
        "q", TokenBudget(tokens=0, ceiling=5), ctx=CTX
    )
    assert block.token_count > 5


def test_prompt_source_rejects_non_string_instructions() -> None:
    with pytest.raises(ConfigError) as err:
        PromptSource(["be nice"])  # type: ignore[arg-type]
    message = str(err.value)
    assert "`instructions`" in message
    assert "list" in message
    assert "['be nice']" in message
    assert "system prompt text" in message


async def test_user_input_is_one_pinned_user_message_billed_without_reply_priming() -> None:
    source = UserInputSource()
    (block,) = await source.collect("What's the weather in 北京?", ROOMY, ctx=CTX)
    assert block.source == "user_input"
    assert block.section == "user"
    assert block.messages == (Message.user("What's the weather in 北京?"),)
    assert block.token_count == COUNTER.count_messages(list(block.messages)) - 3
    assert block.pinned
    assert not block.truncatable
    assert block.priority == 1.0


async def test_user_input_is_offered_even_beyond_the_ceiling() -> None:
    (block,) = await UserInputSource().collect(
        "long " * 100, TokenBudget(tokens=0, ceiling=0), ctx=CTX
    )
    assert block.token_count > 100


@pytest.mark.parametrize("query", ["", " ", "\n"])
async def test_a_blank_query_offers_nothing(query: str) -> None:
    assert await UserInputSource().collect(query, ROOMY, ctx=CTX) == []


def test_names_and_priorities() -> None:
    prompt = PromptSource("x", name="rules", priority=0.25)
    assert (prompt.name, prompt.priority) == ("rules", 0.25)
    user = UserInputSource(name="turn", priority=1)
    assert (user.name, user.priority) == ("turn", 1.0)
    assert isinstance(user.priority, float)
    assert isinstance(prompt, ContextSource)
    assert isinstance(user, ContextSource)


@pytest.mark.parametrize("name", ["", "  ", None, 3])
def test_a_source_name_must_be_a_non_empty_string(name: object) -> None:
    with pytest.raises(ConfigError) as err:
        PromptSource("x", name=name)  # type: ignore[arg-type]
    message = str(err.value)
    assert "`name` of a PromptSource" in message
    assert repr(name) in message
    assert "budget ratio" in message


@pytest.mark.parametrize("priority", [-0.1, 1.5, float("nan"), True, "high", None])
def test_a_source_priority_must_be_a_number_from_0_to_1(priority: object) -> None:
    with pytest.raises(ConfigError) as err:
        UserInputSource(name="turn", priority=priority)  # type: ignore[arg-type]
    message = str(err.value)
    assert "`priority` of UserInputSource `turn`" in message
    assert "from 0 to 1" in message
    assert repr(priority) in message


def test_long_values_are_shortened_in_messages() -> None:
    with pytest.raises(ConfigError) as err:
        PromptSource("x", name=["y" * 500])  # type: ignore[arg-type]
    assert "..." in str(err.value)
    assert len(str(err.value)) < 300

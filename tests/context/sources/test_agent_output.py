"""`AgentOutputSource`: earlier outputs, newest first, decayed by age, within the ceiling."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomctx import ConfigError, TiktokenCounter
from loomctx.context.block import BuildContext, TokenBudget
from loomctx.context.sources import AgentOutputSource

COUNTER = TiktokenCounter()
CTX = BuildContext(counter=COUNTER)
ROOMY = TokenBudget(tokens=1000, ceiling=4000)


async def test_outputs_are_offered_newest_first_decayed_by_age() -> None:
    source = AgentOutputSource(["first answer", "second answer", "third answer"], decay=0.5)
    blocks = await source.collect("q", ROOMY, ctx=CTX)
    assert [b.content for b in blocks] == ["third answer", "second answer", "first answer"]
    assert [b.priority for b in blocks] == [1.0, 0.5, 0.25]
    assert [b.metadata for b in blocks] == [
        {"turn": 2, "age": 0},
        {"turn": 1, "age": 1},
        {"turn": 0, "age": 2},
    ]
    for b in blocks:
        assert b.source == "agent_output"
        assert b.section == "context"
        assert b.truncatable
        assert not b.pinned
        assert b.token_count == COUNTER.count(b.content)
    assert [b.sequence for b in blocks] == [2, 1, 0]
    assert len({b.id for b in blocks}) == 3


async def test_add_with_turns() -> None:
    source = AgentOutputSource(decay=0.5)
    source.add("a", turn=3)
    source.add("b")  # turn 4
    source.add("c", turn=4)  # a turn may have several outputs
    source.add("d", turn=7)
    blocks = await source.collect("q", ROOMY, ctx=CTX)
    assert [(b.content, b.metadata["turn"], b.metadata["age"]) for b in blocks] == [
        ("d", 7, 0),
        ("c", 4, 3),
        ("b", 4, 3),
        ("a", 3, 4),
    ]
    assert blocks[1].priority == 0.5**3
    assert len({b.id for b in blocks}) == 4


async def test_only_the_last_max_outputs_are_kept() -> None:
    source = AgentOutputSource([f"output {i}" for i in range(5)], max_outputs=2)
    assert len(source) == 2
    blocks = await source.collect("q", ROOMY, ctx=CTX)
    assert [b.content for b in blocks] == ["output 4", "output 3"]
    source.add("output 5")
    assert [b.content for b in await source.collect("q", ROOMY, ctx=CTX)] == [
        "output 5",
        "output 4",
    ]


async def test_blank_outputs_are_not_offered_but_count_as_turns() -> None:
    source = AgentOutputSource(["kept", "  ", ""])
    (block,) = await source.collect("q", ROOMY, ctx=CTX)
    assert block.content == "kept"
    assert block.metadata == {"turn": 0, "age": 2}


async def test_no_outputs_no_blocks() -> None:
    assert await AgentOutputSource().collect("q", ROOMY, ctx=CTX) == []


async def test_the_newest_output_is_cut_to_the_ceiling_rather_than_dropped() -> None:
    long = "The build failed because the lockfile was stale. " * 40
    source = AgentOutputSource(["older short note", long])
    cut, *rest = await source.collect("q", TokenBudget(tokens=0, ceiling=30), ctx=CTX)
    assert cut.content.startswith("The build failed")
    assert cut.token_count == COUNTER.count(cut.content) <= 30
    # The cut ends at a sentence end; an older output may use what that leaves.
    assert sum(b.token_count for b in [cut, *rest]) <= 30
    assert cut.metadata["truncated_from"] == COUNTER.count(long)
    assert cut.metadata["turn"] == 1


async def test_too_little_room_to_cut_leaves_a_block_out() -> None:
    source = AgentOutputSource(["a long output " * 20, "tiny"])
    blocks = await source.collect("q", TokenBudget(tokens=0, ceiling=5), ctx=CTX)
    assert [b.content for b in blocks] == ["tiny"]


async def test_an_output_that_cuts_to_nothing_is_left_out() -> None:
    # Leading whitespace only fits in the room: the cut text would be blank.
    source = AgentOutputSource([" \n" * 500 + "x"])
    assert await source.collect("q", TokenBudget(tokens=0, ceiling=10), ctx=CTX) == []


@given(
    st.lists(st.text(max_size=80), max_size=8),
    st.integers(min_value=0, max_value=60),
    st.floats(min_value=0.01, max_value=1.0),
)
async def test_never_more_than_the_ceiling(outputs: list[str], ceiling: int, decay: float) -> None:
    source = AgentOutputSource(outputs, decay=decay)
    blocks = await source.collect("q", TokenBudget(tokens=0, ceiling=ceiling), ctx=CTX)
    assert sum(b.token_count for b in blocks) <= ceiling
    turns = [b.metadata["turn"] for b in blocks]
    assert turns == sorted(turns, reverse=True)
    for b in blocks:
        assert b.token_count == COUNTER.count(b.content)
        assert 0.0 <= b.priority <= 1.0


@pytest.mark.parametrize("decay", [0, -0.5, 1.01, True, "0.7", float("nan")])
def test_decay_must_be_within_0_and_1(decay: object) -> None:
    with pytest.raises(ConfigError) as err:
        AgentOutputSource(decay=decay)  # type: ignore[arg-type]
    message = str(err.value)
    assert (
        "`decay` of AgentOutputSource `agent_output` must be a number with 0 < decay <= 1"
        in message
    )
    assert repr(decay) in message


@pytest.mark.parametrize("max_outputs", [0, -1, True, 2.0])
def test_max_outputs_must_be_a_positive_int(max_outputs: object) -> None:
    with pytest.raises(ConfigError) as err:
        AgentOutputSource(max_outputs=max_outputs)  # type: ignore[arg-type]
    assert "`max_outputs` of AgentOutputSource `agent_output` must be an int >= 1" in str(err.value)


def test_outputs_must_not_be_a_single_string() -> None:
    with pytest.raises(ConfigError) as err:
        AgentOutputSource("an answer")
    assert "`outputs` must be a list of strings, got the string 'an answer'" in str(err.value)


def test_an_output_must_be_a_string() -> None:
    with pytest.raises(ConfigError) as err:
        AgentOutputSource([b"bytes"])  # type: ignore[list-item]
    assert "an agent output must be a string, got bytes b'bytes'" in str(err.value)


@pytest.mark.parametrize(("turn", "floor"), [(1, 2), (-1, 2), (True, 2), (2.5, 2)])
def test_turns_never_go_backwards(turn: object, floor: int) -> None:
    source = AgentOutputSource(["a", "b", "c"])
    with pytest.raises(ConfigError) as err:
        source.add("d", turn=turn)  # type: ignore[arg-type]
    assert f"`turn` must be an int >= {floor} (turns never go backwards), got {turn!r}" in str(
        err.value
    )


def test_the_first_turn_must_not_be_negative() -> None:
    with pytest.raises(ConfigError) as err:
        AgentOutputSource().add("a", turn=-1)
    assert "`turn` must be an int >= 0" in str(err.value)

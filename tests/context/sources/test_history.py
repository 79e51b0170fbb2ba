"""`HistorySource`: whole units, newest first, a contiguous suffix within the ceiling."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomctx import Message, MessageFormatError, TiktokenCounter
from loomctx.context.block import BuildContext, ContextBlock, TokenBudget
from loomctx.context.compactor import SUMMARY_UNITS
from loomctx.context.sources import HistorySource
from loomctx.messages import ToolCall, flatten_units, split_units
from loomctx.tokens import CallableCounter, HeuristicCounter
from tests.strategies import histories

COUNTER = TiktokenCounter()
CTX = BuildContext(counter=COUNTER)
ROOMY = TokenBudget(tokens=1000, ceiling=4000)

CALL = ToolCall(id="call_1", name="run_sql", arguments={"query": "SELECT count(*) FROM orders"})
HISTORY = [
    Message.system("Be brief."),
    Message.user("How many orders?"),
    Message.assistant(tool_calls=[CALL]),
    Message.tool("42", tool_call_id="call_1", name="run_sql"),
    Message.assistant("There are 42 orders."),
    Message.user("Thanks!"),
]


def flatten(blocks: list[ContextBlock]) -> list[Message]:
    return [m for b in sorted(blocks, key=lambda b: b.sequence) for m in b.messages]


async def test_one_block_per_unit_newest_first() -> None:
    blocks = await HistorySource(HISTORY).collect("q", ROOMY, ctx=CTX)
    assert [b.sequence for b in blocks] == [4, 3, 2, 1, 0]
    assert [b.messages for b in blocks] == [
        (HISTORY[5],),
        (HISTORY[4],),
        (HISTORY[2], HISTORY[3]),
        (HISTORY[1],),
        (HISTORY[0],),
    ]
    assert [b.metadata for b in blocks] == [
        {"age": 0, "tool_unit": False},
        {"age": 1, "tool_unit": False},
        {"age": 2, "tool_unit": True},
        {"age": 3, "tool_unit": False},
        {"age": 4, "tool_unit": False},
    ]
    assert [b.priority for b in blocks] == [0.98**a for a in range(5)]
    for b in blocks:
        assert b.source == "history"
        assert b.section == "history"
        assert b.id == f"history:{b.sequence}"
        assert not b.truncatable
        assert not b.pinned
        assert b.token_count == COUNTER.count_messages(list(b.messages)) - 3
    assert flatten(blocks) == HISTORY


async def test_priority_never_falls_below_a_floor() -> None:
    source = HistorySource([Message.user(f"m{i}") for i in range(300)])
    blocks = await source.collect("q", TokenBudget(tokens=0, ceiling=100_000), ctx=CTX)
    assert blocks[0].priority == 1.0
    assert blocks[-1].priority == 0.01
    priorities = [b.priority for b in blocks]
    assert priorities == sorted(priorities, reverse=True)


async def test_stops_at_the_first_unit_that_does_not_fit() -> None:
    source = HistorySource(
        [Message.user("short"), Message.assistant("a much longer answer " * 20), Message.user("ok")]
    )
    newest = (await source.collect("q", ROOMY, ctx=CTX))[0]
    ceiling = newest.token_count + 10  # room for the oldest unit, but not for the one between
    blocks = await source.collect("q", TokenBudget(tokens=0, ceiling=ceiling), ctx=CTX)
    assert [b.sequence for b in blocks] == [2]
    assert await source.collect("q", TokenBudget(tokens=0, ceiling=0), ctx=CTX) == []


async def test_an_empty_history_offers_nothing() -> None:
    source = HistorySource()
    assert len(source) == 0
    assert await source.collect("q", ROOMY, ctx=CTX) == []


async def test_append_and_extend_give_the_same_blocks_as_one_list() -> None:
    whole = await HistorySource(HISTORY).collect("q", ROOMY, ctx=CTX)
    source = HistorySource(HISTORY[:2])
    await source.collect("q", ROOMY, ctx=CTX)  # measure some units before adding more
    source.extend(iter(HISTORY[2:4]))
    source.append(HISTORY[4])
    source.append(HISTORY[5])
    assert source.messages == HISTORY
    assert len(source) == 5
    assert await source.collect("q", ROOMY, ctx=CTX) == whole


async def test_units_are_measured_lazily_once_per_counter() -> None:
    counted: list[str] = []

    def count(text: str) -> int:
        counted.append(text)
        return len(text)

    history = [Message.user(f"message number {i}") for i in range(1000)]
    source = HistorySource(history)
    ctx = BuildContext(counter=CallableCounter(count, cache_entries=0))
    budget = TokenBudget(tokens=0, ceiling=100)
    blocks = await source.collect("q", budget, ctx=ctx)
    assert 0 < len(blocks) < 10
    first = len(counted)
    assert first <= 2 * (len(blocks) + 1)  # role + content of the units offered and one more
    assert await source.collect("q", budget, ctx=ctx) == blocks
    assert len(counted) == first  # nothing re-measured
    # Another counter: measured again, with that counter.
    estimate = HeuristicCounter()
    (newest, *_) = await source.collect("q", budget, ctx=BuildContext(counter=estimate))
    assert newest.token_count == estimate.count_messages([history[-1]]) - 3


@given(histories(max_units=8), st.integers(min_value=0, max_value=300))
async def test_offered_blocks_are_a_contiguous_newest_suffix_within_the_ceiling(
    history: list[Message], ceiling: int
) -> None:
    units = split_units(history)
    blocks = await HistorySource(history).collect(
        "q", TokenBudget(tokens=0, ceiling=ceiling), ctx=CTX
    )
    assert sum(b.token_count for b in blocks) <= ceiling
    assert [b.sequence for b in blocks] == list(
        range(len(units) - 1, len(units) - 1 - len(blocks), -1)
    )
    for b in blocks:
        assert b.messages == units[b.sequence].messages  # whole units
        assert b.token_count == COUNTER.count_messages(list(b.messages)) - 3
        assert 0.0 < b.priority <= 1.0
    kept = flatten(blocks)
    assert kept == history[len(history) - len(kept) :]
    if len(blocks) < len(units):  # the next older unit did not fit
        older = units[len(units) - 1 - len(blocks)]
        used = sum(b.token_count for b in blocks)
        assert used + COUNTER.count_messages(list(older.messages)) - 3 > ceiling


def test_an_invalid_history_is_rejected_at_construction() -> None:
    with pytest.raises(MessageFormatError) as err:
        HistorySource([Message.user("hi"), Message.tool("42", tool_call_id="call_9")])
    message = str(err.value)
    assert message.startswith("`messages`: tool message 1 answers `call_9`")
    assert "orphan result" in message


def test_extend_needs_whole_tool_units() -> None:
    source = HistorySource(HISTORY)
    with pytest.raises(MessageFormatError) as err:
        source.append(Message.assistant(tool_calls=[ToolCall(id="call_2", name="run_sql")]))
    assert "`append`: tool call `call_2` (`run_sql`) at message 0 has no result" in str(err.value)
    with pytest.raises(MessageFormatError) as err:
        source.extend([Message.user("more"), Message.tool("late", tool_call_id="call_1")])
    message = str(err.value)
    assert "`extend` (messages counted from the first one passed): " in message
    assert "tool message 1 answers `call_1`" in message
    assert source.messages == HISTORY  # a rejected batch adds nothing


def test_a_tool_call_id_may_not_be_reused_across_batches() -> None:
    source = HistorySource(HISTORY)
    again = [
        Message.assistant(tool_calls=[ToolCall(id="call_1", name="run_sql")]),
        Message.tool("43", tool_call_id="call_1"),
    ]
    with pytest.raises(MessageFormatError) as err:
        source.extend(again)
    message = str(err.value)
    assert "tool call id 'call_1' is already used earlier in history `history`" in message
    assert "unique id" in message
    assert len(source) == 5


@pytest.mark.parametrize("bad", ["hello", Message.user("hello")])
def test_a_single_message_or_string_is_not_a_list(bad: object) -> None:
    with pytest.raises(MessageFormatError) as err:
        HistorySource(bad)  # type: ignore[arg-type]
    assert "expected a list of `Message` values" in str(err.value)
    assert "wrap a single message in a list" in str(err.value)


def test_every_item_must_be_a_message() -> None:
    with pytest.raises(MessageFormatError) as err:
        HistorySource([Message.user("hi"), {"role": "user", "content": "x"}])  # type: ignore[list-item]
    message = str(err.value)
    assert "`messages`: message 1 is a dict, not a `Message`" in message
    assert "`from_openai`" in message


def test_messages_round_trip() -> None:
    assert HistorySource(HISTORY).messages == flatten_units(split_units(HISTORY))


async def test_units_long_before_where_kept_history_starts_are_not_offered() -> None:
    source = HistorySource([Message.user(f"m{i}") for i in range(300)])
    budget = TokenBudget(tokens=0, ceiling=100_000)
    ctx = BuildContext(counter=COUNTER, history_start={"history": 250})
    blocks = await source.collect("q", budget, ctx=ctx)
    # From the newest back to SUMMARY_UNITS before the start: what a compaction summarizes.
    assert [b.sequence for b in blocks] == list(range(299, 250 - SUMMARY_UNITS - 1, -1))
    other = BuildContext(counter=COUNTER, history_start={"another": 250})
    assert len(await source.collect("q", budget, ctx=other)) == 300


async def test_the_same_blocks_while_the_history_does_not_grow() -> None:
    source = HistorySource(HISTORY[:5])
    first = await source.collect("q", ROOMY, ctx=CTX)
    again = await source.collect("q", ROOMY, ctx=CTX)
    assert all(a is b for a, b in zip(first, again, strict=True))
    source.append(HISTORY[5])
    grown = await source.collect("q", ROOMY, ctx=CTX)
    # Every age moved on: new blocks, with the ages and priorities counted from the newest.
    assert [b.metadata["age"] for b in grown] == list(range(5))
    assert [b.priority for b in grown] == [0.98**a for a in range(5)]

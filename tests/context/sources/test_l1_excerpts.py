"""One large task in L1 cannot starve the history: it is shown as an excerpt, the turns
before it stay, the excerpt is the same bytes on every build, and what cannot fit even so
is in the report rather than silently gone."""

from __future__ import annotations

import re

import pytest

from loomctx import (
    ConfigError,
    ContextOrchestrator,
    LoomMemory,
    Message,
    Task,
    TaskStatus,
    TiktokenCounter,
)
from loomctx.context import BuildContext, TokenBudget
from loomctx.context.sources import L1RecentSource, PromptSource, UserInputSource
from loomctx.memory.task import ASSISTANT_MESSAGE, USER_MESSAGE
from loomctx.messages import split_units

COUNTER = TiktokenCounter()
CTX = BuildContext(counter=COUNTER)
BUDGET = TokenBudget(tokens=2304, ceiling=12_800)  # L1's grant in a 16k window, and its ceiling
BIG = "\n".join(
    f"row {i}: order {i * 31} shipped to warehouse {i % 17} on day {i % 365}" for i in range(1500)
)


def said(action: str, text: str) -> Task:
    return Task(action=action, parameters={"content": text}, status=TaskStatus.COMPLETED)


def memory_with_a_big_result(*, failed: bool = False) -> tuple[LoomMemory, Task]:
    memory = LoomMemory("agent", embedder=None)
    dump = Task(
        action="export_orders",
        parameters={"year": 2024},
        status=TaskStatus.FAILED if failed else TaskStatus.COMPLETED,
        result=None if failed else BIG,
        error=BIG if failed else None,
        metadata={"tool_call_id": "call_1"},
    )
    memory.add_tasks(
        [
            said(USER_MESSAGE, "Which warehouse had the most late orders last spring?"),
            said(ASSISTANT_MESSAGE, "Warehouse 4, with 31 late orders."),
            said(USER_MESSAGE, "Export this year's orders."),
            dump,
            said(ASSISTANT_MESSAGE, "Exported 1,500 orders."),
        ]
    )
    return memory, dump


async def test_a_large_result_is_an_excerpt_and_the_turns_before_it_stay() -> None:
    memory, dump = memory_with_a_big_result()
    assert len(BIG) > 80_000
    blocks = await L1RecentSource(memory, read_tool="read_result").collect("q", BUDGET, ctx=CTX)
    assert len(blocks) == 5  # every task, the older turns too
    messages = [m for b in sorted(blocks, key=lambda b: b.sequence) for m in b.messages]
    split_units(messages)  # whole units
    assert messages[0].content == "Which warehouse had the most late orders last spring?"
    (big,) = [b for b in blocks if b.metadata.get("excerpts")]
    result = big.messages[-1].content
    assert big.token_count <= BUDGET.ceiling // 4
    assert result.startswith(BIG[:200])
    assert result.endswith(BIG[-200:])
    assert f'read_result(handle="r-{dump.task_id}", offset=' in result
    (note,) = big.metadata["excerpts"]
    assert note == {
        "handle": f"r-{dump.task_id}",
        "tokens": COUNTER.count(BIG),
        "shown": COUNTER.count(result),
    }
    # The stored task keeps the whole result.
    assert memory.get_l1_tasks(limit=5)[3].result == BIG


async def test_the_excerpt_is_byte_identical_from_one_build_to_the_next() -> None:
    memory, _ = memory_with_a_big_result()
    first = await L1RecentSource(memory).collect("q", BUDGET, ctx=CTX)
    assert len(first) == 5
    assert any(b.metadata.get("excerpts") for b in first)
    again = await L1RecentSource(memory).collect(
        "q", BUDGET, ctx=BuildContext(counter=TiktokenCounter())
    )
    assert [b.messages for b in first] == [b.messages for b in again]
    source = L1RecentSource(memory)  # and one source, building twice
    one = await source.collect("q", BUDGET, ctx=CTX)
    two = await source.collect("q", BUDGET, ctx=CTX)
    assert [b.messages for b in one] == [b.messages for b in two] == [b.messages for b in first]


async def test_a_failed_call_with_a_huge_error_is_cut_like_a_result() -> None:
    memory, dump = memory_with_a_big_result(failed=True)
    blocks = await L1RecentSource(memory).collect("q", BUDGET, ctx=CTX)
    assert len(blocks) == 5
    (big,) = [b for b in blocks if b.metadata.get("excerpts")]
    error = big.messages[-1]
    assert error.is_error
    assert error.content.startswith("error: " + BIG[:100])
    # Offsets count in the error's own text, which is what the handle reads.
    start = int(re.search(r"characters ([\d,]+) to", error.content).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert error.content.startswith("error: " + BIG[:start])
    assert f"r-{dump.task_id}" in error.content


async def test_a_long_message_is_cut_too_and_the_limit_can_be_set() -> None:
    memory = LoomMemory("agent", embedder=None)
    memory.add_tasks(
        [said(USER_MESSAGE, "hello"), said(USER_MESSAGE, BIG), said(ASSISTANT_MESSAGE, "ok")]
    )
    blocks = await L1RecentSource(memory, max_item_tokens=500).collect("q", BUDGET, ctx=CTX)
    assert len(blocks) == 3
    assert all(b.token_count <= 500 for b in blocks)
    pasted = blocks[1].messages[0]
    assert pasted.role == "user"
    assert "tokens left out" in pasted.content
    assert "the whole text is stored as 'r-" in pasted.content  # no tool to read it with
    with pytest.raises(ConfigError, match="max_item_tokens"):
        L1RecentSource(memory, max_item_tokens=10)


async def test_in_a_window_the_older_turns_and_the_excerpt_are_kept() -> None:
    memory, dump = memory_with_a_big_result()
    memory.add_task(said(USER_MESSAGE, "How many went to warehouse 4?"))
    orchestrator = ContextOrchestrator(
        token_counter=COUNTER,
        sources=[
            PromptSource("Answer from the conversation."),
            L1RecentSource(memory),
            UserInputSource(),
        ],
        model_context_window=16_000,
    )
    window = await orchestrator.build("How many went to warehouse 4?")
    texts = [m.content for m in window.messages]
    assert "Which warehouse had the most late orders last spring?" in texts
    assert "Warehouse 4, with 31 late orders." in texts
    assert any(f"r-{dump.task_id}" in t for t in texts)
    assert window.token_count <= orchestrator.available
    again = await orchestrator.build("How many went to warehouse 4?")
    assert again.messages == window.messages
    assert again.report.reused_prefix_tokens > window.token_count // 2


async def test_a_task_too_large_even_cut_is_in_the_report_not_silently_gone() -> None:
    memory = LoomMemory("agent", embedder=None)
    huge_call = Task(
        action="write_file",
        parameters={"path": "data.csv", "content": BIG},  # arguments cannot be cut
        status=TaskStatus.COMPLETED,
        result="written",
    )
    memory.add_tasks(
        [said(USER_MESSAGE, "older question"), huge_call, said(USER_MESSAGE, "newest")]
    )
    source = L1RecentSource(memory)
    blocks = await source.collect("q", BUDGET, ctx=CTX)
    assert [b.metadata["task_id"] for b in blocks] == [
        memory.get_l1_tasks(3)[2].task_id,
        huge_call.task_id,
    ]
    assert "older tasks are not offered" in blocks[1].metadata["oversized"]
    orchestrator = ContextOrchestrator(
        token_counter=COUNTER, sources=[source, UserInputSource()], model_context_window=16_000
    )
    window = await orchestrator.build("q")
    (report,) = [b for b in window.report.blocks if b.id == f"L1_recent:{huge_call.task_id}"]
    assert report.status == "dropped"
    assert report.offered_tokens > BUDGET.ceiling
    assert Message.user("newest") in window.messages

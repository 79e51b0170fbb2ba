"""Memory sources feeding the orchestrator: L1 as history, L2 and L4 as context, read-only
inherited and shared memories."""

from __future__ import annotations

import pytest

from loomctx import (
    ConfigError,
    ContextOrchestrator,
    LoomMemory,
    MemoryTiers,
    Message,
    Task,
    TaskStatus,
    TiktokenCounter,
    ToolCall,
)
from loomctx.context import BuildContext, TokenBudget
from loomctx.context.sources import (
    InheritedSource,
    L1RecentSource,
    L2ImportantSource,
    L4SemanticSource,
    PromptSource,
    SharedPoolSource,
    UserInputSource,
)
from loomctx.memory import MemoryTier, tasks_from_messages
from loomctx.messages import split_units

CTX = BuildContext(counter=TiktokenCounter())
WIDE = TokenBudget(tokens=1000, ceiling=100_000)


def conversation(turns: int) -> list[Message]:
    out: list[Message] = []
    for i in range(turns):
        out.append(Message.user(f"What did the report {i} say about region {i % 7}?"))
        if i % 4 == 0:
            call = ToolCall(id=f"c{i}", name="read_report", arguments={"n": i})
            out.append(Message.assistant(tool_calls=[call]))
            out.append(Message.tool(f"report {i}: sales up {i}%", tool_call_id=f"c{i}"))
        out.append(Message.assistant(f"Report {i} says sales rose {i} percent in region {i % 7}."))
    return out


def memory_with(turns: int, **kwargs: object) -> LoomMemory:
    memory = LoomMemory("agent", tiers=MemoryTiers(**kwargs), embedder=None)  # type: ignore[arg-type]
    for t in tasks_from_messages(conversation(turns)):
        memory.add_task(t)
        memory.promote_tasks()  # as an agent does after every turn
    return memory


async def test_l1_renders_recent_tasks_as_history_with_whole_tool_units() -> None:
    memory = memory_with(30, max_l1_size=20)
    blocks = await L1RecentSource(memory).collect("q", WIDE, ctx=CTX)
    assert [b.sequence for b in blocks] == sorted((b.sequence for b in blocks), reverse=True)
    messages = [m for b in sorted(blocks, key=lambda b: b.sequence) for m in b.messages]
    split_units(messages)
    assert all(b.section == "history" for b in blocks)
    small = await L1RecentSource(memory).collect("q", TokenBudget(tokens=40, ceiling=60), ctx=CTX)
    assert sum(b.token_count for b in small) <= 60
    assert small
    assert small[0].sequence == blocks[0].sequence


async def test_l2_offers_important_tasks_that_left_l1() -> None:
    memory = memory_with(30, max_l1_size=10)
    blocks = await L2ImportantSource(memory).collect("q", WIDE, ctx=CTX)
    recent = {t.task_id for t in memory.get_l1_tasks(limit=10)}
    assert blocks
    assert all(b.metadata["task_id"] not in recent for b in blocks)
    assert all(b.section == "context" and b.truncatable for b in blocks)


async def test_l4_finds_old_tasks_for_the_query_and_skips_recent_ones() -> None:
    memory = memory_with(60, max_l1_size=10)
    blocks = await L4SemanticSource(memory).collect("report 3 region", WIDE, ctx=CTX)
    assert blocks
    assert "report 3" in blocks[0].content.lower()
    recent = {t.task_id for t in memory.get_l1_tasks(limit=10)}
    assert all(b.metadata["task_id"] not in recent for b in blocks)
    assert blocks[0].priority == 1.0
    assert await L4SemanticSource(memory).collect("", WIDE, ctx=CTX) == []


async def test_inherited_and_shared_memories_are_read_once_and_never_written() -> None:
    parent = memory_with(20)
    before = (parent.get_l1_tasks(50), parent.get_l2_tasks(), parent.get_l3_summaries())
    blocks = await InheritedSource(parent).collect("report 5", WIDE, ctx=CTX)
    ids = [b.metadata["task_id"] for b in blocks]
    assert len(ids) == len(set(ids))
    assert blocks[0].metadata["from"] == "relevant"
    assert (parent.get_l1_tasks(50), parent.get_l2_tasks(), parent.get_l3_summaries()) == before
    pool = LoomMemory("pool", embedder=None)
    pool.add_task(Task(action="finding", parameters={"text": "the north region grew fastest"},
                       status=TaskStatus.COMPLETED, source_agent="analyst"))  # fmt: skip
    shared = await SharedPoolSource(pool).collect("which region grew", WIDE, ctx=CTX)
    assert "north region" in shared[0].content


async def test_a_window_from_memory_keeps_recent_history_and_recalls_old_facts() -> None:
    memory = memory_with(300, max_l1_size=30)
    orch = ContextOrchestrator(
        token_counter=TiktokenCounter(),
        sources=[PromptSource("Answer from the conversation."), L1RecentSource(memory),
                 L2ImportantSource(memory), L4SemanticSource(memory), UserInputSource()],
        model_context_window=3000,
        output_reserve_ratio=0.125,
    )  # fmt: skip
    window = await orch.build(query="What did report 12 say about region 5?")
    assert window.token_count <= 2625
    assert window.layout is not None
    context = window.messages[window.layout.tail_start].content
    assert "report 12" in context.lower()
    split_units(window.messages[window.layout.summary_end : window.layout.history_end])
    assert window.messages[-1].content == "What did report 12 say about region 5?"


def test_sources_need_a_memory() -> None:
    with pytest.raises(ConfigError, match="needs a LoomMemory"):
        L1RecentSource(object())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="`priority`"):
        L2ImportantSource(LoomMemory("a", embedder=None), priority=3)
    with pytest.raises(ConfigError, match="`limit`"):
        L4SemanticSource(LoomMemory("a", embedder=None), limit=0)


async def test_l1_hands_over_the_same_messages_build_after_build() -> None:
    # The orchestrator remembers costs by message tuple: new tuples every build would make
    # it count the whole history again and fill its cache with dead entries.
    memory = memory_with(12)
    source = L1RecentSource(memory)
    first = await source.collect("q", WIDE, ctx=CTX)
    again = await source.collect("q", WIDE, ctx=CTX)
    assert [b.id for b in first] == [b.id for b in again]
    assert all(a.messages is b.messages for a, b in zip(first, again, strict=True))
    assert [b.token_count for b in first] == [b.token_count for b in again]
    memory.add_task(Task(task_id="new", action="note", parameters={}, result="late news"))
    newer = await source.collect("q", WIDE, ctx=CTX)
    assert newer[0].id.endswith(":new")
    kept = {b.id: b.messages for b in again}
    assert all(b.messages is kept[b.id] for b in newer[1:] if b.id in kept)


async def test_the_cost_cache_stays_bounded_and_hits_for_memory_history() -> None:
    memory = memory_with(12)
    orch = ContextOrchestrator(
        sources=[L1RecentSource(memory), UserInputSource()], model_context_window=8000
    )
    await orch.build("q")
    size = len(orch._message_costs)
    for _ in range(5):
        await orch.build("q")
    # The history's tuples are the same; only each build's new user turn is a new entry.
    assert len(orch._message_costs) == size + 5


async def test_l2_shows_a_task_as_it_is_now_build_after_build() -> None:
    """The source keeps what it worked out of each task between builds, but only while the
    task is the one the memory holds: a task recorded again under its id shows its new text."""
    memory = LoomMemory("agent", embedder=None)
    first = Task(
        task_id="fact",
        action="user_message",
        parameters={"content": "Ada's flight leaves Friday at 9."},
        status=TaskStatus.COMPLETED,
        metadata={"importance": 0.9},
    )
    memory.add_task(first, tier=MemoryTier.L2)
    source = L2ImportantSource(memory)
    before = await source.collect("q", WIDE, ctx=CTX)
    again = await source.collect("q", WIDE, ctx=CTX)
    assert [b.content for b in again] == [b.content for b in before]
    assert "Friday at 9" in before[0].content
    memory.add_task(
        first.evolve(parameters={"content": "Ada's flight now leaves Saturday at 7."}),
        tier=MemoryTier.L2,
    )
    (after,) = await source.collect("q", WIDE, ctx=CTX)
    assert "Saturday at 7" in after.content
    assert after.token_count == CTX.counter.count(after.content)

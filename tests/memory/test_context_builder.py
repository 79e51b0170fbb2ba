"""ContextBuilder strategies (seed 004) and ExecutionContext."""

from __future__ import annotations

import pytest

from loomctx import ConfigError, LoomMemory, MemoryTiers, Task, TaskStatus
from loomctx.memory import ContextBuilder, ExecutionContext


def fill() -> LoomMemory:
    memory = LoomMemory("agent", tiers=MemoryTiers(max_l1_size=20), embedder=None)
    for n in range(15):
        memory.add_task(
            Task(
                task_id=f"t{n}",
                action="lookup",
                parameters={"topic": f"invoice code{n}"},
                status=TaskStatus.COMPLETED,
                result=f"invoice code{n} paid",
                metadata={"importance": 0.9 if n in (1, 2) else 0.3},
            )
        )
    memory.promote_tasks()
    return memory


def test_minimal_has_no_history() -> None:
    current = Task(action="lookup", parameters={"topic": "invoice 3"})
    ctx = ContextBuilder(fill()).with_current_task(current).with_strategy("minimal").build()
    assert ctx.task_history == ()
    assert ctx.current_task == current


def test_balanced_is_recent_plus_working_plus_relevant_deduplicated() -> None:
    memory = fill()
    current = Task(action="lookup", parameters={"topic": "invoice code7"})
    ctx = ContextBuilder(memory).with_current_task(current).build()
    ids = [t.task_id for t in ctx.task_history]
    assert len(ids) == len(set(ids))
    assert {"t10", "t11", "t12", "t13", "t14"} <= set(ids)  # 5 recent
    assert {"t1", "t2"} <= set(ids)  # the working set (L2)
    assert "t7" in ids  # found by search
    assert [t.created_at for t in ctx.task_history] == sorted(
        t.created_at for t in ctx.task_history
    )
    assert "invoice code7 paid" in ctx.history_text()


def test_comprehensive_has_more_recent_history() -> None:
    memory = fill()
    current = Task(action="lookup", parameters={"topic": "nothing"})
    balanced = ContextBuilder(memory).with_current_task(current).build()
    wide = ContextBuilder(memory).with_current_task(current).with_strategy("comprehensive").build()
    assert len(wide.task_history) > len(balanced.task_history)


def test_the_task_can_ask_for_its_strategy_and_fields_pass_through() -> None:
    current = Task(action="lookup", metadata={"context_strategy": "minimal"})
    ctx = (
        ContextBuilder()
        .with_memory(fill())
        .with_current_task(current)
        .with_session("s9")
        .with_agent_card({"name": "billing"})
        .with_parent_context({"goal": "close the books"})
        .with_metadata(trace="x")
        .build()
    )
    assert isinstance(ctx, ExecutionContext)
    assert ctx.strategy == "minimal"
    assert ctx.task_history == ()
    assert (ctx.session_id, ctx.agent_card, ctx.parent_context) == (
        "s9",
        {"name": "billing"},
        {"goal": "close the books"},
    )
    assert ctx.metadata == {"trace": "x"}


def test_unknown_strategies_are_rejected() -> None:
    with pytest.raises(ConfigError, match="unknown context strategy 'fast'"):
        ContextBuilder().with_strategy("fast")  # type: ignore[arg-type]
    bad = Task(action="x", metadata={"context_strategy": "fast"})
    with pytest.raises(ConfigError, match="asks for context strategy 'fast'"):
        ContextBuilder(fill()).with_current_task(bad).build()


def test_depth_counts_delegations_from_the_parent_context() -> None:
    assert ExecutionContext().depth == 0
    assert ContextBuilder().with_parent_context({"goal": "g"}).build().depth == 1
    assert ExecutionContext(parent_context={"depth": 3}).depth == 3
    for bad in (0, True, "2"):
        with pytest.raises(ConfigError, match=r"`parent_context\['depth'\]` must be an int >= 1"):
            ContextBuilder().with_parent_context({"depth": bad})

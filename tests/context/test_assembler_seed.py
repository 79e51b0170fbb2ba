"""Seed 000's five unit tests, as written there (only the imports adapted)."""

from __future__ import annotations

from loomctx.context import ComponentPriority, ContextAssembler


def test_basic_assembly() -> None:
    assembler = ContextAssembler(max_tokens=1000)
    assembler.add_component("part1", "Hello", priority=100)
    assembler.add_component("part2", "World", priority=90)

    result = assembler.assemble()

    assert "part1" in result.upper() or "PART1" in result.upper()
    assert "Hello" in result
    assert "World" in result


def test_priority_ordering() -> None:
    assembler = ContextAssembler(max_tokens=10000)
    assembler.add_component("low", "Low priority", priority=10)
    assembler.add_component("high", "High priority", priority=100)
    assembler.add_component("mid", "Mid priority", priority=50)

    result = assembler.assemble()

    high_pos = result.find("High priority")
    mid_pos = result.find("Mid priority")
    low_pos = result.find("Low priority")

    assert high_pos < mid_pos < low_pos


def test_token_budget() -> None:
    assembler = ContextAssembler(max_tokens=100)

    assembler.add_component("large", "x" * 1000, priority=50, truncatable=True)
    assembler.add_component("critical", "Important", priority=100, truncatable=False)

    result = assembler.assemble()
    summary = assembler.get_summary()

    assert "Important" in result
    assert summary["total_tokens"] <= 100


def test_non_truncatable_components() -> None:
    assembler = ContextAssembler(max_tokens=500)

    assembler.add_component("critical", "Critical content", priority=100, truncatable=False)
    assembler.add_component("optional", "x" * 10000, priority=50, truncatable=True)

    result = assembler.assemble()

    assert "Critical content" in result
    assert result.count("Critical content") == 1


def test_rag_context_preserved() -> None:
    assembler = ContextAssembler(max_tokens=2000)

    assembler.add_component(
        "base_instructions",
        "You are a helpful assistant.",
        priority=ComponentPriority.CRITICAL,
        truncatable=False,
    )

    assembler.add_component(
        "retrieved_docs",
        "Document 1: Important info\nDocument 2: More info",
        priority=ComponentPriority.HIGH,
        truncatable=True,
    )

    result = assembler.assemble()

    assert "Document 1" in result
    assert "Important info" in result

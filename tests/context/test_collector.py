"""ContextCollector isolation, block and budget validation, and adaptive budgets in a build."""

from __future__ import annotations

from typing import Any

import pytest

from loomctx import ConfigError, ContextOrchestrator, TiktokenCounter
from loomctx.context import (
    AdaptiveBudgetManager,
    BuildContext,
    ContextBlock,
    ContextCollector,
    TokenBudget,
)
from loomctx.context.sources import PromptSource, UserInputSource
from tests.context.test_orchestrator import DocsSource


class Returns:
    """A source returning whatever it is given, to test how the collector checks results."""

    def __init__(self, value: Any, name: str = "odd") -> None:
        self.value = value
        self.name = name
        self.priority = 0.5

    async def collect(self, query: str, budget: TokenBudget, *, ctx: BuildContext) -> Any:
        return self.value


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("not a list", "returned str, not a list of blocks"),
        (42, "returned int, not a list of blocks"),
        (["text"], "returned a str, not a ContextBlock"),
        (
            [ContextBlock(source="someone_else", section="context", content="x")],
            "labelled `someone_else`",
        ),
    ],
)
async def test_a_source_returning_the_wrong_thing_is_isolated(value: Any, needle: str) -> None:
    collector = ContextCollector(timeout=1)
    budget = TokenBudget(tokens=10, ceiling=100)
    (result,) = await collector.collect([Returns(value)], {"odd": budget}, "q", ctx=BuildContext())
    assert result.status == "error"
    assert needle in (result.error or "")
    assert result.blocks == ()


def test_collector_timeout_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="`timeout`"):
        ContextCollector(timeout=0)


def test_block_and_budget_validation() -> None:
    with pytest.raises(ConfigError, match=r"within 0\.\.1"):
        ContextBlock(source="s", section="context", priority=1.5)
    with pytest.raises(ConfigError, match="token_count must be >= 0"):
        ContextBlock(source="s", section="context", token_count=-1)
    with pytest.raises(ConfigError, match="0 <= tokens <= ceiling"):
        TokenBudget(tokens=10, ceiling=5)
    with pytest.raises(ConfigError, match="`turn_index`"):
        BuildContext(turn_index=-1)
    block = ContextBlock(source="s", section="history", messages=[], sequence=4)  # type: ignore[arg-type]
    assert block.messages == ()
    assert block.id == "s:4"
    assert BuildContext(history=[]).history == ()  # type: ignore[arg-type]
    assert ContextBlock(source="s", section="context").id == "s"


@pytest.mark.parametrize("section", ["memory", "User", "system", ""])
def test_a_block_outside_the_layout_is_refused_where_it_is_made(section: str) -> None:
    with pytest.raises(ConfigError) as err:
        ContextBlock(source="notes", section=section, content="x")  # type: ignore[arg-type]
    message = str(err.value)
    assert "source `notes`" in message
    assert f"section {section!r}" in message
    assert "`instructions`, `skills`, `tools`, `context`, `history`, `user`, `turn`" in message


class OffLayout:
    """A third-party source that files its text under a section the layout does not have."""

    name = "notes"
    priority = 0.5

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> list[ContextBlock]:
        return [ContextBlock(source=self.name, section="memory", content="The port is 8443.")]  # type: ignore[arg-type]


async def test_a_source_offering_an_unknown_section_is_reported_failed_not_kept() -> None:
    """Before, the block was counted and reported as kept, but no section rendered it."""
    window = await ContextOrchestrator(
        token_counter=TiktokenCounter(), sources=[OffLayout(), UserInputSource()]
    ).build(query="Which port?")
    (notes,) = (s for s in window.report.sources if s.name == "notes")
    assert notes.status == "error"
    assert notes.blocks_kept == 0
    assert "section 'memory'" in (notes.error or "")
    assert "use one of `instructions`" in (notes.error or "")
    assert all(b.source != "notes" for b in window.report.blocks)
    assert window.report.summary()["failed_sources"] == ["notes"]


def test_source_with_priority_out_of_range_is_rejected() -> None:
    bad = Returns([], name="bad")
    bad.priority = 2.0
    with pytest.raises(ConfigError, match=r"priority 2\.0"):
        ContextOrchestrator(sources=[bad])


async def test_adaptive_budget_gives_retrieval_more_early_than_late() -> None:
    docs = [f"Document {i}: " + "facts about orders. " * 60 for i in range(20)]

    def orch() -> ContextOrchestrator:
        return ContextOrchestrator(
            token_counter=TiktokenCounter(),
            sources=[PromptSource("Rules."), DocsSource(docs), UserInputSource(),
                     DocsSource(docs, name="L2_important", priority=0.6)],
            model_context_window=4000,
            budget_manager=AdaptiveBudgetManager(),
        )  # fmt: skip

    early = await orch().build(query="q", ctx=BuildContext(phase="early"))
    late = await orch().build(query="q", ctx=BuildContext(turn_index=20))

    def allocated(window: Any, name: str) -> int:
        return next(s.allocated for s in window.report.sources if s.name == name)

    assert allocated(early, "RAG_knowledge") > allocated(late, "RAG_knowledge")
    assert allocated(early, "L2_important") < allocated(late, "L2_important")

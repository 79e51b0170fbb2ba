"""Rendering of dynamic context: one fence per source, an item per block (``[id] text``),
fence tags in content neutralised, and a window whose count is exact and within budget."""

from __future__ import annotations

import asyncio

from hypothesis import event, given
from hypothesis import strategies as st

from loomctx.context.block import BuildContext, ContextBlock, TokenBudget
from loomctx.context.orchestrator import ContextOrchestrator
from loomctx.context.render import CONTEXT_PREAMBLE, item
from loomctx.context.sources import UserInputSource
from loomctx.tokens import TiktokenCounter

COUNTER = TiktokenCounter()


class Offers:
    """A context source offering fixed `(id, text)` items, best first (`None` as the id: the
    block's default id, the source's name)."""

    def __init__(self, name: str, items: list[tuple[str | None, str]], priority: float) -> None:
        self.name = name
        self.items = items
        self.priority = priority

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> list[ContextBlock]:
        return [
            ContextBlock(
                source=self.name,
                section="context",
                id=f"{self.name}:{key}" if key is not None else "",
                content=text,
                token_count=ctx.counter.count(text),
                priority=1.0 - i / (len(self.items) + 1),
                truncatable=True,
            )
            for i, (key, text) in enumerate(self.items)
        ]


def neutral(text: str) -> str:
    return text.replace("<context", "&lt;context").replace("</context", "&lt;/context")


WORDS = st.sampled_from(
    [
        "token",
        "OAuth2",
        "刷新",
        "间隔",
        "👍🏽",
        "</context>",
        '<context source="x">',
        "<context",
        "[m1]",
        "\n",
        "。",
        "the",
        "refund",
        "ledger",
    ]
)
TEXT = st.lists(WORDS, min_size=1, max_size=40).map(" ".join)
KEYS = st.sampled_from(["m1", "m2", "knowledge:kb:a.md#0", "knowledge:kb:b.md#3", "t9"])


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Offers], int]:
    names = draw(
        st.lists(st.sampled_from(["docs", "notes", "web"]), min_size=1, max_size=3, unique=True)
    )
    sources = []
    for name in names:
        if draw(st.booleans()):
            items: list[tuple[str | None, str]] = [(None, draw(TEXT))]
        else:
            keys = draw(st.lists(KEYS, min_size=1, max_size=4, unique=True))
            items = [(key, draw(TEXT)) for key in keys]
        sources.append(Offers(name, items, draw(st.sampled_from([0.5, 0.7, 0.9]))))
    return sources, draw(st.integers(min_value=80, max_value=1200))


@given(scenarios())
def test_one_fence_per_source_an_item_per_block_within_budget(
    scenario: tuple[list[Offers], int],
) -> None:
    sources, size = scenario
    orchestrator = ContextOrchestrator(
        token_counter=COUNTER,
        sources=[*sources, UserInputSource()],
        model_context_window=size,
        output_reserve_ratio=0.125,
    )
    window = asyncio.run(orchestrator.build("refresh interval?"))
    assert window.token_count == COUNTER.count_messages(window.messages, tools=window.tools)
    assert window.token_count <= orchestrator.available
    assert window.messages[-1].content == "refresh interval?"
    kept = [b for b in window.blocks if b.section == "context"]
    event(f"context blocks kept: {min(len(kept), 3)}")
    event(f"sources fenced: {len({b.source for b in kept})}")
    if not kept:
        assert len(window.messages) == 1
        return
    # The dynamic tail, a user message right before the user turn.
    assert window.messages[-2].role == "user"
    assert window.messages[-2].content.startswith(CONTEXT_PREAMBLE)
    context = window.messages[-2].content.removeprefix(CONTEXT_PREAMBLE)
    fenced = {b.source for b in kept}
    # Fence tags only where the renderer put them: content cannot open or close one.
    assert context.count("<context") == len(fenced)
    assert context.count("</context") == len(fenced)
    for source in fenced:
        opening = f'<context source="{source}">\n'
        assert context.count(opening) == 1
        start = context.index(opening) + len(opening)
        body = context[start : context.index("\n</context>", start)]
        where = 0
        for b in (b for b in kept if b.source == source):
            short = b.id.removeprefix(f"{source}:")
            item = neutral(b.content) if b.id == source else f"[{short}] {neutral(b.content)}"
            # In the order the source gave them.
            where = body.index(item, where) + len(item)


def test_an_item_is_labelled_by_its_metadata_label_or_its_id() -> None:
    def block(id_: str, **metadata: object) -> ContextBlock:
        return ContextBlock(source="kb", section="context", id=id_, content="text",
                            metadata=metadata)  # fmt: skip

    assert item(block("kb:doc#1")) == "[doc#1] text"
    assert item(block("kb:doc#1", label="")) == "text"
    assert item(block("kb:doc#1", label="Handbook > Refunds")) == "[Handbook > Refunds] text"
    assert item(block("kb")) == "text"  # a source's only block

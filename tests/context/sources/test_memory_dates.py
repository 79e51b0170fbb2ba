"""Memory items in the window say when they were said, never which task they are: the date
is for the model ("yesterday" in a remembered turn), the id for the report."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from loomctx import MemoryTiers
from loomctx.context.block import BuildContext
from loomctx.context.orchestrator import ContextOrchestrator
from loomctx.context.sources.memory import L2ImportantSource, L4SemanticSource
from loomctx.context.sources.prompt import UserInputSource
from loomctx.context.sources.retrieval import UnifiedRetrievalSource
from loomctx.memory.core import LoomMemory
from loomctx.memory.task import USER_MESSAGE, Task, said_at

HEX = re.compile(r"[0-9a-f]{32}")
WHEN = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def test_said_at_is_a_date_in_utc() -> None:
    assert said_at(WHEN) == "8 May 2023"
    assert said_at(WHEN, time=True) == "8 May 2023 13:56"
    plus_two = WHEN.astimezone(UTC).replace(tzinfo=None)
    assert said_at(plus_two) == "8 May 2023"  # a naive time is taken as it is
    from datetime import timezone

    late = datetime(2023, 5, 9, 1, 30, tzinfo=timezone(timedelta(hours=5)))
    assert said_at(late, time=True) == "8 May 2023 20:30"


def test_memory_blocks_carry_dates_and_no_hex_ids() -> None:
    memory = LoomMemory("dates", tiers=MemoryTiers(max_l1_size=2))
    try:
        said = [
            "Yesterday I booked the venue on Rua Augusta for the launch.",
            "The launch budget is 12,000 euros, decided last week.",
            "My co-founder Ana prefers a Thursday launch.",
            "We moved the demo to 14:00 after the rehearsal.",
        ]
        for i, text in enumerate(said):
            memory.add_task(
                Task(action=USER_MESSAGE, source_agent="user", parameters={"content": text},
                     created_at=WHEN + timedelta(days=i))
            )  # fmt: skip
            memory.promote_tasks()  # into L2 while still in L1 (of 2)
        for source in (
            L2ImportantSource(memory),
            L4SemanticSource(memory, exclude_recent=False),
            UnifiedRetrievalSource(memory, name="retrieved"),
        ):
            orchestrator = ContextOrchestrator(
                sources=[source, UserInputSource()], model_context_window=3000
            )
            window = orchestrator.build_sync("When did I book the venue for the launch?")
            text = "\n".join(m.content for m in window.messages)
            assert "[8 May 2023; yesterday = 7 May] user: Yesterday I booked the venue" in text, (
                source.name
            )
            assert HEX.search(text) is None
            # The ids stay in the report, for people.
            ids = [b.id for b in window.report.blocks if b.source == source.name]
            assert ids
            if source.name != "retrieved":
                assert all(HEX.search(i) for i in ids)
    finally:
        memory.close()


def test_a_memory_block_fits_its_ceiling_with_its_label() -> None:
    memory = LoomMemory("ceiling", embedder=None)
    try:
        memory.add_task(Task(action=USER_MESSAGE, parameters={"content": "word " * 40},
                             created_at=WHEN))  # fmt: skip
        source = L4SemanticSource(memory, exclude_recent=False)
        from loomctx.context.block import TokenBudget

        ctx = BuildContext()
        tight = TokenBudget(tokens=40, ceiling=41)
        import asyncio

        assert asyncio.run(source.collect("word", tight, ctx=ctx)) == []
        roomy = TokenBudget(tokens=60, ceiling=60)
        (block,) = asyncio.run(source.collect("word", roomy, ctx=ctx))
        assert block.metadata["label"] == "8 May 2023"
    finally:
        memory.close()

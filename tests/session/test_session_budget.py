"""A session's budget manager (issue 16, item 3): an `AdaptiveBudgetManager` given as the
option `budget_manager` shifts the split of the session's windows with the task's progress,
and the static limit applies to the session's system prompt."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from loomctx.context.block import BuildContext
from loomctx.context.budget import AdaptiveBudgetManager, BudgetManager
from loomctx.errors import BudgetExceededError, ConfigError
from loomctx.session.bus import InProcessEventBus
from loomctx.session.controller import ContextController
from loomctx.session.options import SessionOptions
from loomctx.stores.sqlite import SQLiteStore


@pytest.fixture
async def controller(tmp_path: Path) -> AsyncIterator[ContextController]:
    store = SQLiteStore(tmp_path / "sessions.db")
    bus = InProcessEventBus()
    controller = ContextController(store, bus)
    await controller.start()
    yield controller
    await controller.close()
    await bus.close()
    store.close()


def allocated(report: object, name: str) -> int:
    return next(s.allocated for s in report.sources if s.name == name)  # type: ignore[attr-defined]


async def test_an_adaptive_manager_shifts_a_session_s_split_with_progress(
    controller: ContextController,
) -> None:
    manager = AdaptiveBudgetManager()
    session = await controller.create_session("s1", system_prompt="Help.", budget_manager=manager)
    assert session.budget_manager is manager
    reports = [
        (await session.build_context("refund?", ctx=BuildContext(progress=p))).report
        for p in (0.0, 0.5, 0.9)
    ]
    early, middle, late = reports
    assert allocated(early, "unified_retrieval") > allocated(middle, "unified_retrieval")
    assert allocated(middle, "L1_recent") > allocated(early, "L1_recent")
    assert allocated(middle, "L1_recent") > allocated(late, "L1_recent")
    assert allocated(late, "L2_important") > allocated(early, "L2_important")
    assert allocated(late, "L2_important") > allocated(middle, "L2_important")


async def test_the_manager_is_not_stored_and_is_set_again_on_a_reopened_session(
    tmp_path: Path,
) -> None:
    options = SessionOptions.from_options({"budget_manager": BudgetManager(static_ratio=0.5)})
    assert "budget_manager" not in options.to_dict()
    with pytest.raises(ConfigError, match="option `budget_manager` must be a BudgetManager"):
        SessionOptions.from_options({"budget_manager": {"L1_recent": 0.4}})
    store = SQLiteStore(tmp_path / "s.db")
    bus = InProcessEventBus()
    first = ContextController(store, bus)
    await first.create_session("s1", budget_manager=AdaptiveBudgetManager())
    await first.close()
    second = ContextController(store, bus)
    reopened = second.get_session("s1")
    assert type(reopened.budget_manager) is BudgetManager
    reopened.budget_manager = AdaptiveBudgetManager()
    assert isinstance(reopened.budget_manager, AdaptiveBudgetManager)
    with pytest.raises(ConfigError, match="`budget_manager` must be a BudgetManager"):
        reopened.budget_manager = 0.5  # type: ignore[assignment]
    await second.close()
    await bus.close()
    store.close()


async def test_the_static_limit_applies_to_the_session_s_system_prompt(
    controller: ContextController,
) -> None:
    prompt = "Quote order numbers exactly. " * 400  # about 2,000 tokens
    roomy = await controller.create_session("roomy", system_prompt=prompt)
    window = await roomy.build_context("hi")
    assert prompt in window.messages[0].content
    tight = await controller.create_session(
        "tight", system_prompt=prompt, budget_manager=BudgetManager(static_tokens=1_000)
    )
    with pytest.raises(BudgetExceededError, match="budget of 1000 tokens") as caught:
        await tight.build_context("hi")
    assert "static_tokens" in str(caught.value)

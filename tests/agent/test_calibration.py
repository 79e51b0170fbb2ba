"""Claude's counts are an estimate: `UsageCalibration` keeps a margin and learns it per model
from the usage the provider reports (recorded numbers, and the real SDK over HTTP)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import pytest

from loomctx import AgentWindow
from loomctx.agent.providers import AnthropicLLM
from loomctx.errors import ConfigError
from loomctx.messages import Message
from loomctx.tokens import TiktokenCounter, UsageCalibration
from tests.agent._servers import WireServer, anthropic_text, collect

pytest.importorskip("anthropic", reason="needs the `anthropic` extra (in `.[dev]`)")

# (Loom's o200k count, Anthropic's reported input tokens) of calls to one model: ratios 1.08-1.14.
RECORDED = [(1200, 1310), (1850, 2040), (960, 1049), (2400, 2660), (1530, 1652), (3100, 3534)]


def test_the_margin_starts_at_the_prior_and_shrinks_as_calls_are_made() -> None:
    cal = UsageCalibration()
    assert cal.factor("claude-x") == 1.25
    assert cal.safe_window("claude-x", 200_000) == 160_000
    factors = []
    for counted, reported in RECORDED:
        cal.record("claude-x", counted=counted, reported=reported)
        factors.append(cal.factor("claude-x"))
    assert cal.samples("claude-x") == len(RECORDED)
    ratios = [r / c for c, r in RECORDED]
    # Always above every ratio seen, so the provider's count stays within the window...
    assert all(f > max(ratios[: i + 1]) for i, f in enumerate(factors))
    # ...and closer to the truth with every call: far below the prior after six.
    assert factors[-1] < factors[0] < 1.25
    assert factors[-1] < 1.2
    assert cal.safe_window("claude-x", 200_000) > 160_000
    # Models are learnt apart.
    assert cal.factor("claude-y") == 1.25


def test_a_model_that_counts_like_o200k_keeps_only_the_minimum_margin() -> None:
    cal = UsageCalibration(prior=1.3, min_margin=0.02, window=50)
    for _ in range(200):
        cal.record("m", counted=1000, reported=1000)
    assert cal.samples("m") == 50  # the last `window` calls
    assert math.isclose(cal.factor("m"), 1.02 + 0.3 / 51)


def test_calls_that_teach_nothing_are_skipped_and_bad_numbers_refused() -> None:
    cal = UsageCalibration()
    cal.record("m", counted=0, reported=12)
    cal.record("m", counted=12, reported=0)
    assert cal.samples("m") == 0
    with pytest.raises(ConfigError, match="must be >= 0"):
        cal.record("m", counted=-1, reported=5)
    for bad in ({"prior": 0.9}, {"prior": math.nan}, {"min_margin": 1.5}, {"window": 0}):
        with pytest.raises(ConfigError):
            UsageCalibration(**bad)  # type: ignore[arg-type]


@pytest.fixture
async def wire() -> AsyncIterator[WireServer]:
    server = WireServer().start()
    yield server
    server.stop()


async def test_the_anthropic_provider_records_reported_usage(wire: WireServer) -> None:
    messages = [Message.system("You are terse."), Message.user("What is 2 + 2? " * 20)]
    counted = TiktokenCounter().count_messages(messages)
    wire.script(anthropic_text("4", input_tokens=counted + 9, cache_read=0))
    cal = UsageCalibration()
    llm = AnthropicLLM("claude-test", base_url=wire.url, api_key="k", calibration=cal)
    try:
        from loomctx.agent.llm import allow_model_requests

        with allow_model_requests():
            await collect(llm.stream(messages))
    finally:
        await llm.aclose()
    assert cal.samples("claude-test") == 1
    expected = (counted + 9) / counted
    assert math.isclose(cal.factor("claude-test"), expected * 1.02 + (1.25 - expected) / 2)
    with pytest.raises(ConfigError, match="UsageCalibration"):
        AnthropicLLM("claude-test", base_url=wire.url, api_key="k", calibration=1.2)  # type: ignore[arg-type]


@pytest.mark.parametrize("recorded", [False, True], ids=["plain", "recorded by the cli"])
async def test_an_agent_builds_within_the_window_its_calibration_deems_safe(
    wire: WireServer, recorded: bool
) -> None:
    from loomctx.agent.events import ContextAssembled
    from loomctx.agent.executor import Agent
    from loomctx.agent.llm import allow_model_requests
    from loomctx.cli._agent import RecordingLLM

    cal = UsageCalibration()
    llm = AnthropicLLM("claude-test", base_url=wire.url, api_key="k", calibration=cal)
    # `loomctx chat` and `demo` wrap the model to save what each call sent: the margin stays.
    model = RecordingLLM(llm) if recorded else llm
    agent = Agent(
        model, "You are terse.", embedder=None, window=AgentWindow(model_context_window=10_000)
    )

    async def available() -> int:
        wire.script(anthropic_text("4", input_tokens=200))
        seen = [e async for e in agent.stream("What is 2 + 2?")]
        return int(next(e for e in seen if isinstance(e, ContextAssembled)).report["available"])

    try:
        with allow_model_requests():
            first = await available()
            safe = cal.safe_window("claude-test", 10_000)  # what the second run may use
            second = await available()
    finally:
        await llm.aclose()
    # Before any call: the prior's margin (10,000 / 1.25, less the 20% reply reserve).
    assert first == 6_400
    # Anthropic reported far more than Loom counted: the margin grew, the window shrank.
    assert cal.samples("claude-test") >= 1
    assert second < first
    from loomctx.context.budget import BudgetManager

    assert second == BudgetManager.available(safe, output_reserve_ratio=0.2)[0]


async def test_every_anthropic_provider_keeps_a_margin_unless_told_not_to(
    wire: WireServer,
) -> None:
    """The margin is the default: an agent on a plain `AnthropicLLM` builds its first window
    for 10,000 / 1.25 tokens, and learns from the call; `calibration=None` turns it off."""
    from loomctx.agent.events import ContextAssembled
    from loomctx.agent.executor import Agent
    from loomctx.agent.llm import allow_model_requests

    async def first_available(llm: AnthropicLLM) -> int:
        agent = Agent(
            llm, "You are terse.", embedder=None, window=AgentWindow(model_context_window=10_000)
        )
        wire.script(anthropic_text("4", input_tokens=200))
        try:
            with allow_model_requests():
                seen = [e async for e in agent.stream("What is 2 + 2?")]
        finally:
            await llm.aclose()
        return int(next(e for e in seen if isinstance(e, ContextAssembled)).report["available"])

    plain = AnthropicLLM("claude-test", base_url=wire.url, api_key="k")
    assert isinstance(plain.calibration, UsageCalibration)
    assert await first_available(plain) == 6_400  # the prior's margin, less the reply's 20%
    assert plain.calibration.samples("claude-test") == 1
    # Each provider learns on its own; a shared calibration is passed in and used as is.
    other = AnthropicLLM("claude-test", base_url=wire.url, api_key="k")
    assert other.calibration is not plain.calibration
    await other.aclose()
    shared = UsageCalibration(prior=1.6)
    given = AnthropicLLM("claude-test", base_url=wire.url, api_key="k", calibration=shared)
    assert given.calibration is shared
    assert await first_available(given) == 5_000  # 10,000 / 1.6 = 6,250, less 20%

    off = AnthropicLLM("claude-test", base_url=wire.url, api_key="k", calibration=None)
    assert off.calibration is None
    assert await first_available(off) == 8_000  # the whole window, less the reply's 20%

"""An agent's receipt per call: each window predicts the bill under its provider's cache
(`loomctx.context.billing`), and each `LLMCompleted` sets the provider's reported usage
beside the prediction (the real SDKs over HTTP, against a local wire server)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from loomctx import AgentWindow
from loomctx.agent.events import ContextAssembled, LLMCompleted
from loomctx.agent.executor import Agent
from loomctx.agent.llm import allow_model_requests
from loomctx.agent.providers import AnthropicLLM, OpenAIChatLLM
from loomctx.context.billing import ANTHROPIC, OPENAI_GPT5, ReportedUsage
from tests.agent._servers import (
    WireServer,
    anthropic_end,
    anthropic_message_start,
    anthropic_sse,
    anthropic_text_block,
    openai_text,
)

pytest.importorskip("anthropic", reason="needs the `anthropic` extra (in `.[dev]`)")

RULES = "\n".join(f"Rule {i}: quote order number {i} when asked about it." for i in range(150))


@pytest.fixture
async def wire() -> AsyncIterator[WireServer]:
    server = WireServer().start()
    yield server
    server.stop()


async def _turn(agent: Agent, prompt: str) -> tuple[ContextAssembled, LLMCompleted]:
    events = [e async for e in agent.stream(prompt)]
    built = next(e for e in events if isinstance(e, ContextAssembled))
    done = next(e for e in events if isinstance(e, LLMCompleted))
    return built, done


async def test_each_call_carries_its_prediction_beside_the_provider_s_usage(
    wire: WireServer,
) -> None:
    llm = AnthropicLLM("claude-test", base_url=wire.url, api_key="k")
    assert llm.pricing is ANTHROPIC
    agent = Agent(llm, RULES, embedder=None, window=AgentWindow(model_context_window=12_000))
    assert agent.pricing is ANTHROPIC
    wire.script(
        anthropic_sse(
            anthropic_message_start(input_tokens=30, cache_read=0, cache_creation=1800),
            anthropic_text_block(0, "Hello."),
            anthropic_end("end_turn"),
        ),
        anthropic_sse(
            anthropic_message_start(input_tokens=30, cache_read=1800, cache_creation=40),
            anthropic_text_block(0, "Order 7 shipped."),
            anthropic_end("end_turn"),
        ),
    )
    try:
        with allow_model_requests():
            built, done = await _turn(agent, "Hi")
            report = built.report
            assert report["pricing"] == "anthropic"
            assert done.predicted is not None
            assert (done.predicted.cached, done.predicted.written, done.predicted.plain) == (
                report["predicted_cached"],
                report["predicted_written"],
                report["predicted_plain"],
            )
            assert done.predicted.cached == 0
            assert done.predicted.written > 1024
            assert done.reported == ReportedUsage(input=1830, cache_read=0, cache_write=1800)

            built, done = await _turn(agent, "Where is order 7?")
            # The second call reads what the first wrote, up to its last breakpoint.
            assert done.predicted is not None
            assert done.predicted.cached == report["cache_marks"][-1]
            assert built.report["predicted_cached"] == done.predicted.cached
            assert done.reported == ReportedUsage(input=1870, cache_read=1800, cache_write=40)
    finally:
        await llm.aclose()
    assert "cache_control" in str(wire.requests[1].body)


async def test_an_openai_model_s_family_sets_its_pricing(wire: WireServer) -> None:
    llm = OpenAIChatLLM("gpt-5-mini", base_url=wire.openai_url, api_key="k")
    agent = Agent(llm, RULES, embedder=None, window=AgentWindow(model_context_window=12_000))
    assert agent.pricing is OPENAI_GPT5
    wire.script(openai_text("Hi.", usage=(1500, 2), cached=1024))
    try:
        with allow_model_requests():
            built, done = await _turn(agent, "Hello")
    finally:
        await llm.aclose()
    assert built.report["pricing"] == "openai-gpt-5"
    assert done.predicted is not None
    assert done.predicted.written == 0  # an automatic cache: no write premium
    assert done.reported == ReportedUsage(input=1500, cache_read=1024, cache_write=0)

"""The OpenAI Agents SDK on its default model (the Responses API) through `loomctx serve`:
a turn with a tool call and its result, streamed and not."""

from __future__ import annotations

import asyncio

import agents
import openai
import pytest

from tests.agent._servers import (
    openai_chunk,
    openai_sse,
    openai_text,
    openai_tool_delta,
    openai_usage_chunk,
)
from tests.server.conftest import ACME_KEY


def _weather_call() -> object:
    return openai_sse(
        [
            openai_chunk({"role": "assistant", "content": None}),
            openai_chunk(openai_tool_delta(0, id="call_a1", name="get_weather")),
            openai_chunk(openai_tool_delta(0, arguments='{"city": "Paris"}')),
            openai_chunk({}, finish_reason="tool_calls"),
            openai_usage_chunk(30, 9),
        ]
    )


@agents.function_tool
def get_weather(city: str) -> str:
    """The weather in a city now."""
    return f"sunny in {city}, 24C"


def _agent(loom) -> object:  # type: ignore[no-untyped-def]
    client = openai.AsyncOpenAI(base_url=loom.v1, api_key=ACME_KEY, max_retries=0)
    model = agents.OpenAIResponsesModel(model="gpt-test", openai_client=client)
    agent = agents.Agent(
        name="Forecaster", instructions="Answer briefly.", tools=[get_weather], model=model
    )
    return agent, client


@pytest.mark.parametrize("streamed", [False, True])
def test_a_turn_with_a_tool(loom, streamed: bool) -> None:
    agents.set_tracing_disabled(True)
    loom.wire.script(_weather_call(), openai_text("It is sunny in Paris."))
    agent, client = _agent(loom)

    async def run() -> str:
        try:
            if streamed:
                result = agents.Runner.run_streamed(agent, "Weather in Paris?")
                async for _ in result.stream_events():
                    pass
            else:
                result = await agents.Runner.run(agent, "Weather in Paris?")
            return str(result.final_output)
        finally:
            await client.close()

    assert asyncio.run(run()) == "It is sunny in Paris."
    second = loom.wire.requests[1].body["messages"]
    assert second[0]["content"] == "You work for ACME.\n\nAnswer briefly."
    assert second[-2]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert second[-1] == {
        "role": "tool",
        "tool_call_id": "call_a1",
        "content": "sunny in Paris, 24C",
    }

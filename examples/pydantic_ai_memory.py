"""Loom as a pydantic-ai agent's memory: a history processor that sends Loom's window.

Runs offline with pydantic-ai's `FunctionModel` (``pip install 'loomctx[pydantic-ai]'``):
an early fact, turns that push it out of the window's history, and the question about it,
which Loom's memory recalls.
"""

from __future__ import annotations

import asyncio

from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from loomctx import LoomMemory
from loomctx.integrations.pydantic_ai import LoomHistory


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Answers with the window's size: what a real model would have been sent."""
    return ModelResponse(parts=[TextPart(f"(saw {len(messages)} messages)")])


async def main() -> None:
    memory = LoomMemory("pydantic-ai-demo", embedder=None)
    history = LoomHistory(memory, window=700)
    agent = Agent(FunctionModel(model), capabilities=[ProcessHistory(history)])
    prompts = [
        "The vault code for the Lisbon office is 7421.",
        *(
            f"Turn {i}: log that crate {i} of the harbour shipment left the dock on time, "
            f"with {i + 3} boxes checked by the night shift."
            for i in range(12)
        ),
        "What is the vault code for the Lisbon office?",
    ]
    messages: list[ModelMessage] = []
    for prompt in prompts:
        result = await agent.run(prompt, message_history=messages)
        messages = result.all_messages()
    window = history.last_window
    print(f"last window: {window.token_count} tokens, {len(window.messages)} messages")
    print("recalls the vault code:", any("7421" in m.content for m in window.messages))


if __name__ == "__main__":
    asyncio.run(main())

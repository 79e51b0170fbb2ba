"""Loom as an OpenAI Agents SDK session: `Runner.run(..., session=LoomSession(...))`.

Runs offline with a small custom `Model` (``pip install 'loomctx[agents]'``); with a real
model, drop `model=` and set OPENAI_API_KEY.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agents import Agent, ModelResponse, Runner, set_tracing_disabled
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from loomctx import LoomMemory
from loomctx.integrations.openai_agents import LoomSession

set_tracing_disabled(True)  # offline: no trace export


class EchoModel(Model):
    """Answers with how many input items it was sent."""

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        text = ResponseOutputText(type="output_text", text=f"(saw {len(input)} items)",
                                  annotations=[])  # fmt: skip
        out = ResponseOutputMessage(id="msg", type="message", role="assistant",
                                    status="completed", content=[text])  # fmt: skip
        return ModelResponse(output=[out], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


async def main() -> None:
    memory = LoomMemory("agents-demo", embedder=None)
    session = LoomSession("user-42", memory, window=700)
    agent = Agent(name="helper", instructions="You help.", model=EchoModel())
    prompts = [
        "The vault code for the Lisbon office is 7421.",
        *(
            f"Turn {i}: log that crate {i} of the harbour shipment left the dock on time, "
            f"with {i + 3} boxes checked by the night shift."
            for i in range(12)
        ),
        "What is the vault code for the Lisbon office?",
    ]
    for prompt in prompts:
        await Runner.run(agent, prompt, session=session)
    items = await session.get_items()  # the window the next run starts from
    print(f"next run's history: {len(items)} items")
    print("recalls the vault code:", any("7421" in str(i.get("content")) for i in items))


if __name__ == "__main__":
    asyncio.run(main())

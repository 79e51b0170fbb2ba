"""Loom as a LangGraph agent's memory: `create_react_agent`'s pre-model hook sends Loom's
window to the model while the graph's state keeps every message.

Runs offline with LangChain's fake chat model (``pip install 'loomctx[langgraph]'``).
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.prebuilt import create_react_agent

from loomctx import LoomMemory
from loomctx.integrations.langgraph import LoomPreModelHook


class FakeModel(GenericFakeChatModel):
    """Answers "Noted." to every call (tools bound, none called)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> FakeModel:
        return self


async def main() -> None:
    hook = LoomPreModelHook(LoomMemory("langgraph-demo", embedder=None),
                            window=700)  # fmt: skip
    model = FakeModel(messages=iter(AIMessage("Noted.") for _ in range(100)))
    with warnings.catch_warnings():  # LangGraph 1.x: `create_react_agent` is deprecated
        warnings.simplefilter("ignore")
        agent = create_react_agent(model, [], pre_model_hook=hook)
    prompts = [
        "The vault code for the Lisbon office is 7421.",
        *(
            f"Turn {i}: log that crate {i} of the harbour shipment left the dock on time, "
            f"with {i + 3} boxes checked by the night shift."
            for i in range(12)
        ),
        "What is the vault code for the Lisbon office?",
    ]
    state: dict[str, Any] = {"messages": []}
    for prompt in prompts:
        state = await agent.ainvoke({"messages": [*state["messages"], ("user", prompt)]})
    window = hook.last_window
    print(f"state: {len(state['messages'])} messages; the model's last window: "
          f"{window.token_count} tokens, {len(window.messages)} messages")  # fmt: skip
    print("recalls the vault code:", any("7421" in m.content for m in window.messages))


if __name__ == "__main__":
    asyncio.run(main())

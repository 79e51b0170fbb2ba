"""LangGraph's pre-model hook against the real package: `create_react_agent` with a fake
chat model that calls a tool once per turn."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent

from loomctx.integrations.langgraph import LoomPreModelHook, from_langchain
from tests.integrations._conversation import FACT, FILLER, QUESTION, WINDOW, check_window, memory

_ids = itertools.count()


class ToolCallingFake(GenericFakeChatModel):
    """Calls `note` when the last message is not its result, then answers; keeps what it saw."""

    seen: ClassVar[list[list[BaseMessage]]] = []

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ToolCallingFake:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        if isinstance(messages[-1], ToolMessage):
            reply = AIMessage("Noted.")
        else:
            call = {"id": f"call_{next(_ids)}", "name": "note", "args": {"what": "turn"}}
            reply = AIMessage("", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def note(what: str) -> str:
    """Note something."""
    return f"noted {what}"


# LangGraph 1.x moves `create_react_agent` to `langchain.agents.create_agent`; it still runs.
@pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10")
async def test_a_multi_turn_run_with_a_tool_gets_loom_windows_and_recalls_an_early_turn() -> None:
    model = ToolCallingFake(messages=iter(()))
    hook = LoomPreModelHook(memory(), window=WINDOW)
    agent = create_react_agent(model, [note], prompt="You help.", pre_model_hook=hook)
    state: dict[str, Any] = {"messages": []}
    for prompt in [FACT, *FILLER, QUESTION]:
        state = await agent.ainvoke({"messages": [*state["messages"], ("user", prompt)]})

    assert len(model.seen) == 2 * (len(FILLER) + 2)
    assert len(state["messages"]) == 4 * (len(FILLER) + 2)  # the state keeps every message
    for seen in model.seen:
        check_window(from_langchain(seen), budget=WINDOW + 20)  # + the graph's prompt
    final = from_langchain(model.seen[-1])
    text = "\n".join(m.content for m in final)
    assert QUESTION in text
    assert "7421" in text  # recalled from memory: history no longer reaches back to it
    assert not all(f in text for f in FILLER)
    assert final[-1].role == "tool"

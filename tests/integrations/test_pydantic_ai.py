"""pydantic-ai's history processor against the real package (a `FunctionModel` as the model)."""

from __future__ import annotations

import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from loomctx.errors import MessageFormatError
from loomctx.integrations.pydantic_ai import LoomHistory, from_model_messages
from tests.integrations._conversation import FACT, FILLER, QUESTION, WINDOW, check_window, memory

SEEN: list[list[ModelMessage]] = []


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    SEEN.append(list(messages))
    last = messages[-1]
    if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
        return ModelResponse(parts=[TextPart("Noted.")])
    return ModelResponse(parts=[ToolCallPart(tool_name="note", args={"what": "turn"})])


async def test_a_multi_turn_run_with_a_tool_gets_loom_windows_and_recalls_an_early_turn() -> None:
    SEEN.clear()
    history = LoomHistory(memory(), window=WINDOW)
    agent = Agent(
        FunctionModel(_model), system_prompt="You help.", capabilities=[ProcessHistory(history)]
    )

    @agent.tool_plain
    def note(what: str) -> str:
        """Note something."""
        return f"noted {what}"

    messages: list[ModelMessage] = []
    for prompt in [FACT, *FILLER, QUESTION]:
        result = await agent.run(prompt, message_history=messages)
        messages = result.all_messages()

    assert len(SEEN) == 2 * (len(FILLER) + 2)  # each turn: a tool call, then the answer
    for seen in SEEN:
        check_window(from_model_messages(seen))
    final = from_model_messages(SEEN[-1])
    text = "\n".join(m.content for m in final)
    assert "You help." in text
    assert QUESTION in text
    assert "7421" in text  # recalled from memory: history no longer reaches back to it
    assert not all(f in text for f in FILLER)
    assert final[-1].role == "tool"  # the turn's tool call and its return, pinned


async def test_an_image_in_a_prompt_is_refused_before_anything_is_recorded() -> None:
    from pydantic_ai.messages import ImageUrl, UserPromptPart

    history = LoomHistory(memory(), window=WINDOW)
    bad = [
        ModelRequest(parts=[UserPromptPart(["look", ImageUrl(url="https://x.test/a.png")])]),
        ModelResponse(parts=[TextPart("ok")]),
        ModelRequest(parts=[UserPromptPart("next")]),
    ]
    with pytest.raises(MessageFormatError, match="text only"):
        await history(bad)
    assert history.loom.memory.get_l1_tasks() == []

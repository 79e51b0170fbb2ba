"""The OpenAI Agents SDK's `Session` against the real package: `Runner.run` with a model that
calls a tool once per turn."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from agents import Agent, ModelResponse, Runner, function_tool, set_tracing_disabled
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from loomctx import MemoryEmbedding
from loomctx.errors import MessageFormatError
from loomctx.integrations.openai_agents import LoomSession, items_to_messages
from tests.integrations._conversation import FACT, FILLER, QUESTION, WINDOW, check_window, memory

_ids = itertools.count()
set_tracing_disabled(True)  # offline: no trace export


class ToolCallingModel(Model):
    """Calls `note` when the last input item is not its output, then answers; keeps what
    it was sent."""

    def __init__(self) -> None:
        self.seen: list[list[Any]] = []

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        self.seen.append(items)
        n = next(_ids)
        if items[-1].get("type") == "function_call_output":
            out: Any = ResponseOutputMessage(
                id=f"msg_{n}",
                type="message",
                role="assistant",
                status="completed",
                content=[ResponseOutputText(type="output_text", text="Noted.", annotations=[])],
            )
        else:
            out = ResponseFunctionToolCall(
                type="function_call", call_id=f"call_{n}", name="note", arguments='{"what": "turn"}'
            )
        return ModelResponse(output=[out], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the test runs without streaming")


@function_tool
def note(what: str) -> str:
    """Note something."""
    return f"noted {what}"


async def test_a_multi_turn_run_with_a_tool_gets_loom_windows_and_recalls_an_early_turn() -> None:
    model = ToolCallingModel()
    agent = Agent(name="helper", instructions="You help.", model=model, tools=[note])
    session = LoomSession("user-1", memory(), window=WINDOW)
    for prompt in [FACT, *FILLER, QUESTION]:
        await Runner.run(agent, prompt, session=session)

    assert len(model.seen) == 2 * (len(FILLER) + 2)
    for seen in model.seen:
        check_window(items_to_messages(seen), budget=WINDOW + 120)  # + the turn's new input
    assert model.seen[-1][-1]["type"] == "function_call_output"
    # The SDK reads the session before the new input: the window is queried by the latest turn.
    window = await session.get_items()
    check_window(items_to_messages(window))
    text = "\n".join(str(i.get("content", "")) for i in window)
    assert QUESTION in text
    assert "7421" in text  # recalled from memory: history no longer reaches back to it
    assert not all(f in text for f in FILLER)


async def test_items_pop_and_clear() -> None:
    session = LoomSession("user-2", memory(), window=WINDOW)
    await session.add_items([{"role": "user", "content": "hello"}])
    await session.add_items([{"role": "assistant", "content": "hi there"}])
    assert await session.pop_item() == {"role": "assistant", "content": "hi there"}
    assert [i["content"] for i in await session.get_items()] == ["hello"]
    await session.clear_session()
    assert await session.get_items() == []
    assert await session.pop_item() is None


async def test_an_image_item_is_refused_before_anything_is_stored() -> None:
    session = LoomSession("user-3", memory(), window=WINDOW)
    image = {"type": "input_image", "image_url": "https://x.test/a.png"}
    with pytest.raises(MessageFormatError, match="text only"):
        await session.add_items([{"role": "user", "content": [image]}])
    assert await session.get_items() == []


async def test_a_session_reopened_in_a_new_process_records_nothing_twice(tmp_path: Any) -> None:
    from loomctx import LoomMemory, SQLiteStore

    path = str(tmp_path / "loom.db")

    def reopen() -> LoomSession:
        store = SQLiteStore(path)
        mem = LoomMemory(
            "conversation",
            store=store,
            embedder=None,
            embedding=MemoryEmbedding(fast_embedder=None),
        )
        return LoomSession("user-4", mem, window=WINDOW)

    session = reopen()
    turns = [("u1", "a1"), ("u2", "a2")]
    for user, reply in turns:
        await session.add_items([{"role": "user", "content": user}])
        await session.add_items([{"role": "assistant", "content": reply}])
        await session.get_items()
    session = reopen()
    await session.add_items([{"role": "user", "content": "u3"}])
    items = await session.get_items()
    assert [i["content"] for i in items] == ["u1", "a1", "u2", "a2", "u3"]
    recorded = [t.parameters["content"] for t in session.memory.recent_tasks(100)]
    assert recorded == ["u1", "a1", "u2", "a2"]


async def test_parallel_calls_come_back_before_their_outputs() -> None:
    session = LoomSession("user-5", memory(), window=WINDOW)
    calls = [
        {"type": "function_call", "call_id": f"c{i}", "name": "note", "arguments": "{}"}
        for i in (1, 2)
    ]
    outputs = [
        {"type": "function_call_output", "call_id": f"c{i}", "output": f"r{i}"} for i in (1, 2)
    ]
    await session.add_items([{"role": "user", "content": "note twice"}, *calls, *outputs])
    await session.add_items([{"role": "assistant", "content": "done"}])
    items = await session.get_items()
    kinds = [(i.get("type", "message"), i.get("call_id")) for i in items]
    assert kinds == [
        ("message", None),
        ("function_call", "c1"),
        ("function_call", "c2"),
        ("function_call_output", "c1"),
        ("function_call_output", "c2"),
        ("message", None),
    ]
    assert await session.get_items(limit=3) == items[-1:]  # never an output without its call

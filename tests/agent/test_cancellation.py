"""Cancelling a run: it stops at once, leaves no task behind, keeps memory whole, and the
agent runs again afterwards."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest

from loomctx import Agent, AgentEventType, ConfigError, LoomMemory, Message, ToolCall, tool
from loomctx.agent.llm import LLMChunk, LLMOptions, TextDelta
from loomctx.messages import split_units
from loomctx.testing import ScriptedLLM


def leftover_tasks() -> set[asyncio.Task[Any]]:
    return asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]


def actions(memory: LoomMemory) -> list[str]:
    return [t.action for t in memory.get_l1_tasks(limit=50)]


def history(messages: Sequence[Message]) -> list[Message]:
    """The window's conversation, checked to be whole tool units."""
    conversation = [m for m in messages if m.role != "system"]
    split_units(conversation)
    return conversation


async def test_cancelling_a_run_cancels_its_async_tool_and_keeps_memory_whole() -> None:
    started, never = asyncio.Event(), asyncio.Event()
    cancelled: list[str] = []

    @tool
    def quick() -> str:
        """Answer at once."""
        return "quick result"

    @tool(concurrent=False)
    async def wait() -> str:
        """Wait for something that never happens."""
        started.set()
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.append("wait")
            raise
        return "never"

    calls = [
        ToolCall(id="c1", name="quick", arguments={}),
        ToolCall(id="c2", name="wait", arguments={}),
    ]
    llm = ScriptedLLM([calls, "Fresh answer."])
    agent = Agent(llm=llm, tools=[quick, wait], embedder=None)
    runner = asyncio.create_task(agent.run("Do both."))
    await started.wait()
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner
    assert cancelled == ["wait"]
    assert leftover_tasks() == set()
    # `quick` had its result, but its unit was not complete: nothing of the turn was kept.
    assert actions(agent.memory) == ["user_message"]
    assert await agent.run("Try again.") == "Fresh answer."
    window = history(llm.calls[1].messages)
    assert window == [Message.user("Do both."), Message.user("Try again.")]
    assert actions(agent.memory) == ["user_message", "user_message", "assistant_message"]


async def test_cancelling_abandons_a_sync_tool_in_its_thread() -> None:
    entered, release = threading.Event(), threading.Event()
    finished: list[str] = []

    @tool
    def block() -> str:
        """Block the worker thread."""
        entered.set()
        release.wait(30)
        finished.append("block")
        return "late"

    llm = ScriptedLLM([[ToolCall(id="c1", name="block", arguments={})], "Later."])
    agent = Agent(llm=llm, tools=[block], embedder=None)
    runner = asyncio.create_task(agent.run("Block."))
    try:
        await asyncio.to_thread(entered.wait, 30)
        runner.cancel()
        with pytest.raises(asyncio.CancelledError):
            await runner
        assert finished == []  # the run ended while the thread still blocks
        assert leftover_tasks() == set()
        assert actions(agent.memory) == ["user_message"]
    finally:
        release.set()
    assert await agent.run("Again.") == "Later."
    assert history(llm.calls[1].messages) == [Message.user("Block."), Message.user("Again.")]


async def test_closing_the_stream_while_a_sub_agent_works_stops_both() -> None:
    started, never = asyncio.Event(), asyncio.Event()
    cancelled: list[str] = []

    @tool
    async def dig() -> str:
        """Dig forever."""
        started.set()
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.append("dig")
            raise
        return "never"

    child = Agent(
        llm=ScriptedLLM([[ToolCall(id="k1", name="dig", arguments={})]]),
        name="digger",
        tools=[dig],
        embedder=None,
    )
    parent_llm = ScriptedLLM(
        [[ToolCall(id="p1", name="digger", arguments={"task": "dig"})], "Done without digging."]
    )
    parent = Agent(llm=parent_llm, name="lead", tools=[child.as_tool()], embedder=None)
    stream = parent.stream("Dig for me.")
    async for event in stream:
        if event.agent == "digger" and event.type is AgentEventType.TOOL_CALL:
            break
    await started.wait()
    await stream.aclose()
    assert cancelled == ["dig"]
    assert leftover_tasks() == set()
    assert actions(parent.memory) == ["user_message"]
    assert actions(child.memory) == ["user_message"]
    assert await parent.run("Never mind.") == "Done without digging."


class StallingLLM:
    """A model that starts its reply, then stalls; it notes when its stream is closed."""

    name = "stalling"

    def __init__(self) -> None:
        self.closed = False

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        options: LLMOptions | None = None,
    ) -> AsyncIterator[LLMChunk]:
        try:
            yield TextDelta(text="Let me think")
            await asyncio.Event().wait()
        finally:
            self.closed = True


async def test_closing_the_stream_mid_reply_closes_the_models_stream() -> None:
    llm = StallingLLM()
    agent = Agent(llm=llm, embedder=None)
    stream = agent.stream("Think.")
    async for event in stream:
        if event.type is AgentEventType.LLM_TEXT_DELTA:
            break
    assert not llm.closed
    await stream.aclose()
    assert llm.closed
    assert leftover_tasks() == set()
    assert actions(agent.memory) == ["user_message"]


class HalfLLM:
    """A model whose stream is a plain iterator (nothing to close) that stops early."""

    name = "half"

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        options: LLMOptions | None = None,
    ) -> AsyncIterator[LLMChunk]:
        return self._Chunks()

    class _Chunks:
        def __aiter__(self) -> HalfLLM._Chunks:
            return self

        async def __anext__(self) -> LLMChunk:
            raise StopAsyncIteration


async def test_a_model_stream_without_aclose_is_left_as_it_is() -> None:
    agent = Agent(llm=HalfLLM(), embedder=None)
    with pytest.raises(ConfigError, match="ended its stream without `Completed`"):
        await agent.run("Hi.")
    assert leftover_tasks() == set()


async def test_a_time_limit_around_a_run_stops_it_and_the_agent_runs_again() -> None:
    started, never = asyncio.Event(), asyncio.Event()

    @tool
    async def stall() -> str:
        """Never return."""
        started.set()
        await never.wait()
        return "never"

    child = Agent(
        llm=ScriptedLLM([[ToolCall(id="k1", name="stall", arguments={})]]),
        name="staller",
        tools=[stall],
        embedder=None,
    )
    llm = ScriptedLLM(
        [[ToolCall(id="p1", name="staller", arguments={"task": "stall"})], "Quick this time."]
    )
    agent = Agent(llm=llm, name="lead", tools=[child.as_tool()], embedder=None)
    limits: list[asyncio.Timeout] = []

    async def limited() -> str:
        async with asyncio.timeout(None) as limit:
            limits.append(limit)
            return await agent.run("Stall.")

    runner = asyncio.create_task(limited())
    await started.wait()
    limits[0].reschedule(asyncio.get_running_loop().time())  # the time is up, now
    with pytest.raises(TimeoutError):
        await runner
    assert leftover_tasks() == set()
    assert actions(agent.memory) == ["user_message"]
    assert actions(child.memory) == ["user_message"]
    assert await agent.run("Again.") == "Quick this time."

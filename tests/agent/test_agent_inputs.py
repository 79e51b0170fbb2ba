"""What an agent run is given is checked before anything is recorded or sent: text that is
not valid Unicode, in the prompt and in the agent's settings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from loomctx import (
    Agent,
    AgentEvent,
    ConfigError,
    LoomMemory,
    MessageFormatError,
)
from loomctx.stores.sqlite import SQLiteStore
from loomctx.testing import ScriptedLLM


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[LoomMemory]:
    """The agent's memory on a real SQLite file."""
    with SQLiteStore(tmp_path / "agent.db") as store:
        yield LoomMemory("agent", store=store)


async def drained(agent: Agent, prompt: str) -> list[AgentEvent]:
    events: list[AgentEvent] = []
    try:
        async for event in agent.stream(prompt):
            events.append(event)
    finally:
        assert events == [], "a refused prompt starts no run: not even `run_started`"
    return events


async def test_a_prompt_that_is_not_valid_unicode_is_refused_before_anything_is_recorded(
    memory: LoomMemory,
) -> None:
    """Before, the run recorded the user's Task, then the window was built without the user
    turn (its source failed, isolated) or failed naming a `system` message."""
    llm = ScriptedLLM([])
    agent = Agent(llm=llm, memory=memory)
    with pytest.raises(MessageFormatError) as err:
        await drained(agent, "hi \udc80")
    message = str(err.value)
    assert "the `prompt` of agent `agent`" in message
    assert "'\\udc80' at position 3" in message
    assert "valid_text" in message
    assert llm.calls == []
    assert memory.get_l1_tasks() == []
    assert memory.search_tasks("hi") == []


async def test_a_prompt_that_is_not_a_string_is_refused(memory: LoomMemory) -> None:
    agent = Agent(llm=ScriptedLLM([]), memory=memory)
    with pytest.raises(ConfigError, match=r"the `prompt` of agent `agent` must be a string, got"):
        await agent.run(["hi"])  # type: ignore[arg-type]
    assert memory.get_l1_tasks() == []


@pytest.mark.parametrize("setting", ["system_instructions", "stage", "task_context"])
def test_settings_that_are_not_valid_unicode_are_refused_at_construction(setting: str) -> None:
    """Before, the agent was made, and its first run recorded the user's Task before the
    window failed, naming a `system` message instead of the setting."""
    with pytest.raises(MessageFormatError) as err:
        Agent(llm=ScriptedLLM([]), name="helper", **{setting: "Be brief.\udc80"})
    message = str(err.value)
    assert f"the `{setting}` of agent `helper`" in message
    assert "position 9" in message


@pytest.mark.parametrize("setting", ["system_instructions", "stage", "task_context"])
def test_settings_that_are_not_strings_are_refused_at_construction(setting: str) -> None:
    with pytest.raises(ConfigError, match=rf"the `{setting}` of agent `agent` must be a string"):
        Agent(llm=ScriptedLLM([]), **{setting: None})

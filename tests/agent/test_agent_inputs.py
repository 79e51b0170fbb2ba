"""What an agent run is given is checked before anything is recorded or sent: a blank prompt
(a window with no user turn would end on the previous reply, which Anthropic reads as a
prefill) and text that is not valid Unicode, in the prompt and in the agent's settings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from loomctx import (
    Agent,
    AgentEvent,
    AgentSources,
    ConfigError,
    ContextOrchestrator,
    LoomMemory,
    Message,
    MessageFormatError,
    ToolCall,
)
from loomctx.agent.executor import TurnSource
from loomctx.context.sources import HistorySource, PromptSource, UserInputSource
from loomctx.stores.sqlite import SQLiteStore
from loomctx.testing import ScriptedLLM


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[LoomMemory]:
    """The agent's memory on a real SQLite file."""
    with SQLiteStore(tmp_path / "agent.db") as store:
        yield LoomMemory("agent", store=store, embedder=None)


async def drained(agent: Agent, prompt: str) -> list[AgentEvent]:
    events: list[AgentEvent] = []
    try:
        async for event in agent.stream(prompt):
            events.append(event)
    finally:
        assert events == [], "a refused prompt starts no run: not even `run_started`"
    return events


@pytest.mark.parametrize("prompt", ["", "   ", "\n\t "])
async def test_a_blank_prompt_is_refused_before_anything_is_recorded(
    memory: LoomMemory, prompt: str
) -> None:
    """Before, the run recorded the blank turn and called the model with a window that ended
    on the previous reply: Anthropic takes that as a prefill and continues the reply."""
    llm = ScriptedLLM(["Port 8443."])
    agent = Agent(llm=llm, memory=memory)
    assert await agent.run("Which port does staging use?") == "Port 8443."
    with pytest.raises(ConfigError) as err:
        await drained(agent, prompt)
    message = str(err.value)
    assert "the `prompt` of agent `agent` is blank" in message
    assert repr(prompt) in message
    assert "pass the user's request" in message
    with pytest.raises(ConfigError, match="is blank"):
        await agent.run(prompt)
    assert len(llm.calls) == 1  # the model was not called again
    assert [t.parameters["content"] for t in memory.get_l1_tasks()] == [
        "Which port does staging use?",
        "Port 8443.",
    ]
    llm.assert_complete()


async def test_every_window_sent_to_the_model_ends_on_the_user_turn_or_tool_results(
    memory: LoomMemory,
) -> None:
    """The run's first window ends on its user turn, the next ones on the tool results."""
    llm = ScriptedLLM(
        [[ToolCall(id="c1", name="lookup", arguments={"host": "staging"})], "Port 8443."]
    )

    def lookup(host: str) -> str:
        """Look a host up."""
        return f"{host}: 8443"

    agent = Agent(llm=llm, tools=[lookup], memory=memory)
    await agent.run("Which port does staging use?")
    first, second = (call.messages for call in llm.calls)
    assert first[-1] == Message.user("Which port does staging use?")
    assert second[-1].role == "tool"
    assert all(call.messages[-1].role != "assistant" for call in llm.calls)


async def test_a_sub_agent_given_a_blank_task_is_an_error_result_not_a_crash() -> None:
    child_llm = ScriptedLLM([])
    child = Agent(llm=child_llm, name="researcher", embedder=None)
    parent_llm = ScriptedLLM(
        [[ToolCall(id="p1", name="researcher", arguments={"task": "  "})], "I will ask again."]
    )
    parent = Agent(llm=parent_llm, name="lead", tools=[child.as_tool()], embedder=None)
    assert await parent.run("Find the port") == "I will ask again."
    answer = parent_llm.calls[1].messages[-1]
    assert answer.is_error
    assert "the `prompt` of agent `researcher` is blank" in answer.content
    assert child_llm.calls == []
    assert child.memory.get_l1_tasks() == []


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


def _with_text(setting: str, text: object, name: str = "agent") -> Agent:
    """An agent whose instructions, stage or task context is `text`."""
    if setting == "system_instructions":
        return Agent(ScriptedLLM([]), text, name=name, embedder=None)  # type: ignore[arg-type]
    field = setting.removeprefix("AgentSources.")
    sources = AgentSources(**{field: text})  # type: ignore[arg-type]
    return Agent(ScriptedLLM([]), name=name, embedder=None, sources=sources)


TEXTS = ["system_instructions", "AgentSources.stage", "AgentSources.task_context"]


@pytest.mark.parametrize("setting", TEXTS)
def test_settings_that_are_not_valid_unicode_are_refused_at_construction(setting: str) -> None:
    """Before, the agent was made, and its first run recorded the user's Task before the
    window failed, naming a `system` message instead of the setting."""
    with pytest.raises(MessageFormatError) as err:
        _with_text(setting, "Be brief.\udc80", name="helper")
    message = str(err.value)
    assert f"the `{setting}` of agent `helper`" in message
    assert "position 9" in message


@pytest.mark.parametrize("setting", TEXTS)
def test_settings_that_are_not_strings_are_refused_at_construction(setting: str) -> None:
    with pytest.raises(ConfigError, match=rf"the `{setting}` of agent `agent` must be a string"):
        _with_text(setting, None)


async def test_a_build_without_a_user_turn_ends_on_the_in_flight_exchange() -> None:
    """`build(query="")` stays valid for a build mid-run: the exchange in flight, the model's
    calls and their results, ends the window (the user's turn is earlier in it)."""
    call = ToolCall(id="c1", name="lookup", arguments={"host": "staging"})
    turn = TurnSource()
    turn.units.append(
        (Message.assistant(tool_calls=[call]), Message.tool("8443", tool_call_id="c1"))
    )
    window = await ContextOrchestrator(
        sources=[PromptSource("Be brief."), HistorySource([Message.user("Which port?")]), turn,
                 UserInputSource()],
    ).build(query="")  # fmt: skip
    assert [m.role for m in window.messages] == ["system", "user", "assistant", "tool"]
    assert window.messages[-1] == Message.tool("8443", tool_call_id="c1")


def test_a_unified_retrieval_source_in_sources_is_refused_with_the_way_to_pass_its_bases() -> None:
    """The README once passed `UnifiedRetrievalSource(knowledge_bases=[...])` in `sources=`;
    the agent adds that source itself, and the error must point at `knowledge_bases=`."""
    from loomctx import Agent, ConfigError, KnowledgeBase, SQLiteStore
    from loomctx.context.sources import HistorySource, UnifiedRetrievalSource
    from loomctx.testing import ScriptedLLM

    handbook = KnowledgeBase("handbook", SQLiteStore(":memory:"))
    with pytest.raises(ConfigError, match=r"knowledge_bases=\[\.\.\.\]"):
        Agent(
            ScriptedLLM([]),
            "Rules.",
            embedder=None,
            sources=AgentSources(extra=[UnifiedRetrievalSource(knowledge_bases=[handbook])]),
        )
    with pytest.raises(ConfigError, match="`L1_recent`"):
        Agent(
            ScriptedLLM([]),
            "Rules.",
            embedder=None,
            sources=AgentSources(extra=[HistorySource([], name="L1_recent")]),
        )
    # Under another name, it searches as well.
    search = UnifiedRetrievalSource(knowledge_bases=[handbook], name="docs_search")
    Agent(ScriptedLLM([]), "Rules.", embedder=None, sources=AgentSources(extra=[search]))

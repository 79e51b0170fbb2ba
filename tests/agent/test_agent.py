"""The agent loop with a scripted model: events, tools, re-retrieval every turn, memory."""

from __future__ import annotations

import itertools
from typing import ClassVar

import pytest

from loomctx import (
    Agent,
    AgentEvent,
    AgentEventType,
    AgentLoop,
    AgentSources,
    ConfigError,
    LoomMemory,
    Message,
    ProviderError,
    Task,
    TaskStatus,
    ToolCall,
    tool,
)
from loomctx.agent.llm import Completed
from loomctx.agent.retriever import BaseContextRetriever, Document, MemoryRetriever
from loomctx.context.render import CONTEXT_PREAMBLE
from loomctx.testing import ScriptedLLM


@tool
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"boom: {reason}")


class TableDocs(BaseContextRetriever):
    """Schema documents for the tables a query mentions (like seed 001's schema retriever)."""

    SCHEMAS: ClassVar[dict[str, str]] = {
        "orders": "Table orders(id, customer_id, total_cents, created_at)",
        "reviews": "Table reviews(id, product_id, stars, body)",
    }

    def __init__(self) -> None:
        super().__init__()
        self.queries: list[str] = []

    async def retrieve_for_query(self, query: str, top_k: int = 5) -> list[Document]:
        self.queries.append(query)
        return [
            Document(id=name, content=schema, score=1.0)
            for name, schema in self.SCHEMAS.items()
            if name in query.lower()
        ][:top_k]


def texts(messages: tuple[Message, ...]) -> str:
    return "\n".join(m.content for m in messages)


async def test_one_turn_streams_events_in_order() -> None:
    llm = ScriptedLLM(["Hello there, friend."])
    agent = Agent(llm=llm, system_instructions="Be brief.", embedder=None)
    events = [e async for e in agent.stream("hi")]
    kinds = [e.type for e in events]
    assert kinds[0] is AgentEventType.RUN_STARTED
    assert kinds[1] is AgentEventType.CONTEXT_ASSEMBLED
    assert AgentEventType.LLM_TEXT_DELTA in kinds
    assert kinds[-3:] == [
        AgentEventType.LLM_COMPLETED,
        AgentEventType.TURN_COMPLETED,
        AgentEventType.RUN_COMPLETED,
    ]
    deltas = "".join(e.text for e in events if e.type is AgentEventType.LLM_TEXT_DELTA)  # type: ignore[attr-defined]
    assert deltas == "Hello there, friend."
    assert events[-1].to_dict()["stopped"] == "done"
    (call,) = llm.calls
    assert call.messages[0].role == "system"
    assert "Be brief." in call.messages[0].content
    assert call.messages[-1] == Message.user("hi")
    llm.assert_complete()


async def test_tool_round_trip_and_the_next_call_sees_the_result() -> None:
    llm = ScriptedLLM([[ToolCall(id="c1", name="add", arguments={"a": 2, "b": 3})], "It is 5."])
    agent = Agent(llm=llm, tools=[add], embedder=None)
    assert await agent.run("What is 2 + 3?") == "It is 5."
    second = llm.calls[1].messages
    user_at = second.index(Message.user("What is 2 + 3?"))
    assert second[user_at + 1].tool_calls[0].name == "add"
    assert second[user_at + 2] == Message.tool("5", tool_call_id="c1", name="add")
    # `read_result`, the reader of results shown only in part, comes with any tools.
    assert [t["function"]["name"] for t in llm.calls[0].tools] == ["add", "read_result"]
    llm.assert_complete()


async def test_a_failing_tool_becomes_an_error_result_not_a_crash() -> None:
    llm = ScriptedLLM([[ToolCall(id="c1", name="explode", arguments={"reason": "x"})], "Sorry."])
    agent = Agent(llm=llm, tools=[explode], embedder=None)
    events = [e async for e in agent.stream("try it")]
    result = next(e for e in events if e.type is AgentEventType.TOOL_RESULT)
    assert result.is_error  # type: ignore[attr-defined]
    assert "boom: x" in result.content  # type: ignore[attr-defined]
    failed = [t for t in agent.memory.get_l1_tasks(limit=50) if t.action == "explode"]
    assert failed[0].error is not None
    assert failed[0].metadata["tool_call_id"] == "c1"


async def test_invalid_tool_arguments_are_answered_with_an_error() -> None:
    bad = Completed(
        message=Message.assistant(tool_calls=[ToolCall(id="c1", name="add", arguments={})]),
        finish_reason="tool_calls",
        invalid_tool_calls=(("c1", "{not json"),),
    )
    llm = ScriptedLLM([bad, "ok"])
    agent = Agent(llm=llm, tools=[add], embedder=None)
    assert await agent.run("add") == "ok"
    answer = llm.calls[1].messages[-1]
    assert answer.is_error
    assert "tool `add` was not run" in answer.content
    assert "not a valid JSON string" in answer.content
    assert "'{not json'" in answer.content


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ('{"a": NaN}', "NaN is not JSON"),
        ('{"a": -Infinity}', "-Infinity is not JSON"),
        ("[1, 2]", "arguments that are a JSON list, not an object: '[1, 2]'"),
        ('{"a":' * 100 + "1" + "}" * 100, "nest deeper than 64 levels (at `a.a.a"),
        ("[" * 100_000 + "]" * 100_000, "nest deeper than 64 levels ('[[[["),
        ('{"a": "\\ud800"}', "argument `a` of tool call `c1` holds the surrogate code point"),
        # An adapter of its own may refuse arguments the parser accepts: no reason to give.
        (
            '{"a": 1}',
            "its arguments '{\"a\": 1}' are not valid JSON arguments (not a JSON object, NaN or "
            "Infinity, nested deeper than 64 levels, or invalid text)",
        ),
    ],
)
async def test_an_invalid_tool_call_is_answered_with_the_reason_it_was_refused(
    raw: str, reason: str
) -> None:
    """Before, every refused call read "its arguments are not a JSON object", which sent the
    model looking for the wrong mistake when it had sent NaN or nested too deep."""
    bad = Completed(
        message=Message.assistant(tool_calls=[ToolCall(id="c1", name="add", arguments={})]),
        finish_reason="tool_calls",
        invalid_tool_calls=(("c1", raw),),
    )
    llm = ScriptedLLM([bad, "ok"])
    assert await Agent(llm=llm, tools=[add], embedder=None).run("add") == "ok"
    answer = llm.calls[1].messages[-1]
    assert answer.is_error
    assert answer.content.startswith("tool `add` was not run: ")
    assert reason in answer.content
    assert answer.content.endswith(
        "Call it again with valid JSON arguments: one JSON object of valid text, without NaN or "
        "Infinity, nested at most 64 levels"
    )
    assert "its arguments are not a JSON object" not in answer.content


async def test_every_call_gets_instructions_and_retrieved_documents_seed_000() -> None:
    llm = ScriptedLLM([[ToolCall(id="c1", name="add", arguments={"a": 1, "b": 1})], "done"])
    agent = Agent(
        llm=llm,
        system_instructions="You are a SQL analyst.",
        tools=[add],
        embedder=None,
        sources=AgentSources(retriever=TableDocs()),
    )
    await agent.run("How many orders were placed?")
    for call in llm.calls:
        assert "You are a SQL analyst." in call.messages[0].content
        assert "Table orders(" in texts(call.messages)


async def test_what_a_tool_reveals_is_retrieved_for_the_next_call_seed_001() -> None:
    @tool
    def list_tables() -> str:
        """List the tables."""
        return "orders, reviews"

    retriever = TableDocs()
    llm = ScriptedLLM([[ToolCall(id="c1", name="list_tables", arguments={})], "done"])
    agent = Agent(
        llm=llm, tools=[list_tables], embedder=None, sources=AgentSources(retriever=retriever)
    )
    await agent.run("Which table has the customer ratings?")
    assert "Table reviews(" not in texts(llm.calls[0].messages)
    assert "Table reviews(" in texts(llm.calls[1].messages)
    assert "orders, reviews" in retriever.queries[1]


async def test_max_turns_stops_the_loop() -> None:
    call = [ToolCall(id=f"c{i}", name="add", arguments={"a": i, "b": 1}) for i in range(3)]
    llm = ScriptedLLM([[call[0]], [call[1]], [call[2]]])
    agent = Agent(llm=llm, tools=[add], embedder=None, loop=AgentLoop(max_turns=3))
    events = [e async for e in agent.stream("loop")]
    assert events[-1].to_dict()["stopped"] == "max_turns"
    assert events[-1].to_dict()["turns"] == 3
    llm.assert_complete()


async def test_memory_carries_earlier_runs_into_the_window() -> None:
    memory = LoomMemory("bot", embedder=None)
    llm = ScriptedLLM(["Noted: your cat is Miso.", "Your cat is Miso."])
    agent = Agent(llm=llm, memory=memory)
    await agent.run("My cat is called Miso.")
    await agent.run("What is my cat called?")
    second = llm.calls[1].messages
    assert Message.user("My cat is called Miso.") in second
    assert Message.assistant("Noted: your cat is Miso.") in second
    assert second[-1] == Message.user("What is my cat called?")
    assert second.count(Message.user("What is my cat called?")) == 1
    assert MemoryRetriever(memory).format_documents([]) == ""


async def test_a_provider_error_is_reported_then_raised() -> None:
    llm = ScriptedLLM([ProviderError("openai:gpt-4o: 500 server error")])
    agent = Agent(llm=llm, embedder=None)
    events: list[AgentEvent] = []

    async def drain() -> None:
        async for event in agent.stream("hi"):
            events.append(event)

    with pytest.raises(ProviderError):
        await drain()
    assert [e.type for e in events[-2:]] == [AgentEventType.ERROR, AgentEventType.RUN_COMPLETED]
    assert events[-1].to_dict()["stopped"] == "error"


def test_run_sync_and_validation() -> None:
    assert Agent(llm=ScriptedLLM(["hi"]), embedder=None).run_sync("hello") == "hi"
    with pytest.raises(ConfigError, match=r"`AgentLoop\.max_turns`"):
        Agent(llm=ScriptedLLM([]), embedder=None, loop=AgentLoop(max_turns=0))
    with pytest.raises(ConfigError, match="share a name"):
        Agent(llm=ScriptedLLM([]), tools=[add, add], embedder=None)
    with pytest.raises(TypeError):
        Agent(llm=ScriptedLLM([]), temprature=0.2, embedder=None)  # type: ignore[call-arg]


async def test_run_sync_refuses_a_running_loop() -> None:
    with pytest.raises(ConfigError, match=r"await agent\.run"):
        Agent(llm=ScriptedLLM(["x"]), embedder=None).run_sync("hello")


async def test_plain_functions_become_tools() -> None:
    def shout(text: str) -> str:
        """Upper-case a text."""
        return text.upper()

    llm = ScriptedLLM([[ToolCall(id="c1", name="shout", arguments={"text": "hi"})], "HI"])
    assert await Agent(llm=llm, tools=[shout], embedder=None).run("shout hi") == "HI"
    assert llm.calls[1].messages[-1].content == "HI"


async def test_each_call_repeats_the_previous_prompt_up_to_its_dynamic_tail() -> None:
    """Across runs and within one: one system message, the request never in it, and each call's
    prompt begins with the previous one's, but for the dynamic tail (issue 20)."""
    memory = LoomMemory("cache-agent", embedder=None)
    for i in range(6):
        memory.add_task(
            Task(action="user_message", parameters={"content": f"The parcel {i} left Porto."},
                 status=TaskStatus.COMPLETED)
        )  # fmt: skip
    call = ToolCall(id="c1", name="lookup", arguments={"q": "parcel"})
    llm = ScriptedLLM(["Noted.", [call], "It is in Lisbon.", "Fine."])

    def lookup(q: str) -> str:
        """Look a parcel up."""
        return f"{q}: in Lisbon"

    agent = Agent(llm, "You track parcels.", tools=[lookup], memory=memory)
    for prompt in ("Where is parcel 3?", "And parcel 4?", "Thanks."):
        await agent.run(prompt)
    llm.assert_complete()
    calls = llm.calls
    for earlier, later in itertools.pairwise(calls):
        assert [m.role for m in later.messages].count("system") == 1
        assert "Where is parcel" not in later.messages[0].content
        tail = next(
            (i for i, m in enumerate(earlier.messages) if m.content.startswith(CONTEXT_PREAMBLE)),
            len(earlier.messages),
        )
        assert later.messages[:tail] == earlier.messages[:tail]
        assert later.tools == earlier.tools
    # Every call names the session as its cache key and marks where the stable part ends.
    for c in calls:
        assert c.options is not None
        assert c.options.cache_key == "/".join(memory.namespace)
        assert c.options.cache_breakpoints

"""Sub-agents: a child agent as a tool, inherited read-only context, task lineage, nested
events, depth limits, and a memory pool shared between agents."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

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
    TiktokenCounter,
    ToolCall,
    ToolContext,
    tool,
)
from loomctx.agent.events import ErrorEvent, RunCompleted, RunStarted
from loomctx.context import BuildContext, TokenBudget
from loomctx.context.sources.memory import SharedPoolSource
from loomctx.memory.context_builder import ExecutionContext
from loomctx.messages import split_units
from loomctx.stores.sqlite import SQLiteStore
from loomctx.testing import FunctionLLM, ScriptedLLM

MemoryFactory = Callable[[str], LoomMemory]


@pytest.fixture
def memory(tmp_path: Any) -> Iterator[MemoryFactory]:
    """Memories on real SQLite files, closed after the test."""
    stores: list[SQLiteStore] = []

    def make(name: str) -> LoomMemory:
        store = SQLiteStore(tmp_path / f"{name}.db")
        stores.append(store)
        return LoomMemory(name, store=store, embedder=None)

    yield make
    for store in stores:
        store.close()


def texts(messages: Sequence[Message]) -> str:
    return "\n".join(m.content for m in messages)


def delegate(call_id: str, agent: str, task: str, **extra: str) -> ToolCall:
    return ToolCall(id=call_id, name=agent, arguments={"task": task, **extra})


def own(events: list[AgentEvent], agent: str) -> list[AgentEvent]:
    return [e for e in events if e.agent == agent]


async def test_a_child_agent_runs_as_a_tool_of_its_parent(memory: MemoryFactory) -> None:
    parent_memory, child_memory = memory("lead"), memory("researcher")
    seen: list[tuple[ExecutionContext, list[str]]] = []

    @tool
    def look_up(ctx: ToolContext) -> str:
        """Look the figure up."""
        assert ctx.execution is not None
        seen.append((ctx.execution, [t.task_id for t in parent_memory.get_l1_tasks(100)]))
        return "3.7 million (census 2023)"

    child_llm = ScriptedLLM([[ToolCall(id="k1", name="look_up", arguments={})], "3.7 million."])
    child = Agent(
        llm=child_llm, name="researcher", tools=[look_up], memory=child_memory,
        system_instructions="You research facts.",
    )  # fmt: skip
    parent_llm = ScriptedLLM(
        [
            "Noted.",
            [delegate("p1", "researcher", "Find Berlin's population", context="Use 2023")],
            "Berlin has 3.7 million people.",
        ]
    )
    parent = Agent(
        llm=parent_llm, name="lead", memory=parent_memory,
        tools=[child.as_tool(description="Researches facts.")],
    )  # fmt: skip
    await parent.run("Our reports always quote the census office.")
    events = [e async for e in parent.stream("How many people live in Berlin?")]

    # The child's events come between the parent's call and its result, in order, nested.
    lead_run = events[0].run_id
    kinds = [(e.agent, e.type) for e in events]
    call_at = kinds.index(("lead", AgentEventType.TOOL_CALL))
    result_at = kinds.index(("lead", AgentEventType.TOOL_RESULT))
    nested = events[call_at + 1 : result_at]
    assert nested == own(events, "researcher")
    assert [e.type for e in nested][:2] == [
        AgentEventType.RUN_STARTED,
        AgentEventType.CONTEXT_ASSEMBLED,
    ]
    assert nested[-1].type is AgentEventType.RUN_COMPLETED
    assert {e.parent_run_id for e in nested} == {lead_run}
    assert {e.parent_run_id for e in own(events, "lead")} == {None}
    assert events[result_at].content == "3.7 million."  # type: ignore[attr-defined]
    assert not events[result_at].is_error  # type: ignore[attr-defined]
    assert events[-1].to_dict()["output"] == "Berlin has 3.7 million people."

    # Every Task the child records points at the parent's Task for the delegating call.
    (delegation,) = [t for t in parent_memory.get_l1_tasks(100) if t.action == "researcher"]
    assert delegation.metadata["tool_call_id"] == "p1"
    assert delegation.status is TaskStatus.COMPLETED
    child_tasks = child_memory.get_l1_tasks(100)
    assert [t.action for t in child_tasks] == ["user_message", "look_up", "assistant_message"]
    assert {t.parent_task_id for t in child_tasks} == {delegation.task_id}
    assert child_tasks[0].source_agent == "lead"

    # The child's tools get its ExecutionContext, whose parent_context is filled.
    (execution, parent_ids_meanwhile), = seen  # fmt: skip
    assert execution.parent_context == {
        "agent": "lead",
        "run_id": lead_run,
        "task_id": delegation.task_id,
        "request": "How many people live in Berlin?",
        "task": "Find Berlin's population\n\nContext:\nUse 2023",
        "depth": 1,
    }
    assert execution.depth == 1
    assert execution.memory is child_memory
    assert execution.current_task is not None
    assert execution.current_task.task_id == child_tasks[1].task_id

    # The child wrote nothing into the parent's memory: after the delegation only the
    # parent's own call and reply were added to what was there while the child ran.
    after = [t.task_id for t in parent_memory.get_l1_tasks(100)]
    assert after[: len(parent_ids_meanwhile)] == parent_ids_meanwhile
    assert [t.action for t in parent_memory.get_l1_tasks(100)[len(parent_ids_meanwhile) :]] == [
        "researcher",
        "assistant_message",
    ]
    assert {t.metadata["agent"] for t in parent_memory.get_l1_tasks(100)} == {"lead"}

    # Its window started clean: the parent's context came in read-only, not as history.
    window = child_llm.calls[0].messages
    assert window[-1] == Message.user("Find Berlin's population\n\nContext:\nUse 2023")
    assert "Our reports always quote the census office." in texts(window)
    assert Message.user("Our reports always quote the census office.") not in window
    assert "delegated the task in the user turn to you" in window[0].content
    # The parent's request is the user's text: fenced reference data, not system text.
    assert "How many people live in Berlin?" not in window[0].content
    assert '<context source="delegation">\nHow many people live in Berlin?' in texts(window)
    split_units([m for m in window if m.role != "system"])
    child_llm.assert_complete()
    parent_llm.assert_complete()


async def test_a_failing_child_is_an_error_result_and_the_parent_goes_on(
    memory: MemoryFactory,
) -> None:
    child_memory = memory("researcher")
    child = Agent(
        llm=ScriptedLLM([ProviderError("openai:gpt-4o: 500 server error")]),
        name="researcher",
        memory=child_memory,
    )
    parent_llm = ScriptedLLM([[delegate("p1", "researcher", "Look it up")], "I could not."])
    parent = Agent(llm=parent_llm, name="lead", tools=[child.as_tool()], memory=memory("lead"))
    events = [e async for e in parent.stream("Find it")]
    result = next(e for e in own(events, "lead") if e.type is AgentEventType.TOOL_RESULT)
    assert result.is_error  # type: ignore[attr-defined]
    assert "ProviderError: openai:gpt-4o: 500 server error" in result.content  # type: ignore[attr-defined]
    child_events = own(events, "researcher")
    assert [e.type for e in child_events[-2:]] == [
        AgentEventType.ERROR,
        AgentEventType.RUN_COMPLETED,
    ]
    assert child_events[-1].to_dict()["stopped"] == "error"
    assert events[-1].to_dict()["stopped"] == "done"
    assert parent_llm.calls[1].messages[-1].is_error
    assert [t.action for t in child_memory.get_l1_tasks(10)] == ["user_message"]
    failed = [t for t in parent.memory.get_l1_tasks(10) if t.action == "researcher"]
    assert failed[0].status is TaskStatus.FAILED


async def test_a_child_without_an_answer_is_an_error_result() -> None:
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    child = Agent(
        llm=ScriptedLLM([[ToolCall(id="k1", name="ping", arguments={})]]),
        name="pinger",
        tools=[ping],
        embedder=None,
        loop=AgentLoop(max_turns=1),
    )
    parent_llm = ScriptedLLM([[delegate("p1", "ask_pinger", "Ping")], "Gave up."])
    parent = Agent(llm=parent_llm, tools=[child.as_tool("ask_pinger")], embedder=None)
    assert await parent.run("ping it") == "Gave up."
    answer = parent_llm.calls[1].messages[-1]
    assert answer.is_error
    assert "ended without an answer after 1 turn(s) (stopped: max_turns)" in answer.content
    schema = parent_llm.calls[0].tools[0]["function"]
    assert schema["name"] == "ask_pinger"
    assert schema["parameters"]["required"] == ["task"]
    assert set(schema["parameters"]["properties"]) == {"task", "context"}


async def test_a_grandchild_nests_under_its_parent_to_any_depth(memory: MemoryFactory) -> None:
    mems = {name: memory(name) for name in ("lead", "researcher", "fetcher")}
    seen: list[ExecutionContext] = []

    @tool
    def fetch(url: str, ctx: ToolContext) -> str:
        """Fetch a page."""
        assert ctx.execution is not None
        seen.append(ctx.execution)
        return f"<page {url}>"

    fetcher = Agent(
        llm=ScriptedLLM([[ToolCall(id="f1", name="fetch", arguments={"url": "a"})], "page a"]),
        name="fetcher", tools=[fetch], memory=mems["fetcher"],
    )  # fmt: skip
    researcher = Agent(
        llm=ScriptedLLM([[delegate("r1", "fetcher", "Fetch a")], "a says hi"]),
        name="researcher", tools=[fetcher.as_tool()], memory=mems["researcher"],
    )  # fmt: skip
    lead = Agent(
        llm=ScriptedLLM([[delegate("l1", "researcher", "What does a say?")], "It says hi."]),
        name="lead", tools=[researcher.as_tool()], memory=mems["lead"],
    )  # fmt: skip
    events = [e async for e in lead.stream("Read a")]
    runs = {e.agent: e.run_id for e in events if isinstance(e, RunStarted)}
    parents = {e.agent: e.parent_run_id for e in events if isinstance(e, RunStarted)}
    assert parents == {"lead": None, "researcher": runs["lead"], "fetcher": runs["researcher"]}
    agents = [e.agent for e in events]
    first, last = agents.index("fetcher"), len(agents) - agents[::-1].index("fetcher")
    assert set(agents[first:last]) == {"fetcher"}  # the grandchild's events stay together
    completed = [e for e in events if isinstance(e, RunCompleted)]
    assert [(e.agent, e.output) for e in completed] == [
        ("fetcher", "page a"),
        ("researcher", "a says hi"),
        ("lead", "It says hi."),
    ]

    def delegation(name: str, action: str) -> Task:
        return next(t for t in mems[name].get_l1_tasks(100) if t.action == action)

    to_researcher, to_fetcher = (
        delegation("lead", "researcher"),
        delegation("researcher", "fetcher"),
    )
    assert to_fetcher.parent_task_id == to_researcher.task_id
    assert {t.parent_task_id for t in mems["fetcher"].get_l1_tasks(100)} == {to_fetcher.task_id}
    (execution,) = seen
    assert execution.depth == 2
    assert execution.parent_context is not None
    assert execution.parent_context["agent"] == "researcher"
    assert execution.parent_context["task_id"] == to_fetcher.task_id
    assert execution.parent_context["request"] == "What does a say?"
    # `run` answers with the top run's reply, though the stream holds nested completions.
    lead.llm = ScriptedLLM(["Still hi."])
    assert await lead.run("And now?") == "Still hi."


def relay(name: str, other: str) -> FunctionLLM:
    """A model that delegates every request to `other`, and reports what came back."""

    def reply(messages: Sequence[Message], tools: Any, options: Any) -> Any:
        last = messages[-1]
        if last.role == "tool":
            return f"{name} heard: {last.content[:60]}"
        return [delegate(f"{name}-call", other, "pass it on")]

    return FunctionLLM(reply, name=name)


async def test_a_depth_limit_stops_agents_delegating_in_a_loop() -> None:
    ping = Agent(llm=relay("ping", "pong"), name="ping", embedder=None, loop=AgentLoop(max_depth=2))
    pong = Agent(llm=relay("pong", "ping"), name="pong", embedder=None, loop=AgentLoop(max_depth=2))
    ping.tools.append(pong.as_tool())
    pong.tools.append(ping.as_tool())
    events = [e async for e in ping.stream("start")]
    starts = [(e.agent, e.parent_run_id is None) for e in events if isinstance(e, RunStarted)]
    assert starts == [("ping", True), ("pong", False), ("ping", False)]
    refused = [
        e
        for e in events
        if e.type is AgentEventType.TOOL_RESULT and e.is_error  # type: ignore[attr-defined]
    ]
    assert len(refused) == 1
    assert "agent `pong` was asked to run 3 delegations deep, beyond its `max_depth` of 2" in (
        refused[0].content  # type: ignore[attr-defined]
    )
    assert events[-1].to_dict()["output"].startswith("ping heard: pong heard: ping heard:")


async def test_a_child_sharing_its_parents_memory_is_refused() -> None:
    llm = ScriptedLLM([[delegate("p1", "echo", "again")], "Fine, alone."])
    agent = Agent(llm=llm, name="echo", embedder=None)
    agent.tools.append(agent.as_tool())
    assert await agent.run("go") == "Fine, alone."
    assert "with the same memory" in llm.calls[1].messages[-1].content
    assert llm.calls[1].messages[-1].is_error


async def test_a_tool_can_run_a_sub_agent_itself_with_its_context() -> None:
    child = Agent(llm=ScriptedLLM(["child says hi"]), name="child", embedder=None)

    @tool
    async def ask_child(question: str, ctx: ToolContext) -> str:
        """Ask the child."""
        return (await child.run(question, parent=ctx)).upper()

    parent = Agent(
        llm=ScriptedLLM([[ToolCall(id="p1", name="ask_child", arguments={"question": "hi?"})],
                         "done"]),
        tools=[ask_child], embedder=None,
    )  # fmt: skip
    events = [e async for e in parent.stream("ask")]
    assert [e.agent for e in events if isinstance(e, RunStarted)] == ["agent", "child"]
    assert next(e for e in events if e.type is AgentEventType.TOOL_RESULT).content == (  # type: ignore[attr-defined]
        "CHILD SAYS HI"
    )
    with pytest.raises(ConfigError, match="must be the `ToolContext` of a call made by an"):
        await child.run("x", parent=ToolContext(call_id="c", tool_name="t"))
    outside = await ask_child.invoke({"question": "x"})  # no agent run: no parent context
    assert outside.is_error
    assert "must be the `ToolContext` of a call made by an `Agent` run" in outside.content


async def test_parallel_delegations_to_one_child_keep_their_own_lineage() -> None:
    def answer(messages: Sequence[Message], tools: Any, options: Any) -> str:
        return f"answer to {messages[-1].content}"

    child = Agent(llm=FunctionLLM(answer), name="helper", embedder=None)
    parent = Agent(
        llm=ScriptedLLM([[delegate("a", "helper", "one"), delegate("b", "helper", "two")], "ok"]),
        tools=[child.as_tool()],
        embedder=None,
    )
    events = [e async for e in parent.stream("both")]
    by_run: dict[str, list[AgentEvent]] = {}
    for e in own(events, "helper"):
        by_run.setdefault(e.run_id, []).append(e)
    for run_events in by_run.values():
        assert run_events[0].type is AgentEventType.RUN_STARTED
        assert run_events[-1].type is AgentEventType.RUN_COMPLETED
    results = [e for e in own(events, "agent") if e.type is AgentEventType.TOOL_RESULT]
    assert [r.content for r in results] == ["answer to one", "answer to two"]  # type: ignore[attr-defined]
    calls = {t.metadata["tool_call_id"]: t.task_id for t in parent.memory.get_l1_tasks(20)
             if t.action == "helper"}  # fmt: skip
    asked = {t.parameters["content"]: t.parent_task_id for t in child.memory.get_l1_tasks(20)
             if t.action == "user_message"}  # fmt: skip
    assert asked == {"one": calls["a"], "two": calls["b"]}


async def test_a_sync_tool_can_emit_events_from_its_thread() -> None:
    @tool
    def slow(ctx: ToolContext) -> str:
        """Work slowly, saying so."""
        assert ctx.emit is not None
        assert threading.current_thread() is not threading.main_thread()
        ctx.emit(
            ErrorEvent(
                run_id=ctx.metadata["run_id"], agent="slow", turn=1, message="retrying once",
                error_type="Warning", recoverable=True,
            )
        )  # fmt: skip
        return "done"

    agent = Agent(
        llm=ScriptedLLM([[ToolCall(id="c1", name="slow", arguments={})], "ok"]),
        tools=[slow],
        embedder=None,
    )
    kinds = [(e.agent, e.type) async for e in agent.stream("go")]
    at = kinds.index(("slow", AgentEventType.ERROR))
    assert kinds[at - 1] == ("agent", AgentEventType.TOOL_CALL)
    assert kinds[at + 1] == ("agent", AgentEventType.TOOL_RESULT)


async def test_agents_sharing_a_pool_read_each_others_work(memory: MemoryFactory) -> None:
    pool = memory("pool")
    analyst = Agent(
        llm=ScriptedLLM(["The north region grew fastest, 12 percent."]),
        name="analyst",
        memory=memory("analyst"),
        sources=AgentSources(shared_pool=pool),
    )
    writer_llm = ScriptedLLM(["North, by 12 percent."])
    writer = Agent(
        llm=writer_llm,
        name="writer",
        memory=memory("writer"),
        sources=AgentSources(shared_pool=pool),
    )
    await analyst.run("Which region grew fastest?")
    await writer.run("Write the headline: which region grew fastest?")
    window = writer_llm.calls[0].messages
    assert "The north region grew fastest, 12 percent." in texts(window)
    # The writer's own request reaches it once, as its turn: not in the system prompt (which
    # stays the same across runs), not again from the pool.
    assert texts(window).count("Write the headline") == 1
    assert window[-1] == Message.user("Write the headline: which region grew fastest?")
    assert {t.metadata["agent"] for t in pool.get_l1_tasks(20)} == {"analyst", "writer"}
    assert len(pool.get_l1_tasks(20)) == 4
    assert [t.metadata["agent"] for t in writer.memory.get_l1_tasks(20)] == ["writer", "writer"]


async def test_the_pool_source_leaves_out_the_agent_being_built_for() -> None:
    pool = LoomMemory("pool", embedder=None)
    for agent in ("a", "b") * 4:
        pool.add_task(
            Task(action="note", parameters={"text": f"region note by {agent}"},
                 status=TaskStatus.COMPLETED, metadata={"agent": agent})
        )  # fmt: skip
    ctx = BuildContext(agent_id="a", counter=TiktokenCounter())
    budget = TokenBudget(tokens=1000, ceiling=100_000)
    blocks = await SharedPoolSource(pool, relevant=3, recent=2).collect(
        "region note", budget, ctx=ctx
    )
    assert blocks
    assert all("by b" in b.content for b in blocks)
    assert len({b.metadata["task_id"] for b in blocks}) == len(blocks)
    other = BuildContext(agent_id="c", counter=TiktokenCounter())
    everyone = await SharedPoolSource(pool).collect("region note", budget, ctx=other)
    assert any("by a" in b.content for b in everyone)
    assert any("by b" in b.content for b in everyone)


def test_sub_agent_settings_are_checked() -> None:
    llm = ScriptedLLM([])
    with pytest.raises(ConfigError, match=r"`AgentLoop\.max_depth` must be an int >= 1"):
        Agent(llm=llm, embedder=None, loop=AgentLoop(max_depth=0))
    with pytest.raises(ConfigError, match=r"`AgentSources\.shared_pool` must be a LoomMemory"):
        Agent(llm=llm, embedder=None, sources=AgentSources(shared_pool="pool"))  # type: ignore[arg-type]
    mine = LoomMemory("mine", embedder=None)
    with pytest.raises(
        ConfigError, match=r"`AgentSources\.shared_pool` is the agent's own `memory`"
    ):
        Agent(llm=llm, memory=mine, sources=AgentSources(shared_pool=mine))

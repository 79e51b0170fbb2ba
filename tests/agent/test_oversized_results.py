"""One oversized tool result: the run goes on with an excerpt in the window, the model reads
the rest through `read_result`, older turns stay in later windows, and the report says so."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from loomctx import (
    Agent,
    AgentEventType,
    AgentWindow,
    ConfigError,
    LoomMemory,
    Message,
    TiktokenCounter,
    ToolCall,
    tool,
)
from loomctx.agent.events import ContextAssembled, ToolResultEvent
from loomctx.memory import tasks_from_messages
from loomctx.stores.sqlite import SQLiteStore
from loomctx.testing import ScriptedLLM

COUNTER = TiktokenCounter()
BIG = "\n".join(
    f"{i:05d} GET /api/orders/{i * 7} 200 {i % 89} ms user={i % 13} region=eu-{i % 3}"
    for i in range(1500)
)
MARKER = re.compile(r'read_result\(handle="(r-[0-9a-f]+)", offset=(\d+)\)\]')


@tool
def fetch_logs(service: str) -> str:
    """The access log of a service.

    Args:
        service: The service's name.
    """
    return BIG


@tool
def count_rows(table: str) -> int:
    """Rows in a table.

    Args:
        table: The table's name.
    """
    return 42


@tool
def crash(reason: str) -> str:
    """Fails with a long traceback.

    Args:
        reason: Why.
    """
    raise RuntimeError(BIG)


def call(name: str, call_id: str = "c1", **arguments: object) -> list[ToolCall]:
    return [ToolCall(id=call_id, name=name, arguments=arguments)]


def last_tool(messages: Sequence[Message]) -> Message:
    return [m for m in messages if m.role == "tool"][-1]


async def test_an_80_kb_result_in_a_16k_window_is_an_excerpt_the_model_reads_on() -> None:
    seen: dict[str, object] = {}

    def read_on(messages: Sequence[Message]) -> list[ToolCall]:
        excerpt = last_tool(messages).content
        found = MARKER.search(excerpt)
        assert found is not None, excerpt[-400:]
        seen["handle"], seen["offset"] = found.group(1), int(found.group(2))
        seen["excerpt"] = excerpt
        return call(
            "read_result", "c2", handle=found.group(1), offset=int(found.group(2)), limit=300
        )

    def answer(messages: Sequence[Message]) -> str:
        seen["read"] = last_tool(messages).content
        return "The log shows 1,500 requests."

    assert len(BIG) > 80_000
    assert COUNTER.count(BIG) > 16_000  # more than the whole 16k window
    llm = ScriptedLLM([call("fetch_logs", service="orders"), read_on, answer])
    agent = Agent(
        llm=llm, tools=[fetch_logs], embedder=None, window=AgentWindow(model_context_window=16_000)
    )
    assert await agent.run("What does the orders log show?") == "The log shows 1,500 requests."
    llm.assert_complete()

    excerpt, offset = str(seen["excerpt"]), int(seen["offset"])  # type: ignore[call-overload]
    assert excerpt.startswith(BIG[:offset])
    assert COUNTER.count(excerpt) <= 12_800 // 4  # a quarter of the input budget
    (recorded,) = [t for t in agent.memory.get_l1_tasks(limit=50) if t.action == "fetch_logs"]
    assert seen["handle"] == f"r-{recorded.task_id}"
    assert recorded.result == BIG  # stored whole
    read = str(seen["read"])
    assert read.startswith(
        f"[{seen['handle']}: characters {offset:,} to {offset + 300:,} of {len(BIG):,}]\n"
    )
    assert BIG[offset : offset + 300] in read
    assert f'read_result(handle="{seen["handle"]}", offset={offset + 300})' in read
    for c in llm.calls:
        assert COUNTER.count_messages(c.messages, tools=c.tools) <= 12_800


async def test_the_report_says_a_result_was_excerpted() -> None:
    llm = ScriptedLLM([call("fetch_logs", service="orders"), "done"])
    agent = Agent(llm=llm, tools=[fetch_logs], embedder=None)
    events = [e async for e in agent.stream("Summarize the orders log.")]
    built = [e for e in events if isinstance(e, ContextAssembled)]
    (block,) = [b for b in built[1].report["blocks"] if b["source"] == "turn"]
    assert block["status"] == "truncated"
    assert re.search(
        r"`r-[0-9a-f]+` shown as an excerpt of [\d,]+ of its [\d,]+ tokens", block["reason"]
    )
    assert f"of its {COUNTER.count(BIG):,} tokens" in block["reason"]
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert result.content == BIG  # events carry the whole result


async def test_the_excerpt_is_byte_identical_from_one_call_to_the_next() -> None:
    llm = ScriptedLLM(
        [call("fetch_logs", service="orders"), call("count_rows", "c2", table="orders"), "done"]
    )
    agent = Agent(llm=llm, tools=[fetch_logs, count_rows], embedder=None)
    await agent.run("How many orders, and what does the log show?")
    second, third = llm.calls[1].messages, llm.calls[2].messages
    excerpt = last_tool(second)
    assert "tokens left out" in excerpt.content
    assert excerpt in third
    # Everything up to the excerpt repeats byte for byte: a provider's cache reads it.
    end = second.index(excerpt) + 1
    assert third[:end] == second[:end]
    assert llm.calls[1].tools == llm.calls[2].tools


async def test_a_stored_80_kb_result_does_not_push_older_turns_out_of_later_windows() -> None:
    llm = ScriptedLLM(
        ["Warehouse 4.", call("fetch_logs", service="orders"), "done", "1,500 requests."]
    )
    agent = Agent(llm=llm, tools=[fetch_logs], embedder=None)
    await agent.run("Which warehouse was late most often?")
    await agent.run("Fetch the orders log.")
    await agent.run("How many requests were there?")
    later = llm.calls[-1].messages
    texts = [m.content for m in later]
    assert "Which warehouse was late most often?" in texts
    assert "Warehouse 4." in texts
    assert "Fetch the orders log." in texts
    (stored,) = [m for m in later if m.role == "tool"]
    assert MARKER.search(stored.content)
    assert COUNTER.count_messages(later, tools=llm.calls[-1].tools) <= 12_800
    # Stored before this agent existed (another worker, a restart): the same.
    fresh = ScriptedLLM(["ok"])
    again = Agent(llm=fresh, tools=[fetch_logs], memory=agent.memory)
    await again.run("And now?")
    assert "Which warehouse was late most often?" in [m.content for m in fresh.calls[0].messages]
    assert last_tool(fresh.calls[0].messages).content == stored.content


async def test_a_result_stored_whole_elsewhere_is_an_excerpt_in_history_and_the_report() -> None:
    # Recorded by a run with a larger window, or imported: L1 holds it whole.
    memory = LoomMemory("agent", embedder=None)
    history = [
        Message.user("Which warehouse was late most often?"),
        Message.assistant("Warehouse 4."),
        Message.user("Fetch the orders log."),
        Message.assistant(tool_calls=call("fetch_logs", service="orders")),
        Message.tool(BIG, tool_call_id="c1", name="fetch_logs"),
        Message.assistant("Fetched 1,500 lines."),
    ]
    memory.add_tasks(tasks_from_messages(history))
    llm = ScriptedLLM(["1,500 requests."])
    agent = Agent(llm=llm, tools=[fetch_logs], memory=memory)
    events = [e async for e in agent.stream("How many requests were there?")]
    window = llm.calls[0].messages
    assert [m.content for m in window[:3]] == [
        "Which warehouse was late most often?",
        "Warehouse 4.",
        "Fetch the orders log.",
    ]
    handle = MARKER.search(last_tool(window).content).group(1)  # type: ignore[union-attr]
    (built,) = [e for e in events if isinstance(e, ContextAssembled)]
    (block,) = [b for b in built.report["blocks"] if b["status"] == "truncated"]
    assert block["source"] == "L1_recent"
    assert f"`{handle}` shown as an excerpt" in block["reason"]


async def test_read_result_searches_and_answers_unknown_handles_with_an_error() -> None:
    def search(messages: Sequence[Message]) -> list[ToolCall]:
        handle = MARKER.search(last_tool(messages).content).group(1)  # type: ignore[union-attr]
        return [
            ToolCall(
                id="s1",
                name="read_result",
                arguments={"handle": handle, "search": "/API/ORDERS/6860 "},
            ),
            ToolCall(id="s2", name="read_result", arguments={"handle": "r-0000", "offset": 0}),
            ToolCall(id="s3", name="read_result", arguments={"handle": handle, "offset": 10**7}),
            ToolCall(
                id="s4", name="read_result", arguments={"handle": handle, "search": "no such line"}
            ),
        ]

    llm = ScriptedLLM([call("fetch_logs", service="orders"), search, "done"])
    agent = Agent(llm=llm, tools=[fetch_logs], embedder=None)
    events = [e async for e in agent.stream("Find order 6860.")]
    results = {e.call_id: e for e in events if isinstance(e, ToolResultEvent)}
    line = next(x for x in BIG.split("\n") if "/api/orders/6860 " in x)
    assert not results["s1"].is_error
    assert f"{BIG.index(line)}: {line}" in results["s1"].content
    assert "1 of its 1,500 lines contain" in results["s1"].content
    assert results["s2"].is_error
    assert "no stored result has the handle 'r-0000'" in results["s2"].content
    assert results["s3"].is_error
    assert f"which has {len(BIG):,} characters" in results["s3"].content
    assert "none of its 1,500 lines contains 'no such line'" in results["s4"].content
    assert [e.type for e in events][-1] is AgentEventType.RUN_COMPLETED


async def test_a_handle_of_another_session_is_not_readable(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "memory.db")
    alice = LoomMemory("alice", store=store, embedder=None)
    bob = LoomMemory("bob", store=store, embedder=None)
    owner = Agent(
        llm=ScriptedLLM([call("fetch_logs", service="orders"), "done"]),
        tools=[fetch_logs],
        memory=alice,
    )
    await owner.run("Fetch the log.")
    (task,) = [t for t in alice.get_l1_tasks(limit=50) if t.action == "fetch_logs"]
    stolen = ScriptedLLM([call("read_result", handle=f"r-{task.task_id}"), "nothing"])
    other = Agent(llm=stolen, tools=[count_rows], memory=bob)
    events = [e async for e in other.stream("Read alice's log.")]
    (result,) = [e for e in events if isinstance(e, ToolResultEvent)]
    assert result.is_error
    assert "no stored result has the handle" in result.content
    assert BIG[:50] not in str([m.content for m in stolen.calls[1].messages])
    # The owner reads it, from the same store.
    mine = ScriptedLLM([call("read_result", handle=f"r-{task.task_id}", limit=100), "ok"])
    owner.llm = mine
    await owner.run("Read my log.")
    assert BIG[:100] in last_tool(mine.calls[1].messages).content
    store.close()


async def test_a_turn_s_results_share_the_limit_the_short_ones_whole() -> None:
    both = [
        ToolCall(id="c1", name="count_rows", arguments={"table": "orders"}),
        ToolCall(id="c2", name="fetch_logs", arguments={"service": "orders"}),
    ]
    llm = ScriptedLLM([both, "done"])
    agent = Agent(
        llm=llm,
        tools=[fetch_logs, count_rows],
        embedder=None,
        window=AgentWindow(max_result_tokens=800),
    )
    await agent.run("Rows and log?")
    small, big = [m for m in llm.calls[1].messages if m.role == "tool"]
    assert small.content == "42"
    assert "tokens left out" in big.content
    assert COUNTER.count(big.content) <= 800


async def test_a_huge_error_is_cut_and_read_at_the_offsets_its_marker_gives() -> None:
    def read_on(messages: Sequence[Message]) -> list[ToolCall]:
        error = last_tool(messages)
        assert error.is_error
        handle, offset = MARKER.search(error.content).groups()  # type: ignore[union-attr]
        return call("read_result", "c2", handle=handle, offset=int(offset), limit=40)

    llm = ScriptedLLM([call("crash", reason="x"), read_on, "done"])
    agent = Agent(llm=llm, tools=[crash], embedder=None)
    await agent.run("Try it.")
    error = last_tool(llm.calls[1].messages).content
    offset = int(MARKER.search(error).group(2))  # type: ignore[union-attr]
    full = f"tool `crash` failed: RuntimeError: {BIG}"
    assert error.startswith(full[:offset])
    assert full[offset : offset + 40] in last_tool(llm.calls[2].messages).content


async def test_the_reader_comes_with_tools_only_and_its_name_is_reserved() -> None:
    llm = ScriptedLLM(["hi"])
    await Agent(llm=llm, embedder=None).run("hello")
    assert llm.calls[0].tools == ()

    @tool
    def read_result(handle: str) -> str:
        """Mine."""
        return handle

    with pytest.raises(ConfigError, match="`read_result`"):
        Agent(llm=llm, tools=[read_result], embedder=None)
    late = Agent(llm=ScriptedLLM(["x"]), tools=[count_rows], embedder=None)
    late.tools.append(read_result)
    with pytest.raises(ConfigError, match="`read_result`"):
        await late.run("go")
    for bad in (0, 50, 2.5, True):
        with pytest.raises(ConfigError, match="max_result_tokens"):
            Agent(llm=llm, embedder=None, window=AgentWindow(max_result_tokens=bad))  # type: ignore[arg-type]

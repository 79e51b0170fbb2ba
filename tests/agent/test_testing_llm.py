"""ScriptedLLM and FunctionLLM: strict, recorded, realistic, and never on the network."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from loomctx.agent.llm import (
    LLM,
    Completed,
    LLMOptions,
    TextDelta,
    ToolCallDelta,
    Usage,
    complete,
)
from loomctx.errors import ConfigError, ProviderError
from loomctx.messages import Message, ToolCall
from loomctx.testing.llm import FunctionLLM, LLMCall, ScriptedLLM, ScriptExhausted
from loomctx.tokens import HeuristicCounter, TiktokenCounter
from tests.agent._servers import collect, kinds, texts

HI = [Message.user("hi")]
LIST_TABLES = ToolCall(id="c1", name="list_tables", arguments={})
TOOLS = [{"name": "list_tables", "description": "List the tables.", "input_schema": {}}]


async def test_the_issue_example_calls_a_tool_then_replies() -> None:
    llm = ScriptedLLM([[LIST_TABLES], "done"])
    assert isinstance(llm, LLM)

    first = await complete(llm, HI, tools=TOOLS)
    second = await complete(llm, [*HI, first.message, Message.tool("t", tool_call_id="c1")])

    assert first.message.tool_calls == (LIST_TABLES,)
    assert first.finish_reason == "tool_calls"
    assert (second.text, second.finish_reason) == ("done", "stop")
    assert [len(c.messages) for c in llm.calls] == [1, 3]
    assert llm.calls[0] == LLMCall(messages=tuple(HI), tools=tuple(TOOLS), options=None)
    llm.assert_complete()


async def test_text_streams_in_a_few_deltas_then_usage_then_completed() -> None:
    text = "The quick brown fox jumps over the lazy dog."
    chunks = await collect(ScriptedLLM([text]).stream(HI))
    pieces = texts(chunks)
    assert 1 < len(pieces) <= 3
    assert "".join(pieces) == text
    assert kinds(chunks)[-2:] == ["usage", "completed"]


async def test_usage_is_counted_with_the_real_tokenizer() -> None:
    counter = TiktokenCounter()
    messages = [Message.system("You are terse."), Message.user("How many tables are there?")]
    call = ToolCall(id="c1", name="run_sql", arguments={"sql": "SELECT count(*) FROM t"})
    response = await complete(ScriptedLLM([("Counting.", [call])]), messages, tools=TOOLS)

    assert response.usage == Usage(
        input_tokens=counter.count_messages(messages, tools=TOOLS),
        output_tokens=counter.count("Counting.")
        + counter.count("run_sql")
        + counter.count(call.arguments_json()),
    )


async def test_a_custom_counter_is_used() -> None:
    counter = HeuristicCounter()
    response = await complete(ScriptedLLM(["ok"], counter=counter), HI)
    assert response.usage is not None
    assert response.usage.input_tokens == counter.count_messages(HI)


async def test_text_and_tool_calls_together_stream_as_deltas() -> None:
    calls = [ToolCall(id="a", name="f", arguments={"x": 1}), ToolCall(id="b", name="g")]
    chunks = await collect(ScriptedLLM([("Working on it.", calls)]).stream(HI))

    deltas = [c for c in chunks if isinstance(c, ToolCallDelta)]
    assert [(d.index, d.id, d.name) for d in deltas if d.id] == [(0, "a", "f"), (1, "b", "g")]
    assert "".join(d.arguments for d in deltas if d.index == 0) == '{"x":1}'
    done = chunks[-1]
    assert isinstance(done, Completed)
    assert done.message == Message.assistant("Working on it.", tool_calls=calls)


async def test_a_tuple_of_calls_is_a_tool_reply() -> None:
    response = await complete(ScriptedLLM([(LIST_TABLES,)]), HI)
    assert response.message.tool_calls == (LIST_TABLES,)


async def test_a_step_may_depend_on_the_messages() -> None:
    llm = ScriptedLLM([lambda messages: f"you said {messages[-1].content!r}"])
    assert (await complete(llm, HI)).text == "you said 'hi'"


async def test_a_completed_step_streams_as_given() -> None:
    done = Completed(
        message=Message.assistant("cut", tool_calls=[ToolCall(id="c1", name="f")]),
        finish_reason="length",
        invalid_tool_calls=(("c1", '{"a": '),),
    )
    chunks = await collect(ScriptedLLM([done]).stream(HI))
    assert chunks[-1] is done
    raw = "".join(c.arguments for c in chunks if isinstance(c, ToolCallDelta))
    assert raw == '{"a": '  # the raw text, as a provider would have streamed it
    assert "usage" not in kinds(chunks)


async def test_an_exception_step_is_raised() -> None:
    llm = ScriptedLLM([ProviderError("rate limited"), "recovered"])
    with pytest.raises(ProviderError, match="rate limited"):
        await complete(llm, HI)
    assert (await complete(llm, HI)).text == "recovered"
    llm.assert_complete()


async def test_an_empty_reply_streams_no_text() -> None:
    chunks = await collect(ScriptedLLM([""]).stream(HI))
    assert kinds(chunks) == ["usage", "completed"]


async def test_a_call_beyond_the_script_fails_loudly() -> None:
    llm = ScriptedLLM(["only"])
    await complete(llm, HI)
    with pytest.raises(ScriptExhausted) as caught:
        await complete(llm, [Message.user("again?")])
    assert isinstance(caught.value, AssertionError)
    assert "got call 2 but was scripted with 1 step(s)" in str(caught.value)
    assert "'again?'" in str(caught.value)
    assert len(llm.calls) == 2  # the unexpected call is recorded too
    # ... and even if the code under test swallowed the error, `assert_complete` does not.
    with pytest.raises(AssertionError, match="called 2 times but scripted with 1 steps"):
        llm.assert_complete()


async def test_a_call_with_no_messages_beyond_the_script() -> None:
    with pytest.raises(ScriptExhausted, match="the last message was ''"):
        await complete(ScriptedLLM([]), [])


async def test_unused_steps_fail_assert_complete() -> None:
    llm = ScriptedLLM(["one", "two", "three"])
    await complete(llm, HI)
    assert llm.remaining == 2
    assert repr(llm) == "ScriptedLLM(steps=3, used=1)"
    with pytest.raises(AssertionError, match="2 unused step\\(s\\) of 3 \\(next: 'two'\\)"):
        llm.assert_complete()


@pytest.mark.parametrize(
    ("step", "match"),
    [
        (42, "step 0 is 42; a reply must be a string, a list of `ToolCall`s"),
        ([], "step 0 is \\[\\]"),
        (["not a call"], "step 0 holds 'not a call', not a `ToolCall`"),
        (("text", ["x"]), "step 0 holds 'x', not a `ToolCall`"),
    ],
)
def test_bad_steps_are_rejected_up_front(step: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ScriptedLLM([step])


async def test_a_bad_reply_from_a_step_function_is_rejected() -> None:
    llm = ScriptedLLM([lambda messages: 42])  # type: ignore[list-item, return-value]
    with pytest.raises(ConfigError, match="the reply of step 0 is 42"):
        await complete(llm, HI)


async def test_function_llm_sees_messages_tools_and_options() -> None:
    seen: list[tuple[Any, ...]] = []

    def reply(messages: Sequence[Message], tools: Sequence[Mapping[str, Any]], options: Any) -> str:
        seen.append((messages, tools, options))
        return "echo: " + messages[-1].content

    llm = FunctionLLM(reply)
    assert isinstance(llm, LLM)
    assert llm.name == "function:reply"
    options = LLMOptions(temperature=0)

    response = await complete(llm, HI, tools=TOOLS, options=options)

    assert response.text == "echo: hi"
    assert seen == [(tuple(HI), tuple(TOOLS), options)]
    assert llm.calls == [LLMCall(messages=tuple(HI), tools=tuple(TOOLS), options=options)]
    assert repr(llm).startswith("FunctionLLM(")


async def test_function_llm_may_be_async_and_call_tools() -> None:
    async def reply(messages: Any, tools: Any, options: Any) -> list[ToolCall]:
        return [LIST_TABLES]

    llm = FunctionLLM(reply, name="tables")
    assert llm.name == "tables"
    assert (await complete(llm, HI)).message.tool_calls == (LIST_TABLES,)


async def test_function_llm_rejects_a_bad_reply_and_a_non_function() -> None:
    with pytest.raises(ConfigError, match="the reply of `function:<lambda>` is None"):
        await complete(FunctionLLM(lambda m, t, o: None), HI)  # type: ignore[arg-type, return-value]
    with pytest.raises(ConfigError, match="needs a function"):
        FunctionLLM("not callable")  # type: ignore[arg-type]


async def test_fakes_never_check_the_switch() -> None:
    # The suite forbids real requests; the fakes are not real and must keep working.
    assert (await complete(ScriptedLLM(["ok"]), HI)).text == "ok"
    chunks = await collect(FunctionLLM(lambda m, t, o: "ok").stream(HI))
    assert chunks[0] == TextDelta(text="ok")

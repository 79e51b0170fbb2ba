"""AnthropicLLM: the real `anthropic` SDK over HTTP against the scripted local server."""

from __future__ import annotations

import math
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from loomctx import Agent, AgentLoop
from loomctx.agent.llm import (
    LLM,
    Completed,
    LLMChunk,
    LLMOptions,
    TextDelta,
    ToolCallDelta,
    Usage,
    allow_model_requests,
    complete,
)
from loomctx.agent.providers import AnthropicLLM
from loomctx.agent.providers.anthropic import _input_json
from loomctx.context.billing import ANTHROPIC, ANTHROPIC_1H
from loomctx.errors import ConfigError, MessageFormatError, MissingExtraError, ProviderError
from loomctx.messages import Message, ToolCall, parse_arguments
from tests.agent._servers import (
    Pause,
    WireServer,
    anthropic_end,
    anthropic_error,
    anthropic_event,
    anthropic_message_start,
    anthropic_sse,
    anthropic_text,
    anthropic_text_block,
    anthropic_tool_block,
    collect,
    drain,
    kinds,
    texts,
)

anthropic = pytest.importorskip("anthropic", reason="needs the `anthropic` extra (in `.[dev]`)")

NAN = math.nan
HI = [Message.user("hi")]
Make = Callable[..., AnthropicLLM]

WEATHER_OPENAI = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.fixture
async def make(wire: WireServer) -> AsyncIterator[Make]:
    """Build providers pointed at the server; each is closed after the test."""
    made: list[AnthropicLLM] = []

    def build(**kwargs: Any) -> AnthropicLLM:
        kwargs.setdefault("base_url", wire.url)
        kwargs.setdefault("api_key", "test-key")
        llm = AnthropicLLM(kwargs.pop("model", "claude-test"), **kwargs)
        made.append(llm)
        return llm

    yield build
    for llm in made:
        await llm.aclose()


def last(chunks: list[Any]) -> Completed:
    done = chunks[-1]
    assert isinstance(done, Completed)
    return done


def sent_key(headers: dict[str, str] | Any) -> str:
    """The key as the SDK sent it (`x-api-key`, or a bearer token in newer SDKs)."""
    return str(headers.get("x-api-key") or headers["authorization"].removeprefix("Bearer "))


async def test_streams_text_with_usage_including_the_cache(wire: WireServer, make: Make) -> None:
    wire.script(
        anthropic_sse(
            anthropic_message_start(input_tokens=10, cache_read=100, cache_creation=20),
            anthropic_text_block(0, "Hel", "lo"),
            anthropic_end("end_turn", output_tokens=5),
        )
    )
    llm = make()
    assert isinstance(llm, LLM)
    assert llm.name == "anthropic:claude-test"

    chunks = await collect(llm.stream(HI))

    assert texts(chunks) == ["Hel", "lo"]
    assert kinds(chunks)[-2:] == ["usage", "completed"]
    usage = Usage(input_tokens=130, output_tokens=5, cached_input_tokens=100, cache_write_tokens=20)
    done = last(chunks)
    assert (chunks[-2], done.usage) == (usage, usage)
    assert done.message == Message.assistant("Hello")
    assert done.finish_reason == "stop"
    (request,) = wire.requests
    assert request.path == "/v1/messages"
    assert sent_key(request.headers) == "test-key"
    assert request.body == {
        "model": "claude-test",
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "stream": True,
    }


async def test_cumulative_counts_in_message_delta_win(wire: WireServer, make: Make) -> None:
    start = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": "Already "},
    }
    wire.script(
        anthropic_sse(
            anthropic_message_start(input_tokens=1),
            anthropic_event(start),
            anthropic_event(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": "here."},
                }
            ),
            anthropic_event({"type": "content_block_stop", "index": 0}),
            anthropic_end(
                output_tokens=9,
                input_tokens=40,
                cache_read_input_tokens=50,
                cache_creation_input_tokens=10,
            ),
        )
    )
    chunks = await collect(make().stream(HI))
    assert texts(chunks) == ["Already ", "here."]
    assert last(chunks).usage == Usage(
        input_tokens=100, output_tokens=9, cached_input_tokens=50, cache_write_tokens=10
    )


async def test_system_tools_and_options_reach_the_wire(wire: WireServer, make: Make) -> None:
    wire.script(anthropic_text("ok"))
    llm = make(max_tokens=512, temperature=0.2, extra={"top_k": 5})
    messages = [Message.system("Be brief."), Message.user("hi"), Message.system("Use metric.")]
    options = LLMOptions(stop=("END",), tool_choice="required", max_tokens=64)

    await complete(llm, messages, tools=[WEATHER_OPENAI], options=options)

    body = wire.requests[0].body
    assert body["system"] == "Be brief.\n\nUse metric."
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert body["tools"] == [
        {
            "name": "weather",
            "description": "The weather in a city.",
            "input_schema": WEATHER_OPENAI["function"]["parameters"],  # type: ignore[index]
        }
    ]
    assert body["tool_choice"] == {"type": "any"}
    assert body["stop_sequences"] == ["END"]
    assert (body["max_tokens"], body["temperature"], body["top_k"]) == (64, 0.2, 5)


@pytest.mark.parametrize(
    ("choice", "wire_choice"),
    [
        ("auto", {"type": "auto"}),
        ("none", {"type": "none"}),
        ("weather", {"type": "tool", "name": "weather"}),
    ],
)
def test_tool_choice_mapping(choice: str, wire_choice: dict[str, str]) -> None:
    llm = AnthropicLLM("claude-test", api_key="k")
    request = llm._request(HI, (), LLMOptions(tool_choice=choice, timeout=3), "claude-test")
    assert request["tool_choice"] == wire_choice
    assert request["timeout"] == 3


async def test_tool_use_blocks_stream_as_tool_call_deltas(wire: WireServer, make: Make) -> None:
    wire.script(
        anthropic_sse(
            anthropic_message_start(),
            anthropic_text_block(0, "Let me check."),
            anthropic_tool_block(1, "toolu_a", "weather", '{"ci', 'ty": "Pa', 'ris"}'),
            anthropic_tool_block(2, "toolu_b", "time", '{"tz": "CET"}'),
            anthropic_end("tool_use"),
        )
    )
    chunks = await collect(make().stream(HI, tools=[WEATHER_OPENAI]))

    deltas = [c for c in chunks if isinstance(c, ToolCallDelta)]
    assert deltas[0] == ToolCallDelta(index=0, id="toolu_a", name="weather", arguments="")
    assert deltas[4] == ToolCallDelta(index=1, id="toolu_b", name="time", arguments="")
    assert "".join(d.arguments for d in deltas if d.index == 0) == '{"city": "Paris"}'
    done = last(chunks)
    assert done.message == Message.assistant(
        "Let me check.",
        tool_calls=[
            ToolCall(id="toolu_a", name="weather", arguments={"city": "Paris"}),
            ToolCall(id="toolu_b", name="time", arguments={"tz": "CET"}),
        ],
    )
    assert done.finish_reason == "tool_calls"


async def test_tool_round_trip_sends_results_as_tool_result_blocks(
    wire: WireServer, make: Make
) -> None:
    wire.script(
        anthropic_sse(
            anthropic_message_start(),
            anthropic_tool_block(0, "toolu_1", "weather", '{"city": "Oslo"}'),
            anthropic_tool_block(1, "toolu_2", "weather", '{"city": "Rome"}'),
            anthropic_end("tool_use"),
        ),
        anthropic_text("Oslo 3 °C, Rome unknown."),
    )
    llm = make()
    history = [Message.system("You report weather."), Message.user("Oslo and Rome?")]
    first = await complete(llm, history, tools=[WEATHER_OPENAI])
    history += [
        first.message,
        Message.tool("3 °C", tool_call_id="toolu_1"),
        Message.tool("station offline", tool_call_id="toolu_2", is_error=True),
    ]
    await complete(llm, history, tools=[WEATHER_OPENAI])

    body = wire.requests[1].body
    assert body["system"] == "You report weather."
    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
                {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {"city": "Rome"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "3 °C"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "station offline",
                    "is_error": True,
                },
            ],
        },
    ]


async def test_invalid_tool_input_json_is_reported_not_raised(wire: WireServer, make: Make) -> None:
    wire.script(
        anthropic_sse(
            anthropic_message_start(),
            anthropic_tool_block(0, "toolu_bad", "weather", '{"city": "Os'),
            anthropic_tool_block(1, "toolu_ok", "time"),  # no input at all: `{}`
            anthropic_end("tool_use"),
        )
    )
    response = await complete(make(), HI)
    assert response.message.tool_calls == (
        ToolCall(id="toolu_bad", name="weather"),
        ToolCall(id="toolu_ok", name="time"),
    )
    assert response.invalid_tool_calls == (("toolu_bad", '{"city": "Os'),)


async def test_a_tool_input_given_at_block_start_is_used(wire: WireServer, make: Make) -> None:
    start = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}},
    }
    wire.script(
        anthropic_sse(
            anthropic_message_start(),
            anthropic_event(start),
            anthropic_event({"type": "content_block_stop", "index": 0}),
            anthropic_end("tool_use"),
        )
    )
    response = await complete(make(), HI)
    assert response.message.tool_calls == (ToolCall(id="t1", name="f", arguments={"x": 1}),)


async def test_tool_input_json_cannot_carry_is_an_invalid_call(
    wire: WireServer, make: Make
) -> None:
    """NaN streamed as input, or given at block start (the SDK's parser accepts it), and
    input nested 100k deep make invalid calls, not a failed stream or a poisoned history."""
    start = {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "tool_use", "id": "t_start", "name": "f", "input": {"x": NAN}},
    }
    wire.script(
        anthropic_sse(
            anthropic_message_start(),
            anthropic_tool_block(0, "t_nan", "f", '{"n": ', "NaN}"),
            anthropic_event(start),
            anthropic_event({"type": "content_block_stop", "index": 1}),
            anthropic_tool_block(2, "t_deep", "f", "[" * 100_000, "]" * 100_000),
            anthropic_end("tool_use"),
        )
    )
    response = await complete(make(), HI)
    assert [c.arguments for c in response.message.tool_calls] == [{}, {}, {}]
    assert [i for i, _ in response.invalid_tool_calls] == ["t_nan", "t_start", "t_deep"]
    assert response.invalid_tool_calls[:2] == (("t_nan", '{"n": NaN}'), ("t_start", '{"x": NaN}'))


def test_tool_input_that_cannot_be_written_as_json_is_an_invalid_call() -> None:
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    for value in (deep, {"x": {1, 2}}):
        with pytest.raises(MessageFormatError, match="not a valid JSON string"):
            parse_arguments(_input_json(value))
    assert _input_json({"x": NAN}) == '{"x": NaN}'  # written, so that parsing refuses it


async def test_surrogates_in_text_are_replaced(wire: WireServer, make: Make) -> None:
    wire.script(anthropic_text("ok \udc80"))
    response = await complete(make(), HI)
    assert response.text == "ok \ufffd"


async def test_thinking_blocks_are_skipped(wire: WireServer, make: Make) -> None:
    thinking = [
        anthropic_event(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""},
            }
        ),
        anthropic_event(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": "hmm"},
            }
        ),
        anthropic_event({"type": "content_block_stop", "index": 0}),
    ]
    wire.script(
        anthropic_sse(
            anthropic_message_start(),
            thinking,
            anthropic_text_block(1, "Answer."),
            anthropic_end(),
        )
    )
    assert (await complete(make(), HI)).text == "Answer."


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [
        ("max_tokens", "length"),
        ("stop_sequence", "stop"),
        ("refusal", "content_filter"),
        ("pause_turn", "pause_turn"),
    ],
)
async def test_stop_reasons_are_mapped(
    wire: WireServer, make: Make, stop_reason: str, finish_reason: str
) -> None:
    wire.script(anthropic_text("x", stop_reason=stop_reason))
    assert (await complete(make(), HI)).finish_reason == finish_reason


async def test_a_stream_without_usage_or_stop_reason(wire: WireServer, make: Make) -> None:
    wire.script(anthropic_sse(anthropic_event({"type": "message_stop"})))
    response = await complete(make(), HI)
    assert (response.text, response.finish_reason, response.usage) == ("", "stop", None)


async def test_a_message_delta_without_a_stop_reason(wire: WireServer, make: Make) -> None:
    delta = {"type": "message_delta", "delta": {"stop_reason": None}, "usage": {"output_tokens": 3}}
    wire.script(anthropic_sse(anthropic_event(delta), anthropic_event({"type": "message_stop"})))
    response = await complete(make(), HI)
    assert (response.finish_reason, response.usage) == (
        "stop",
        Usage(input_tokens=0, output_tokens=3),
    )


async def test_rate_limit_and_overload_are_retried_before_streaming(
    wire: WireServer, make: Make
) -> None:
    wire.script(
        anthropic_error(429, "rate_limit_error", "Number of requests too high", retry_after_ms="1"),
        anthropic_error(529, "overloaded_error", "Overloaded", retry_after_ms="1"),
        anthropic_text("once"),
    )
    chunks = await collect(make().stream(HI))
    assert texts(chunks) == ["once"]
    assert len(wire.requests) == 3


async def test_an_overload_event_before_output_is_retried(wire: WireServer, make: Make) -> None:
    overloaded = anthropic_event(
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    )
    wire.script(anthropic_sse(anthropic_message_start(), overloaded), anthropic_text("fine"))
    chunks = await collect(make().stream(HI))
    assert texts(chunks) == ["fine"]
    assert len(wire.requests) == 2


async def test_an_overload_event_after_output_is_a_provider_error(
    wire: WireServer, make: Make
) -> None:
    overloaded = anthropic_event(
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    )
    wire.script(
        anthropic_sse(
            anthropic_message_start(),
            anthropic_text_block(0, "Partial"),
            overloaded,
        )
    )
    chunks: list[LLMChunk] = []
    with pytest.raises(ProviderError) as caught:
        await drain(make().stream(HI), chunks)
    assert chunks == [TextDelta(text="Partial")]
    message = str(caught.value)
    assert "`anthropic:claude-test` failed: HTTP 529: Overloaded" in message
    assert "did not retry" in message


async def test_a_client_error_event_is_not_retried(wire: WireServer, make: Make) -> None:
    invalid = anthropic_event(
        {"type": "error", "error": {"type": "invalid_request_error", "message": "bad tool"}}
    )
    unknown = anthropic_event({"type": "error", "error": {"type": "new_error", "message": "?"}})
    wire.script(anthropic_sse(invalid), anthropic_sse(unknown))
    llm = make(max_retries=0)
    with pytest.raises(ProviderError, match="HTTP 400: bad tool"):
        await complete(llm, HI)
    with pytest.raises(ProviderError, match=r"APIStatusError: \?; see the provider's message"):
        await complete(llm, HI)


async def test_bad_key_is_a_provider_error_with_the_fix(wire: WireServer, make: Make) -> None:
    wire.script(anthropic_error(401, "authentication_error", "invalid x-api-key"))
    with pytest.raises(ProviderError) as caught:
        await complete(make(), HI)
    assert "HTTP 401: invalid x-api-key" in str(caught.value)
    assert "check `ANTHROPIC_API_KEY`" in str(caught.value)
    assert len(wire.requests) == 1


async def test_a_stall_after_output_is_a_timeout_error(wire: WireServer, make: Make) -> None:
    wire.script(
        anthropic_sse(anthropic_message_start(), anthropic_text_block(0, "Par"), Pause(seconds=5))
    )
    chunks: list[LLMChunk] = []
    with pytest.raises(ProviderError) as caught:
        await drain(make(timeout=0.3).stream(HI), chunks)
    assert texts(chunks) == ["Par"]
    assert "no response within the timeout of 0.3 s" in str(caught.value)
    assert len(wire.requests) == 1


async def test_a_stream_cut_before_message_stop_is_an_error(wire: WireServer, make: Make) -> None:
    wire.script(anthropic_sse(anthropic_message_start(), anthropic_text_block(0, "Half")))
    with pytest.raises(ProviderError, match="ended before `message_stop`"):
        await complete(make(max_retries=0), HI)


async def test_real_requests_can_be_switched_off(wire: WireServer, make: Make) -> None:
    llm = make()
    with allow_model_requests(False), pytest.raises(ProviderError, match="disabled"):
        await complete(llm, HI)
    assert wire.requests == []


def test_no_credentials_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="set `ANTHROPIC_API_KEY` or pass `api_key=`"):
        AnthropicLLM("claude-test")


async def test_a_key_from_the_environment_is_used(
    wire: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
    wire.script(anthropic_text("ok"))
    async with AnthropicLLM("claude-test", base_url=wire.url) as llm:
        await complete(llm, HI)
    assert sent_key(wire.requests[0].headers) == "env-key"


async def test_a_local_server_needs_no_key(wire: WireServer, make: Make) -> None:
    wire.script(anthropic_text("ok"))
    await complete(make(api_key=None), HI)
    assert sent_key(wire.requests[0].headers) == "unused"


async def test_a_client_of_your_own_is_used_and_left_open(wire: WireServer) -> None:
    client = anthropic.AsyncAnthropic(base_url=wire.url, api_key="mine", max_retries=0)
    wire.script(anthropic_text("ok"))
    async with AnthropicLLM("claude-test", client=client) as llm:
        await complete(llm, HI)
    assert not client.is_closed()
    await client.close()
    assert sent_key(wire.requests[0].headers) == "mine"


def test_a_client_and_connection_settings_conflict() -> None:
    client = anthropic.AsyncAnthropic(base_url="http://127.0.0.1:9", api_key="k")
    with pytest.raises(ConfigError, match="`client=` and also"):
        AnthropicLLM("claude-test", client=client, base_url="http://127.0.0.1:9")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_tokens": 0}, "`max_tokens` must be"),
        ({"stop": "END"}, "write `stop=\\('END',\\)`"),
        ({"extras": {}}, "unknown option"),
    ],
)
def test_settings_are_checked(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        AnthropicLLM("claude-test", api_key="k", **kwargs)


def test_a_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)
    with pytest.raises(MissingExtraError) as caught:
        AnthropicLLM("claude-test", api_key="k")
    assert (caught.value.extra, caught.value.module) == ("anthropic", "anthropic")


def test_an_unreadable_credential_profile_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not hasattr(anthropic, "CredentialsError"):
        pytest.skip("this `anthropic` SDK has no credential profiles")
    monkeypatch.setenv("ANTHROPIC_PROFILE", "missing")
    with pytest.raises(ConfigError, match=r"could not set up its client: .*missing"):
        AnthropicLLM("claude-test")


async def test_cache_breakpoints_mark_the_system_prompt_and_the_places_given(
    wire: WireServer, make: Make
) -> None:
    wire.script(
        anthropic_sse(
            anthropic_message_start(input_tokens=10),
            anthropic_text_block(0, "ok"),
            anthropic_end("end_turn", output_tokens=1),
        )
    )
    messages = [
        Message.system("Be brief."),
        Message.user("first"),
        Message.assistant("one"),
        Message.user("reference data"),
        Message.user("second"),
    ]
    options = LLMOptions(cache_breakpoints=(3,))
    await collect(make().stream(messages, options=options))
    body = wire.requests[0].body
    ephemeral = {"type": "ephemeral"}
    assert body["system"] == [{"type": "text", "text": "Be brief.", "cache_control": ephemeral}]
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "one", "cache_control": ephemeral}],
    }
    # The two user messages after it merge into one, unmarked: the dynamic part.
    assert body["messages"][2]["content"] == [
        {"type": "text", "text": "reference data"},
        {"type": "text", "text": "second"},
    ]


async def test_the_one_hour_cache_is_asked_for_on_loom_s_own_breakpoints(
    wire: WireServer, make: Make
) -> None:
    for _ in range(2):
        wire.script(
            anthropic_sse(
                anthropic_message_start(input_tokens=10),
                anthropic_text_block(0, "ok"),
                anthropic_end("end_turn", output_tokens=1),
            )
        )
    messages = [Message.system("Be brief."), Message.user("first"), Message.assistant("one")]
    hour = {"type": "ephemeral", "ttl": "1h"}
    # Set for every call (the provider's default options), or for one call.
    await collect(make(cache_ttl="1h").stream(messages, options=LLMOptions(cache_breakpoints=(3,))))
    await collect(
        make().stream(messages, options=LLMOptions(cache_breakpoints=(3,), cache_ttl="1h"))
    )
    for request in wire.requests:
        assert request.body["system"][0]["cache_control"] == hour
        assert request.body["messages"][-1]["content"][-1]["cache_control"] == hour
    with pytest.raises(ConfigError, match="`cache_ttl`"):
        LLMOptions(cache_ttl="1d")  # type: ignore[arg-type]


def test_the_bill_is_predicted_at_the_cache_asked_for(make: Make) -> None:
    """An agent predicts its calls' bill at the prices of the cache its calls ask for: the
    LLM's own default `cache_ttl`, or the run's `AgentLoop.llm_options`."""
    assert make().pricing == ANTHROPIC
    assert make(cache_ttl="1h").pricing == ANTHROPIC_1H
    hour = AgentLoop(llm_options=LLMOptions(cache_ttl="1h"))
    five = AgentLoop(llm_options=LLMOptions(cache_ttl="5m"))
    assert Agent(make(), "Be brief.", loop=hour).pricing == ANTHROPIC_1H
    assert Agent(make(cache_ttl="1h"), "Be brief.", loop=five).pricing == ANTHROPIC
    assert Agent(make(cache_ttl="1h"), "Be brief.").pricing == ANTHROPIC_1H

"""OpenAIChatLLM: the real `openai` SDK over HTTP against the scripted local server."""

from __future__ import annotations

import socket
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from loomctx import Agent, tool
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
from loomctx.agent.providers import OpenAIChatLLM
from loomctx.errors import ConfigError, MissingExtraError, ProviderError
from loomctx.messages import Message, ToolCall, to_openai
from tests.agent._servers import (
    JSONReply,
    Pause,
    WireServer,
    collect,
    drain,
    kinds,
    openai_chunk,
    openai_error,
    openai_sse,
    openai_text,
    openai_tool_delta,
    openai_usage_chunk,
    texts,
)

openai = pytest.importorskip("openai", reason="needs the `openai` extra (in `.[dev]`)")

HI = [Message.user("hi")]
Make = Callable[..., OpenAIChatLLM]


@pytest.fixture
async def make(wire: WireServer) -> AsyncIterator[Make]:
    """Build providers pointed at the server; each is closed after the test."""
    made: list[OpenAIChatLLM] = []

    def build(**kwargs: Any) -> OpenAIChatLLM:
        kwargs.setdefault("base_url", wire.openai_url)
        kwargs.setdefault("api_key", "test-key")
        llm = OpenAIChatLLM(kwargs.pop("model", "gpt-test"), **kwargs)
        made.append(llm)
        return llm

    yield build
    for llm in made:
        await llm.aclose()


def last(chunks: list[Any]) -> Completed:
    done = chunks[-1]
    assert isinstance(done, Completed)
    return done


async def test_streams_text_then_usage_then_completed(wire: WireServer, make: Make) -> None:
    wire.script(openai_text("Hel", "lo", " world", usage=(11, 3), cached=4))
    llm = make()
    assert isinstance(llm, LLM)
    assert llm.name == "openai:gpt-test"

    chunks = await collect(llm.stream(HI))

    assert texts(chunks) == ["Hel", "lo", " world"]
    assert kinds(chunks)[-2:] == ["usage", "completed"]
    assert chunks[-2] == Usage(input_tokens=11, output_tokens=3, cached_input_tokens=4)
    done = last(chunks)
    assert done.message == Message.assistant("Hello world")
    assert done.finish_reason == "stop"
    assert done.usage == chunks[-2]
    (request,) = wire.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer test-key"
    assert request.body == {
        "model": "gpt-test",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def test_options_merge_defaults_and_reach_the_wire(wire: WireServer, make: Make) -> None:
    wire.script(openai_text("ok"), openai_text("ok"))
    llm = make(temperature=0.5, max_tokens=100, extra={"seed": 7, "top_p": 0.5})
    messages = [Message.system("Be brief."), Message.user("hi")]

    await complete(llm, messages)
    options = LLMOptions(
        model="gpt-other",
        temperature=0.0,
        stop=("END",),
        tool_choice="lookup",
        timeout=5,
        extra={"top_p": 0.9},
    )
    await complete(llm, messages, options=options)

    first, second = (r.body for r in wire.requests)
    assert first["messages"] == to_openai(messages)
    assert (first["temperature"], first["max_tokens"], first["seed"]) == (0.5, 100, 7)
    assert first["top_p"] == 0.5
    assert "max_completion_tokens" not in first  # a custom server gets `max_tokens`
    assert second["model"] == "gpt-other"
    assert (second["temperature"], second["max_tokens"], second["seed"]) == (0.0, 100, 7)
    assert second["top_p"] == 0.9
    assert second["stop"] == ["END"]
    assert second["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}


async def test_tool_calls_split_over_chunks_and_in_parallel(wire: WireServer, make: Make) -> None:
    wire.script(
        openai_sse(
            [
                openai_chunk({"role": "assistant", "content": None}),
                openai_chunk(openai_tool_delta(0, id="call_a", name="weather")),
                openai_chunk(openai_tool_delta(0, arguments='{"ci')),
                openai_chunk(openai_tool_delta(1, id="call_b", name="time", arguments="")),
                openai_chunk(openai_tool_delta(0, arguments='ty": "Pa')),
                openai_chunk(openai_tool_delta(1, arguments='{"tz": "CET"}')),
                openai_chunk(openai_tool_delta(0, arguments='ris"}')),
                openai_chunk({}, finish_reason="tool_calls"),
                openai_usage_chunk(40, 12),
            ]
        )
    )
    chunks = await collect(make().stream(HI, tools=[WEATHER]))

    deltas = [c for c in chunks if isinstance(c, ToolCallDelta)]
    assert deltas[0] == ToolCallDelta(index=0, id="call_a", name="weather", arguments="")
    assert deltas[2] == ToolCallDelta(index=1, id="call_b", name="time", arguments="")
    assert all(d.id is None and d.name is None for d in deltas if d not in (deltas[0], deltas[2]))
    assert "".join(d.arguments for d in deltas if d.index == 0) == '{"city": "Paris"}'
    done = last(chunks)
    assert done.message.tool_calls == (
        ToolCall(id="call_a", name="weather", arguments={"city": "Paris"}),
        ToolCall(id="call_b", name="time", arguments={"tz": "CET"}),
    )
    assert done.message.content == ""
    assert done.finish_reason == "tool_calls"
    assert done.invalid_tool_calls == ()


WEATHER = {
    "name": "weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


async def test_tool_round_trip_sends_calls_and_results_in_openai_shape(
    wire: WireServer, make: Make
) -> None:
    wire.script(
        openai_sse(
            [
                openai_chunk(
                    openai_tool_delta(0, id="call_1", name="weather", arguments='{"city":"Oslo"}')
                ),
                openai_chunk({}, finish_reason="tool_calls"),
            ]
        ),
        openai_text("It is 3 °C in Oslo."),
    )
    llm = make()
    history = [Message.system("You report weather."), Message.user("Weather in Oslo?")]

    first = await complete(llm, history, tools=[WEATHER])
    assert first.usage is None  # the server sent no usage chunk
    history += [first.message, Message.tool("3 °C", tool_call_id="call_1", name="weather")]
    second = await complete(llm, history, tools=[WEATHER])

    assert second.text == "It is 3 °C in Oslo."
    body = wire.requests[1].body
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "The weather in a city.",
                "parameters": WEATHER["input_schema"],
            },
        }
    ]
    assert body["messages"][2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "3 °C"},
    ]


async def test_invalid_tool_call_json_is_reported_not_raised(wire: WireServer, make: Make) -> None:
    wire.script(
        openai_sse(
            [
                openai_chunk(openai_tool_delta(0, id="c1", name="weather", arguments='{"city": ')),
                openai_chunk(openai_tool_delta(1, id="c2", name="weather", arguments="[1, 2]")),
                openai_chunk(openai_tool_delta(2, id="c3", name="time")),
                openai_chunk({}, finish_reason="tool_calls"),
            ]
        )
    )
    response = await complete(make(), HI)

    assert response.message.tool_calls == (
        ToolCall(id="c1", name="weather", arguments={}),
        ToolCall(id="c2", name="weather", arguments={}),
        ToolCall(id="c3", name="time", arguments={}),  # no arguments at all is `{}`, and valid
    )
    assert response.invalid_tool_calls == (("c1", '{"city": '), ("c2", "[1, 2]"))


DEEP = "[" * 100_000 + "]" * 100_000


async def test_arguments_json_cannot_carry_are_invalid_calls_the_model_reads(
    wire: WireServer, make: Make
) -> None:
    """NaN and Infinity (which Python's `json` reads), nesting 100k deep (which makes it
    raise `RecursionError`) and escaped surrogates (not valid text) do not fail the stream
    or reach the history: each such call is invalid, with `{}` and its raw text."""
    raws = ['{"n": NaN}', '{"n": -Infinity}', DEEP, '{"s": "\\ud800"}']
    wire.script(
        openai_sse(
            [
                *(
                    openai_chunk(openai_tool_delta(i, id=f"c{i}", name="f", arguments=raw))
                    for i, raw in enumerate(raws)
                ),
                openai_chunk({}, finish_reason="tool_calls"),
            ]
        )
    )
    response = await complete(make(), HI)
    assert response.message.tool_calls == tuple(
        ToolCall(id=f"c{i}", name="f") for i in range(len(raws))
    )
    assert response.invalid_tool_calls == tuple((f"c{i}", raw) for i, raw in enumerate(raws))
    to_openai([response.message])  # the history stays sendable


async def test_nan_arguments_reach_the_model_as_an_error_and_history_survives(
    wire: WireServer, make: Make
) -> None:
    """The issue's scenario end to end: a call with `{"n": NaN}` is answered with an error
    the model reads, and the exchange stays in the history of the next run."""
    calls: list[float] = []

    @tool
    def square(n: float) -> float:
        """Square a number."""
        calls.append(n)
        return n * n

    wire.script(
        openai_sse(
            [
                openai_chunk(openai_tool_delta(0, id="c1", name="square", arguments='{"n": NaN}')),
                openai_chunk({}, finish_reason="tool_calls"),
            ]
        ),
        openai_text("Sorry, I sent NaN."),
        openai_text("It was NaN."),
    )
    agent = Agent(llm=make(), tools=[square], embedder=None)
    assert await agent.run("square NaN") == "Sorry, I sent NaN."
    assert calls == []  # not run
    answer = wire.requests[1].body["messages"][-1]
    assert answer["role"] == "tool"
    assert answer["tool_call_id"] == "c1"
    assert "NaN" in answer["content"]
    assert await agent.run("what did you send?") == "It was NaN."
    history = wire.requests[2].body["messages"]
    roles = [(m["role"], m.get("tool_calls", [{}])[0].get("id")) for m in history]
    assert ("assistant", "c1") in roles  # the exchange is still in the window
    assert any(m["role"] == "tool" and m["tool_call_id"] == "c1" for m in history)


async def test_surrogates_in_the_reply_text_are_replaced(wire: WireServer, make: Make) -> None:
    # A lone surrogate, an escaped pair (which JSON joins), and a pair split over two chunks.
    wire.script(openai_text("caf\udce9 ", "\ud83d\ude00", "\ud83d", "\ude00"))
    chunks = await collect(make().stream(HI))
    assert texts(chunks) == ["caf\ufffd ", "😀", "\ufffd", "\ufffd"]
    assert last(chunks).message.content == "caf\ufffd 😀\ufffd\ufffd"


async def test_calls_without_an_id_get_a_unique_one(wire: WireServer, make: Make) -> None:
    wire.script(
        openai_sse(
            [
                openai_chunk({"tool_calls": [{"index": 0, "function": {"name": "f"}}]}),
                openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
                openai_chunk({"tool_calls": [{"index": 1, "function": {"name": "f"}}]}),
                openai_chunk({}, finish_reason="tool_calls"),
            ]
        )
    )
    calls = (await complete(make(), HI)).message.tool_calls
    assert [c.name for c in calls] == ["f", "f"]
    assert calls[0].id.startswith("call_")
    assert calls[0].id != calls[1].id


async def test_a_call_whose_name_arrives_late_or_never(wire: WireServer, make: Make) -> None:
    wire.script(
        openai_sse(
            [
                openai_chunk({"tool_calls": [{"index": 0, "id": "c1"}]}),
                openai_chunk(openai_tool_delta(0, name="late", arguments="{}")),
                openai_chunk({}, finish_reason="tool_calls"),
            ]
        ),
        openai_sse(
            [
                openai_chunk({"tool_calls": [{"index": 0, "id": "c1"}]}),
                openai_chunk({}, finish_reason="tool_calls"),
            ]
        ),
    )
    llm = make()
    chunks = await collect(llm.stream(HI))
    assert chunks[1] == ToolCallDelta(index=0, name="late", arguments="{}")
    assert last(chunks).message.tool_calls == (ToolCall(id="c1", name="late"),)
    with pytest.raises(ProviderError, match="without a function name"):
        await complete(llm, HI)


async def test_a_refusal_is_the_reply_text(wire: WireServer, make: Make) -> None:
    wire.script(
        openai_sse(
            [
                openai_chunk({"refusal": "I can't help with that."}),
                openai_chunk({}, finish_reason="stop"),
            ]
        )
    )
    assert (await complete(make(), HI)).text == "I can't help with that."


async def test_other_choices_are_ignored(wire: WireServer, make: Make) -> None:
    other = openai_chunk({"content": "other"})
    other["choices"][0]["index"] = 1
    wire.script(
        openai_sse(
            [openai_chunk({"content": "mine"}), other, openai_chunk({}, finish_reason="stop")]
        )
    )
    assert (await complete(make(), HI)).text == "mine"


async def test_rate_limit_and_server_error_are_retried_before_streaming(
    wire: WireServer, make: Make
) -> None:
    wire.script(
        openai_error(429, "Rate limit reached", type="rate_limit_error", retry_after_ms="1"),
        openai_error(500, "The server had an error", type="server_error", retry_after_ms="1"),
        openai_text("once", " only"),
    )
    chunks = await collect(make().stream(HI))

    assert texts(chunks) == ["once", " only"]
    assert [r.headers["x-stainless-retry-count"] for r in wire.requests] == ["0", "1", "2"]


async def test_rate_limit_after_all_retries_is_a_provider_error(
    wire: WireServer, make: Make
) -> None:
    wire.script(
        openai_error(429, "Rate limit reached for gpt-test", retry_after_ms="1"),
        openai_error(429, "Rate limit reached for gpt-test", retry_after_ms="1"),
    )
    with pytest.raises(ProviderError) as caught:
        await complete(make(max_retries=1), HI)
    message = str(caught.value)
    assert "`openai:gpt-test`" in message
    assert "HTTP 429: Rate limit reached for gpt-test" in message
    assert "still failing after 1 retries" in message
    assert isinstance(caught.value.__cause__, openai.RateLimitError)


async def test_bad_key_is_a_provider_error_with_the_fix(wire: WireServer, make: Make) -> None:
    wire.script(openai_error(401, "Incorrect API key provided: sk-bad."))
    with pytest.raises(ProviderError) as caught:
        await complete(make(), HI)
    message = str(caught.value)
    assert "HTTP 401: Incorrect API key provided: sk-bad." in message
    assert "check `OPENAI_API_KEY`" in message
    assert len(wire.requests) == 1  # a 401 is not retried


@pytest.mark.parametrize(
    ("status", "hint"),
    [
        (400, "its message says which field"),
        (402, "billing"),
        (403, "may not use model `gpt-test`"),
        (404, "check the model name `gpt-test`"),
        (413, "too large"),
    ],
)
async def test_client_errors_name_the_fix(
    wire: WireServer, make: Make, status: int, hint: str
) -> None:
    wire.script(openai_error(status, "nope"))
    with pytest.raises(ProviderError, match=f"HTTP {status}: nope; .*{hint}"):
        await complete(make(), HI)


@pytest.mark.parametrize(("status", "hint"), [(504, "timed out at the provider"), (503, "failed")])
async def test_server_errors_name_the_fix(
    wire: WireServer, make: Make, status: int, hint: str
) -> None:
    wire.script(openai_error(status, "down"))
    with pytest.raises(ProviderError, match=f"HTTP {status}: down; .*{hint}"):
        await complete(make(max_retries=0), HI)


async def test_no_response_in_time_is_a_timeout_error(wire: WireServer, make: Make) -> None:
    wire.script(JSONReply(delay=5, body={}), JSONReply(delay=5, body={}))
    with pytest.raises(ProviderError) as caught:
        await complete(make(timeout=0.2, max_retries=1), HI)
    assert "no response within the timeout of 0.2 s" in str(caught.value)
    assert "raise `timeout=`" in str(caught.value)
    assert len(wire.requests) == 2  # the SDK retried the timed-out request once


async def test_a_call_timeout_overrides_the_default(wire: WireServer, make: Make) -> None:
    wire.script(JSONReply(delay=5, body={}))
    with pytest.raises(ProviderError, match=r"timeout of 0\.2 s"):
        await complete(make(max_retries=0), HI, options=LLMOptions(timeout=0.2))


async def test_a_stall_after_output_is_not_retried(wire: WireServer, make: Make) -> None:
    wire.script(openai_sse([openai_chunk({"content": "partial"}), Pause(seconds=5)], done=False))
    chunks: list[LLMChunk] = []
    with pytest.raises(ProviderError) as caught:
        await drain(make(timeout=0.3).stream(HI), chunks)
    assert chunks == [TextDelta(text="partial")]
    assert "did not retry" in str(caught.value)
    assert len(wire.requests) == 1


async def test_a_stream_that_breaks_before_output_is_retried(wire: WireServer, make: Make) -> None:
    wire.script(
        openai_sse([openai_chunk({"role": "assistant", "content": ""}), Pause(seconds=5)]),
        openai_sse([{"error": {"message": "The server is overloaded", "type": "server_error"}}]),
        openai_text("fine"),
    )
    chunks = await collect(make(timeout=0.3).stream(HI))
    assert texts(chunks) == ["fine"]
    assert len(wire.requests) == 3


async def test_a_stream_error_event_names_the_providers_message(
    wire: WireServer, make: Make
) -> None:
    wire.script(openai_sse([{"error": {"message": "The server is overloaded"}}]))
    with pytest.raises(ProviderError, match="APIError: The server is overloaded"):
        await complete(make(max_retries=0), HI)


async def test_a_stream_cut_before_the_finish_is_an_error(wire: WireServer, make: Make) -> None:
    wire.script(openai_sse([openai_chunk({"content": "half a rep"})], done=False))
    with pytest.raises(ProviderError) as caught:
        await complete(make(), HI)
    assert "ended without a `finish_reason`" in str(caught.value)
    assert "connection was probably cut" in str(caught.value)


async def test_an_unreachable_server_is_a_connection_error(make: Make) -> None:
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    llm = make(base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
    with pytest.raises(ProviderError, match=f"could not connect to http://127.0.0.1:{port}/v1"):
        await complete(llm, HI)


async def test_the_caller_may_stop_reading_early(wire: WireServer, make: Make) -> None:
    wire.script(openai_text("a", "b", "c"), openai_text("next"))
    llm = make()
    async for chunk in llm.stream(HI):
        assert chunk == TextDelta(text="a")
        break
    assert (await complete(llm, HI)).text == "next"


async def test_real_requests_can_be_switched_off(wire: WireServer, make: Make) -> None:
    llm = make()
    with allow_model_requests(False), pytest.raises(ProviderError) as caught:
        await complete(llm, HI)
    assert "real model requests are disabled" in str(caught.value)
    assert "allow_model_requests" in str(caught.value)
    assert wire.requests == []


@pytest.mark.parametrize("base_url", [None, "https://api.openai.com/v1"])
def test_the_official_endpoint_needs_a_key(base_url: str | None) -> None:
    with pytest.raises(ConfigError, match="set `OPENAI_API_KEY` or pass `api_key=`"):
        OpenAIChatLLM("gpt-4o", base_url=base_url)


async def test_a_key_from_the_environment_is_used(
    wire: WireServer, make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    monkeypatch.setenv("OPENAI_BASE_URL", wire.openai_url)
    wire.script(openai_text("ok"))
    llm = OpenAIChatLLM("gpt-test")
    try:
        await complete(llm, HI)
    finally:
        await llm.aclose()
    assert wire.requests[0].headers["authorization"] == "Bearer env-key"


async def test_a_local_server_needs_no_key(wire: WireServer, make: Make) -> None:
    wire.script(openai_text("ok"))
    await complete(make(api_key=None), HI)
    assert wire.requests[0].headers["authorization"] == "Bearer unused"


async def test_a_client_of_your_own_is_used_and_left_open(wire: WireServer) -> None:
    client = openai.AsyncOpenAI(base_url=wire.openai_url, api_key="mine", max_retries=0)
    wire.script(openai_text("ok"))
    async with OpenAIChatLLM("gpt-test", client=client) as llm:
        assert llm.base_url == wire.openai_url + "/"
        await complete(llm, HI)
    assert not client.is_closed()
    await client.close()
    assert wire.requests[0].headers["authorization"] == "Bearer mine"


def test_a_client_and_connection_settings_conflict() -> None:
    client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="k")
    with pytest.raises(ConfigError, match="`client=` and also"):
        OpenAIChatLLM("gpt-test", client=client, api_key="other")


def test_official_endpoint_gets_max_completion_tokens() -> None:
    llm = OpenAIChatLLM("gpt-test", api_key="k", base_url="https://api.openai.com/v1")
    request = llm._request(HI, (), LLMOptions(max_tokens=10, tool_choice="required"), "gpt-test")
    assert request["max_completion_tokens"] == 10
    assert "max_tokens" not in request
    assert request["tool_choice"] == "required"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"model": ""}, "needs a model name"),
        ({"max_retries": -1}, "`max_retries` must be"),
        ({"timeout": 0}, "`timeout` must be"),
        ({"temprature": 0.1}, "unknown option"),
    ],
)
def test_settings_are_checked(kwargs: dict[str, Any], match: str) -> None:
    model = kwargs.pop("model", "gpt-test")
    with pytest.raises(ConfigError, match=match):
        OpenAIChatLLM(model, api_key="k", **kwargs)


def test_a_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # `import openai` now fails
    with pytest.raises(MissingExtraError) as caught:
        OpenAIChatLLM("gpt-test", api_key="k")
    assert caught.value.extra == "openai"
    assert "pip install 'loomctx[openai]'" in str(caught.value)


def test_a_client_the_sdk_cannot_build_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(**kwargs: Any) -> None:
        raise openai.OpenAIError("`api_key` and `workload_identity` are mutually exclusive")

    monkeypatch.setattr(openai, "AsyncOpenAI", refuse)
    with pytest.raises(ConfigError, match="could not set up its client: `api_key` and"):
        OpenAIChatLLM("gpt-test", api_key="k")


def test_repr_names_the_model() -> None:
    assert repr(OpenAIChatLLM("gpt-test", api_key="k")) == "OpenAIChatLLM('gpt-test')"


async def test_the_cache_key_reaches_the_wire_and_cache_writes_are_counted(
    wire: WireServer, make: Make
) -> None:
    wire.script(openai_text("ok", usage=(2000, 3), cached=1500, written=480))
    chunks = await collect(make().stream(HI, options=LLMOptions(cache_key="acme/bot/s1")))
    assert chunks[-2] == Usage(
        input_tokens=2000, output_tokens=3, cached_input_tokens=1500, cache_write_tokens=480
    )
    (request,) = wire.requests
    assert request.body["prompt_cache_key"] == "acme/bot/s1"

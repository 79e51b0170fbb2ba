"""The proxy's other wire formats: OpenAI's Responses API (`POST /v1/responses`) and
Anthropic's Messages API (`POST /v1/messages`), driven by the official `openai` and
`anthropic` SDKs over real HTTP, through Loom, to a local upstream."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import anthropic
import openai
import pytest

from loomctx.stores.base import Delete, Get
from tests.agent._servers import (
    anthropic_end,
    anthropic_message_start,
    anthropic_sse,
    anthropic_text,
    anthropic_text_block,
    anthropic_tool_block,
    openai_chunk,
    openai_sse,
    openai_text,
    openai_tool_delta,
    openai_usage_chunk,
)
from tests.server._http import call
from tests.server.conftest import ACME_KEY, GLOBEX_KEY

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city now.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
WEATHER_ANTHROPIC = {
    "name": "get_weather",
    "description": "The weather in a city now.",
    "input_schema": WEATHER["parameters"],
}


def weather_call(call_id: str = "call_w1") -> object:
    return openai_sse(
        [
            openai_chunk({"role": "assistant", "content": None}),
            openai_chunk(openai_tool_delta(0, id=call_id, name="get_weather")),
            openai_chunk(openai_tool_delta(0, arguments='{"city": ')),
            openai_chunk(openai_tool_delta(0, arguments='"Paris"}')),
            openai_chunk({}, finish_reason="tool_calls"),
            openai_usage_chunk(30, 9),
        ]
    )


@pytest.fixture
def anthropic_client() -> Iterator[Callable[..., anthropic.Anthropic]]:
    """The official `anthropic` client for a running Loom (closed after the test)."""
    made: list[anthropic.Anthropic] = []

    def make(loom, key: str = ACME_KEY) -> anthropic.Anthropic:  # type: ignore[no-untyped-def]
        made.append(anthropic.Anthropic(base_url=loom.url, api_key=key, max_retries=0))
        return made[-1]

    yield make
    for client in made:
        client.close()


# --- the Responses API --------------------------------------------------------------------


def test_responses_plain(loom) -> None:
    loom.wire.script(openai_text("Hello", " there"))
    raw = loom.openai(ACME_KEY).responses.with_raw_response.create(
        model="gpt-test",
        instructions="Be brief.",
        input="Hi",
        extra_headers={"X-Loom-Session": "r1"},
    )
    response = raw.parse()
    assert response.output_text == "Hello there"
    assert response.id.startswith("resp_")
    assert response.usage is not None
    assert response.usage.input_tokens == 11
    assert raw.headers["x-loom-session"] == "r1"
    sent = loom.wire.requests[0].body
    assert sent["messages"] == [
        {"role": "system", "content": "You work for ACME.\n\nBe brief."},
        {"role": "user", "content": "Hi"},
    ]
    status, report, _ = call(
        "GET", f"{loom.v1}/reports/{raw.headers['x-loom-report']}", key=ACME_KEY
    )
    assert status == 200
    assert report["session"] == "r1"


def test_responses_streamed(loom) -> None:
    loom.wire.script(openai_text("Hel", "lo"))
    stream = loom.openai(ACME_KEY).responses.create(model="gpt-test", input="Hi", stream=True)
    events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert deltas == ["Hel", "lo"]
    assert events[-1].response.output_text == "Hello"
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_responses_stream_helper_accumulates(loom) -> None:
    loom.wire.script(weather_call())
    with loom.openai(ACME_KEY).responses.stream(
        model="gpt-test", input="Weather in Paris?", tools=[WEATHER]
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in kinds
    [item] = final.output
    assert item.type == "function_call"
    assert item.name == "get_weather"
    assert json.loads(item.arguments) == {"city": "Paris"}


def test_responses_function_call_round_trip_stateless(loom) -> None:
    client = loom.openai(ACME_KEY)
    loom.wire.script(weather_call(), openai_text("Sunny in Paris."))
    first = client.responses.create(
        model="gpt-test",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]}],
        tools=[WEATHER],
        extra_headers={"X-Loom-Session": "r2"},
    )
    [call_item] = first.output
    assert call_item.type == "function_call"
    assert call_item.call_id == "call_w1"
    # The upstream got the Responses tool as a chat-completions function tool.
    assert loom.wire.requests[0].body["tools"] == [
        {"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}
    ]
    second = client.responses.create(
        model="gpt-test",
        input=[
            {"role": "user", "content": "Weather?"},
            {
                "type": "function_call",
                "call_id": "call_w1",
                "name": "get_weather",
                "arguments": call_item.arguments,
            },
            {"type": "function_call_output", "call_id": "call_w1", "output": "sunny, 24C"},
        ],
        tools=[WEATHER],
        extra_headers={"X-Loom-Session": "r2"},
    )
    assert second.output_text == "Sunny in Paris."
    sent = loom.wire.requests[1].body["messages"]
    assert sent[-2]["tool_calls"][0]["id"] == "call_w1"
    assert sent[-1] == {"role": "tool", "tool_call_id": "call_w1", "content": "sunny, 24C"}


def test_responses_previous_response_id(loom) -> None:
    client = loom.openai(ACME_KEY)
    loom.wire.script(
        weather_call(), openai_text("Sunny in Paris."), openai_text("You asked twice.")
    )
    first = client.responses.create(model="gpt-test", input="Weather?", tools=[WEATHER])
    second = client.responses.create(
        model="gpt-test",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": "call_w1", "output": "sunny"}],
        tools=[WEATHER],
    )
    assert second.output_text == "Sunny in Paris."
    sent = loom.wire.requests[1].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    third = client.responses.create(
        model="gpt-test", previous_response_id=second.id, input="And again?"
    )
    assert third.output_text == "You asked twice."
    sent = loom.wire.requests[2].body["messages"]
    assert sent[-1] == {"role": "user", "content": "And again?"}
    assert any(m.get("content") == "Sunny in Paris." for m in sent)
    # All three turns are one session: the first response's.
    sessions = {s["id"] for s in loom.service.sessions("acme")}
    assert len(sessions) == 1
    # Each response keeps what it added and the ids before it, not the whole conversation.
    namespace = ("acme", "responses")
    kept = loom.service.store.batch([Get(namespace=namespace, key=third.id)])[0].data
    assert kept["chain"] == [first.id, second.id]
    assert kept["messages"] == [
        {"role": "user", "content": "And again?"},
        {"role": "assistant", "content": "You asked twice."},
    ]
    # A chain with a link gone is refused, not answered from half a conversation.
    loom.service.store.batch([Delete(namespace=namespace, key=first.id)])
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="gpt-test", previous_response_id=third.id, input="Hm?")
    assert "no longer kept" in caught.value.message
    assert len(loom.wire.requests) == 3


def test_responses_unknown_previous_response_is_refused(loom) -> None:
    client = loom.openai(ACME_KEY)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="gpt-test", previous_response_id="resp_nope", input="Hi")
    assert "previous response 'resp_nope'" in caught.value.message
    assert caught.value.body["code"] == "previous_response_not_found"  # type: ignore[index]
    # Another tenant's response is not this tenant's.
    loom.wire.script(openai_text("Hi"))
    first = client.responses.create(model="gpt-test", input="Hi")
    with pytest.raises(openai.BadRequestError):
        loom.openai(GLOBEX_KEY).responses.create(
            model="gpt-test", previous_response_id=first.id, input="Hi"
        )
    # One made with `store: false` is not kept.
    loom.wire.script(openai_text("Hi"))
    unstored = client.responses.create(model="gpt-test", input="Hi", store=False)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="gpt-test", previous_response_id=unstored.id, input="Hi")
    assert len(loom.wire.requests) == 2


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"tools": [{"type": "web_search"}]}, "web_search"),
        ({"background": True}, "`background`"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "item_reference"),
        # A result without its call: refused by the pipeline, named as `input`'s.
        ({"input": [{"type": "function_call_output", "call_id": "c9", "output": "x"}]}, "c9"),
    ],
)
def test_responses_unsupported_is_refused_before_anything(loom, fields, named) -> None:
    body = {"model": "gpt-test", "input": "Hi", **fields}
    status, answer, _ = call("POST", f"{loom.v1}/responses", key=ACME_KEY, body=body)
    assert status == 400
    assert named in answer["error"]["message"]
    assert answer["error"]["param"] in {"tools", "background", "input"}
    assert loom.wire.requests == []
    assert loom.service.sessions("acme") == []


# --- the Messages API ---------------------------------------------------------------------


def test_messages_plain_on_an_openai_model(loom, anthropic_client) -> None:
    loom.wire.script(openai_text("Hello", " there", usage=(11, 3), cached=4))
    raw = anthropic_client(loom).messages.with_raw_response.create(
        model="gpt-test",
        max_tokens=100,
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "Hi"}],
        extra_headers={"X-Loom-Session": "m1"},
    )
    message = raw.parse()
    assert message.content[0].type == "text"
    assert message.content[0].text == "Hello there"
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 7
    assert message.usage.cache_read_input_tokens == 4
    assert raw.headers["x-loom-session"] == "m1"
    assert raw.headers["x-loom-report"]
    sent = loom.wire.requests[0].body
    assert sent["max_tokens"] == 100
    assert sent["messages"][0] == {"role": "system", "content": "You work for ACME.\n\nBe brief."}


def test_messages_stream_with_tools_round_trip_on_anthropic(loom, anthropic_client) -> None:
    client = anthropic_client(loom)
    loom.wire.script(
        anthropic_sse(
            anthropic_message_start(input_tokens=40),
            anthropic_tool_block(0, "toolu_1", "get_weather", '{"city": ', '"Paris"}'),
            anthropic_end("tool_use", output_tokens=12),
        ),
        anthropic_text("Sunny", " in Paris."),
    )
    question = {"role": "user", "content": "Weather in Paris?"}
    with client.messages.stream(
        model="claude-test",
        max_tokens=200,
        messages=[question],
        tools=[WEATHER_ANTHROPIC],
        extra_headers={"X-Loom-Session": "m2"},
    ) as stream:
        kinds = [event.type for event in stream]
        first = stream.get_final_message()
    assert "input_json" in kinds
    assert first.stop_reason == "tool_use"
    [use] = first.content
    assert use.type == "tool_use"
    assert use.id == "toolu_1"
    assert use.input == {"city": "Paris"}
    with client.messages.stream(
        model="claude-test",
        max_tokens=200,
        messages=[
            question,
            {"role": "assistant", "content": [use.model_dump()]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}],
            },
        ],
        tools=[WEATHER_ANTHROPIC],
        extra_headers={"X-Loom-Session": "m2"},
    ) as stream:
        text = "".join(stream.text_stream)
        second = stream.get_final_message()
    assert text == "Sunny in Paris."
    assert second.stop_reason == "end_turn"
    sent = loom.wire.requests[1].body
    assert sent["tools"][0]["name"] == "get_weather"
    assert sent["messages"][-1]["content"][0]["type"] == "tool_result"
    assert sent["messages"][-2]["content"][-1]["type"] == "tool_use"


def test_messages_create_with_tools_on_an_openai_model(loom, anthropic_client) -> None:
    loom.wire.script(weather_call("call_9"))
    message = anthropic_client(loom).messages.create(
        model="gpt-test",
        max_tokens=100,
        messages=[{"role": "user", "content": "Weather?"}],
        tools=[WEATHER_ANTHROPIC],
        tool_choice={"type": "any"},
    )
    assert message.stop_reason == "tool_use"
    [use] = message.content
    assert use.type == "tool_use"
    assert use.input == {"city": "Paris"}
    sent = loom.wire.requests[0].body
    assert sent["tool_choice"] == "required"
    assert sent["tools"][0]["function"]["name"] == "get_weather"


def test_messages_errors_in_anthropics_shape(loom, anthropic_client) -> None:
    with pytest.raises(anthropic.AuthenticationError):
        anthropic_client(loom, key="sk-wrong").messages.create(
            model="gpt-test", max_tokens=10, messages=[{"role": "user", "content": "Hi"}]
        )
    with pytest.raises(anthropic.NotFoundError) as missing:
        anthropic_client(loom).messages.create(
            model="nope", max_tokens=10, messages=[{"role": "user", "content": "Hi"}]
        )
    assert missing.value.body["type"] == "error"  # type: ignore[index]
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    body = {
        "model": "gpt-test",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "Hi"}],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }
    status, answer, _ = call(
        "POST", f"{loom.v1}/messages", body=body, headers={"x-api-key": ACME_KEY}
    )
    assert status == 400
    assert answer["type"] == "error"
    assert "`thinking`" in answer["error"]["message"]
    body.pop("thinking")
    body["tools"] = [{"type": "web_search_20250305", "name": "web_search"}]
    status, answer, _ = call(
        "POST", f"{loom.v1}/messages", body=body, headers={"x-api-key": ACME_KEY}
    )
    assert status == 400
    assert "web_search_20250305" in answer["error"]["message"]
    assert loom.wire.requests == []


def _cut_stream() -> object:
    """A text chunk, then one Loom cannot read: the stream ends on an error."""
    return openai_sse([openai_chunk({"role": "assistant", "content": "Hel"}), {"choices": 7}])


def test_responses_stream_cut_by_the_upstream_ends_on_an_error_event(loom) -> None:
    loom.wire.script(_cut_stream())
    stream = loom.openai(ACME_KEY).responses.create(model="gpt-test", input="Hi", stream=True)
    events = list(stream)
    assert events[-1].type == "error"
    assert "`choices` is a number, not list" in events[-1].message
    assert "response.completed" not in [e.type for e in events]
    assert [e.delta for e in events if e.type == "response.output_text.delta"] == ["Hel"]


def test_messages_stream_cut_by_the_upstream_raises_in_the_client(loom, anthropic_client) -> None:
    loom.wire.script(_cut_stream())
    got: list[str] = []
    with (
        pytest.raises(anthropic.APIStatusError) as raised,
        anthropic_client(loom).messages.stream(
            model="gpt-test", max_tokens=10, messages=[{"role": "user", "content": "Hi"}]
        ) as stream,
    ):
        got.extend(stream.text_stream)
    assert got == ["Hel"]
    assert "`choices` is a number, not list" in str(raised.value)


def test_bad_store_is_refused(loom) -> None:
    body = {"model": "gpt-test", "input": "Hi", "store": "yes"}
    status, answer, _ = call("POST", f"{loom.v1}/responses", key=ACME_KEY, body=body)
    assert status == 400
    assert answer["error"]["param"] == "store"


def test_messages_text_then_a_tool_call_are_two_blocks(loom, anthropic_client) -> None:
    loom.wire.script(
        anthropic_sse(
            anthropic_message_start(input_tokens=40),
            anthropic_text_block(0, "Let me ", "look."),
            anthropic_tool_block(1, "toolu_2", "get_weather", '{"city": "Oslo"}'),
            anthropic_end("tool_use", output_tokens=12),
        )
    )
    with anthropic_client(loom).messages.stream(
        model="claude-test",
        max_tokens=200,
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=[WEATHER_ANTHROPIC],
    ) as stream:
        starts = [e.index for e in stream if e.type == "content_block_start"]
        final = stream.get_final_message()
    assert starts == [0, 1]
    assert [block.type for block in final.content] == ["text", "tool_use"]
    assert final.content[0].text == "Let me look."  # type: ignore[union-attr]
    assert final.content[1].input == {"city": "Oslo"}  # type: ignore[union-attr]


def test_previous_response_of_another_session_than_named_is_refused(loom) -> None:
    client = loom.openai(ACME_KEY)
    loom.wire.script(openai_text("Hi"))
    first = client.responses.create(
        model="gpt-test", input="Hi", extra_headers={"X-Loom-Session": "one"}
    )
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model="gpt-test",
            previous_response_id=first.id,
            input="Again",
            extra_headers={"X-Loom-Session": "two"},
        )
    assert "belongs to session 'one'" in caught.value.message
    assert len(loom.wire.requests) == 1

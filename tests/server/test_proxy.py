"""The OpenAI-compatible proxy, driven by the official `openai` client over real HTTP, through
Loom, to a local upstream speaking OpenAI's (or Anthropic's) wire protocol."""

from __future__ import annotations

import json
import logging

import openai
import pytest

from loomctx.tokens import TiktokenCounter
from tests.agent._servers import (
    anthropic_end,
    anthropic_message_start,
    anthropic_sse,
    anthropic_text,
    anthropic_tool_block,
    openai_chunk,
    openai_error,
    openai_sse,
    openai_text,
    openai_tool_delta,
)
from tests.server._http import call
from tests.server.conftest import ACME_KEY, UPSTREAM_KEY

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city now.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city"}},
            "required": ["city"],
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The local time in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def client(loom, key: str = ACME_KEY) -> openai.OpenAI:
    return loom.openai(key)


def test_a_reply_and_its_report(loom) -> None:
    loom.wire.script(openai_text("Hello", " there"))
    raw = client(loom).chat.completions.with_raw_response.create(
        model="gpt-test",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        extra_headers={"X-Loom-Session": "s1"},
    )
    done = raw.parse()
    assert done.choices[0].message.content == "Hello there"
    assert done.usage is not None
    assert done.usage.prompt_tokens == 11
    assert raw.headers["x-loom-session"] == "s1"
    sent = loom.wire.requests[0]
    # The window: the tenant's instructions before the client's, the user's turn.
    assert sent.body["model"] == "gpt-upstream"
    assert sent.body["messages"] == [
        {"role": "system", "content": "You work for ACME.\n\nBe brief."},
        {"role": "user", "content": "Hi"},
    ]
    assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    status, report, _ = call(
        "GET", f"{loom.v1}/reports/{raw.headers['x-loom-report']}", key=ACME_KEY
    )
    assert status == 200
    assert report["session"] == "s1"
    assert report["model"] == "gpt-test"
    assert report["report"]["token_count"] > 0
    assert report["report"]["window"] == 2000
    # The reply is in the session's memory, after the user's message.
    status, info, _ = call("GET", f"{loom.v1}/sessions/s1", key=ACME_KEY)
    assert status == 200
    assert [t["parameters"]["content"] for t in info["l1"]] == ["Hi", "Hello there"]
    assert info["reports"] == [raw.headers["x-loom-report"]]


def test_streaming_and_what_is_new(loom) -> None:
    loom.wire.script(openai_text("One"), openai_text("Two", " more"))
    c = client(loom)
    history = [{"role": "user", "content": "first question"}]
    first = c.chat.completions.create(model="gpt-test", messages=history, stream=True, user="u1")
    chunks = list(first)
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == "One"
    history += [{"role": "assistant", "content": "One"}, {"role": "user", "content": "second"}]
    second = c.chat.completions.create(model="gpt-test", messages=history, stream=True, user="u1")
    assert "".join(ch.choices[0].delta.content or "" for ch in second if ch.choices) == "Two more"
    # The client re-sent its history: each message is recorded once.
    memory = loom.service.memory("acme", "u1")
    texts = [t.parameters["content"] for t in memory.get_l1_tasks(limit=50)]
    assert texts == ["first question", "One", "second", "Two more"]
    assert loom.wire.requests[1].body["messages"][-1] == {"role": "user", "content": "second"}
    # A client that trims its history is still served; only its last turn is new.
    loom.wire.script(openai_text("Three"))
    trimmed = [{"role": "user", "content": "third"}]
    c.chat.completions.create(model="gpt-test", messages=trimmed, user="u1")
    memory = loom.service.memory("acme", "u1")
    texts = [t.parameters["content"] for t in memory.get_l1_tasks(limit=50)]
    assert texts == ["first question", "One", "second", "Two more", "third", "Three"]


def test_tool_calls_over_several_requests(loom) -> None:
    c = client(loom)
    loom.wire.script(
        openai_sse(
            [
                openai_chunk({"role": "assistant", "content": ""}),
                openai_chunk(
                    openai_tool_delta(0, id="call_w1", name="get_weather", arguments='{"ci')
                ),
                openai_chunk(openai_tool_delta(0, arguments='ty": "Paris"}')),
                openai_chunk({}, finish_reason="tool_calls"),
            ]
        ),
        openai_text("It is sunny in Paris."),
        openai_text("You asked about Paris."),
    )
    messages: list[dict] = [{"role": "user", "content": "Weather in Paris?"}]
    stream = c.chat.completions.create(
        model="gpt-test", messages=messages, tools=[WEATHER, CLOCK], stream=True, user="tools"
    )
    calls: dict[int, dict] = {}
    for chunk in stream:
        for delta in chunk.choices[0].delta.tool_calls or () if chunk.choices else ():
            slot = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            slot["id"] += delta.id or ""
            slot["name"] += (delta.function.name or "") if delta.function else ""
            slot["arguments"] += (delta.function.arguments or "") if delta.function else ""
    # The call comes back as the model streamed it; the client's tools went up whole.
    assert calls == {0: {"id": "call_w1", "name": "get_weather", "arguments": '{"city": "Paris"}'}}
    assert loom.wire.requests[0].body["tools"] == [WEATHER, CLOCK]
    # The client runs its tool and sends the result with its whole history.
    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_w1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_w1", "content": "sunny, 24C"},
    ]
    done = c.chat.completions.create(
        model="gpt-test", messages=messages, tools=[WEATHER, CLOCK], user="tools"
    )
    assert done.choices[0].message.content == "It is sunny in Paris."
    sent = loom.wire.requests[1].body["messages"]
    # The turn's exchange ends the window (arguments re-serialized, the same JSON value).
    assert sent[-3]["content"] == "Weather in Paris?"
    (sent_call,) = sent[-2]["tool_calls"]
    assert (sent_call["id"], sent_call["function"]["name"]) == ("call_w1", "get_weather")
    assert json.loads(sent_call["function"]["arguments"]) == {"city": "Paris"}
    assert sent[-1] == {"role": "tool", "tool_call_id": "call_w1", "content": "sunny, 24C"}
    # A new turn: the finished exchange is history now, read from memory.
    messages += [
        {"role": "assistant", "content": "It is sunny in Paris."},
        {"role": "user", "content": "Which city did I ask about?"},
    ]
    c.chat.completions.create(model="gpt-test", messages=messages, tools=[WEATHER], user="tools")
    sent = loom.wire.requests[2].body["messages"]
    roles = [m["role"] for m in sent]
    assert roles[-1] == "user"
    assert sent[-1]["content"].endswith("Which city did I ask about?")
    assert any(m.get("tool_call_id") == "call_w1" for m in sent)
    assert {"role": "assistant", "content": "It is sunny in Paris."} in sent
    assert loom.wire.requests[2].body["tools"] == [WEATHER]
    tasks = loom.service.memory("acme", "tools").get_l1_tasks(limit=50)
    assert [t.action for t in tasks] == [
        "user_message",
        "get_weather",
        "assistant_message",
        "user_message",
        "assistant_message",
    ]


@pytest.mark.slow
def test_a_long_conversation_stays_within_budget(loom) -> None:
    """500 turns, the client sending its whole history every time: every forwarded request
    fits the model's window less the output reserve, and the cost per turn stays flat."""
    turns = 500
    loom.wire.script(
        *(openai_text(f"Noted fact {i}: the answer is {i * 7}.") for i in range(turns))
    )
    c = client(loom)
    counter = TiktokenCounter()
    messages: list[dict] = [{"role": "system", "content": "Remember the user's facts."}]
    for i in range(turns):
        messages.append(
            {
                "role": "user",
                "content": f"Fact {i}: my locker number {i} holds item {i * 13}. "
                "Please remember it for later, together with the others.",
            }
        )
        reply = c.chat.completions.create(model="gpt-test", messages=messages, user="long")
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    budget = 2000 - int(2000 * 0.2)
    sizes = []
    for request in loom.wire.requests:
        from loomctx.messages import from_openai

        sizes.append(counter.count_messages(from_openai(request.body["messages"])))
    assert len(sizes) == turns
    assert max(sizes) <= budget
    # Flat: the last 100 requests cost what requests 50-150 did (within 25%), while the
    # history the client sends grows fivefold between them.
    early, late = sum(sizes[50:150]) / 100, sum(sizes[-100:]) / 100
    assert 0.75 * early <= late <= 1.25 * early, (early, late)
    whole = counter.count_messages(from_openai(messages))
    assert whole > 10 * budget  # the client's history is far larger than what was sent
    last = loom.wire.requests[-1].body["messages"]
    assert last[0]["content"].endswith("Remember the user's facts.")
    assert "Fact 499" in last[-1]["content"]
    state = loom.service.proxy_state("acme", "long")
    assert state["count"] == 2 * turns  # every message recorded once


def test_anthropic_upstream(loom) -> None:
    loom.wire.script(
        anthropic_text("Bonjour", "!"),
        anthropic_sse(
            anthropic_message_start(),
            anthropic_tool_block(0, "toolu_1", "get_weather", '{"city":', ' "Lyon"}'),
            anthropic_end("tool_use"),
        ),
    )
    c = client(loom)
    stream = c.chat.completions.create(
        model="claude-test",
        messages=[
            {"role": "system", "content": "Speak French."},
            {"role": "user", "content": "Hi"},
        ],
        stream=True,
        user="claude",
    )
    chunks = list(stream)
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == "Bonjour!"
    sent = loom.wire.requests[0]
    assert sent.path.endswith("/v1/messages")
    assert sent.body["model"] == "claude-upstream"
    system = sent.body["system"]
    assert "Speak French." in json.dumps(system)
    assert sent.body["messages"][-1]["role"] == "user"
    done = c.chat.completions.create(
        model="claude-test",
        messages=[
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Bonjour!"},
            {"role": "user", "content": "Weather in Lyon?"},
        ],
        tools=[WEATHER],
        user="claude",
    )
    call_ = done.choices[0].message.tool_calls[0]
    assert (call_.id, call_.function.name, json.loads(call_.function.arguments)) == (
        "toolu_1",
        "get_weather",
        {"city": "Lyon"},
    )
    assert done.choices[0].finish_reason == "tool_calls"
    assert loom.wire.requests[1].body["tools"][0]["name"] == "get_weather"


def test_models_and_health(loom) -> None:
    listed = client(loom).models.list()
    assert sorted(m.id for m in listed.data) == ["claude-test", "gpt-test"]
    assert call("GET", f"{loom.url}/healthz")[:2] == (200, {"status": "ok"})
    assert call("GET", f"{loom.url}/readyz")[:2] == (200, {"status": "ready"})
    status, spec, _ = call("GET", f"{loom.url}/openapi.json")
    assert status == 200
    assert "/v1/reports/{report_id}" in spec["paths"]
    assert {"/v1/chat/completions", "/v1/responses", "/v1/messages"} <= set(spec["paths"])


def test_upstream_errors_keep_their_status(loom, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="loomctx.server")
    loom.wire.script(openai_error(429, "slow down", type="rate_limit_exceeded"))
    with pytest.raises(openai.RateLimitError) as err:
        client(loom).chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "hi"}], user="e"
        )
    assert "slow down" in str(err.value)
    # The upstream key is used, and never logged or returned.
    assert loom.wire.requests[0].headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert UPSTREAM_KEY not in caplog.text
    assert ACME_KEY not in caplog.text
    (line,) = [r.loom for r in caplog.records if hasattr(r, "loom")]
    assert line["status"] == 429
    assert line["tenant"] == "acme"
    assert line["session"] == "e"
    assert line["loom_ms"] > 0


def test_a_turn_larger_than_the_window_is_refused_not_passed_through(loom_factory) -> None:
    """A user turn larger than the whole window: no window can hold it, so it is refused
    with a 400 (passthrough on or off), never sent upstream without the tenant's policy."""
    huge = "word " * 3000
    for loom in (loom_factory(), loom_factory(passthrough=False)):
        with pytest.raises(openai.BadRequestError) as err:
            client(loom).chat.completions.create(
                model="gpt-test", messages=[{"role": "user", "content": huge}], user="big"
            )
        assert err.value.code == "context_length_exceeded"
        assert loom.wire.requests == []


def test_passthrough_when_the_store_fails(loom) -> None:
    """The store goes away: requests still reach the model, as sent after the tenant's
    instructions; the server says it is not ready; nothing is recorded of the answer."""
    loom.wire.script(openai_text("still here"))
    loom.service.store.close()
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello?"}]
    raw = client(loom).chat.completions.with_raw_response.create(
        model="gpt-test", messages=messages, user="down", stream=False
    )
    assert raw.parse().choices[0].message.content == "still here"
    assert raw.headers["x-loom-passthrough"] == "true"
    instructions = {"role": "system", "content": "You work for ACME."}
    assert loom.wire.requests[0].body["messages"] == [instructions, *messages]
    status, body, _ = call("GET", f"{loom.url}/readyz")
    assert status == 503
    assert body == {"status": "unavailable", "store": "StoreClosedError"}
    loom.wire.script(anthropic_text("anthropic too"))
    done = client(loom).chat.completions.create(
        model="claude-test", messages=messages, user="down", tools=[WEATHER]
    )
    assert done.choices[0].message.content == "anthropic too"
    sent = loom.wire.requests[1].body
    assert "You work for ACME." in json.dumps(sent["system"])
    assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hello?"}]}]
    assert sent["tools"][0]["name"] == "get_weather"


def test_claude_windows_keep_the_calibrated_margin(loom) -> None:
    """Claude is counted with o200k, an estimate: the proxy builds within the part of the
    model's window that the upstream's calibration deems safe (the prior's 1.25 before any
    call), and the margin follows what Anthropic reports."""
    from loomctx.context.budget import BudgetManager

    # Anthropic reports far more input tokens than Loom counted: the margin must grow.
    loom.wire.script(anthropic_text("Oui", input_tokens=900), anthropic_text("Encore"))
    c = client(loom)

    def available(text: str) -> int:
        raw = c.chat.completions.with_raw_response.create(
            model="claude-test", messages=[{"role": "user", "content": text}], user="margin"
        )
        _, report, _ = call(
            "GET", f"{loom.v1}/reports/{raw.headers['x-loom-report']}", key=ACME_KEY
        )
        return int(report["report"]["available"])

    first = available("Bonjour")
    assert first == BudgetManager.available(1600, output_reserve_ratio=0.2)[0]  # 2,000 / 1.25
    second = available("Encore?")
    assert second < first
    # An OpenAI model is counted with its own tokenizer: its whole window.
    loom.wire.script(openai_text("Yes"))
    raw = c.chat.completions.with_raw_response.create(
        model="gpt-test", messages=[{"role": "user", "content": "Hi"}], user="margin-gpt"
    )
    _, report, _ = call("GET", f"{loom.v1}/reports/{raw.headers['x-loom-report']}", key=ACME_KEY)
    assert (
        report["report"]["available"] == BudgetManager.available(2000, output_reserve_ratio=0.2)[0]
    )

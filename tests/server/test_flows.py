"""What the proxy and the REST API do for a client over several requests: knowledge bases in
the window (the tenant's own only), an Anthropic tool round trip, the REST routes that change
memory, and the session id the server makes when the client names none."""

from __future__ import annotations

import json

from tests.agent._servers import (
    anthropic_end,
    anthropic_message_start,
    anthropic_sse,
    anthropic_text,
    anthropic_tool_block,
    openai_text,
)
from tests.server._http import call
from tests.server.conftest import ACME_KEY, GLOBEX_KEY

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city now.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
LUNCH = "The ACME canteen serves lunch at 12:15 sharp."


def test_a_tenants_knowledge_reaches_its_windows_only(loom) -> None:
    status, _, _ = call(
        "POST",
        f"{loom.v1}/knowledge/handbook/documents",
        key=ACME_KEY,
        body={"text": LUNCH, "id": "canteen"},
    )
    assert status == 201
    question = [{"role": "user", "content": "When does the canteen serve lunch?"}]
    loom.wire.script(openai_text("At 12:15."), openai_text("I do not know."))
    loom.openai(ACME_KEY).chat.completions.create(model="gpt-test", messages=question, user="k1")
    loom.openai(GLOBEX_KEY).chat.completions.create(model="gpt-test", messages=question, user="k2")
    acme, globex = (json.dumps(r.body["messages"]) for r in loom.wire.requests)
    # In acme's window, as fenced reference data before the question; globex's knowledge base
    # of the same name is its own (empty), so nothing of acme's reaches its window.
    assert LUNCH in acme
    assert loom.wire.requests[0].body["messages"][-1]["content"] == question[0]["content"]
    assert "<context" in acme
    assert LUNCH not in globex
    assert "canteen" not in globex.replace(question[0]["content"], "")


def test_anthropic_tool_call_result_and_answer(loom) -> None:
    loom.wire.script(
        anthropic_sse(
            anthropic_message_start(),
            anthropic_tool_block(0, "toolu_7", "get_weather", '{"city": "Lyon"}'),
            anthropic_end("tool_use"),
        ),
        anthropic_text("Rain in Lyon, 12C."),
        anthropic_text("You asked about Lyon."),
    )
    c = loom.openai(ACME_KEY)
    messages: list[dict] = [{"role": "user", "content": "Weather in Lyon?"}]
    first = c.chat.completions.create(
        model="claude-test", messages=messages, tools=[WEATHER], user="lyon"
    )
    (tool_call,) = first.choices[0].message.tool_calls
    assert first.choices[0].finish_reason == "tool_calls"
    assert (tool_call.id, tool_call.function.name) == ("toolu_7", "get_weather")
    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": tool_call.id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": tool_call.function.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_7", "content": "rain, 12C"},
    ]
    answer = c.chat.completions.create(
        model="claude-test", messages=messages, tools=[WEATHER], user="lyon"
    )
    assert answer.choices[0].message.content == "Rain in Lyon, 12C."
    # Anthropic got the exchange in its own shape: tool_use, then its tool_result.
    sent = loom.wire.requests[1].body["messages"]
    use = [b for b in sent[-2]["content"] if b["type"] == "tool_use"]
    assert (use[0]["id"], use[0]["name"], use[0]["input"]) == (
        "toolu_7",
        "get_weather",
        {"city": "Lyon"},
    )
    (result,) = [b for b in sent[-1]["content"] if b["type"] == "tool_result"]
    assert result["tool_use_id"] == "toolu_7"
    assert "rain, 12C" in json.dumps(result["content"])
    # The next turn has the finished exchange as history, read from memory.
    messages += [
        {"role": "assistant", "content": "Rain in Lyon, 12C."},
        {"role": "user", "content": "Which city was that?"},
    ]
    c.chat.completions.create(model="claude-test", messages=messages, tools=[WEATHER], user="lyon")
    third = json.dumps(loom.wire.requests[2].body["messages"])
    assert "toolu_7" in third
    assert "Rain in Lyon, 12C." in third
    tasks = loom.service.memory("acme", "lyon").get_l1_tasks(limit=20)
    assert [t.action for t in tasks] == [
        "user_message",
        "get_weather",
        "assistant_message",
        "user_message",
        "assistant_message",
    ]


def test_rest_remember_forget_and_list(loom) -> None:
    status, made, _ = call(
        "POST",
        f"{loom.v1}/sessions/notes/memory",
        key=ACME_KEY,
        body={"content": "Ada prefers the aisle seat."},
    )
    assert status == 201
    task_id = made["task_id"]
    status, hits, _ = call("GET", f"{loom.v1}/sessions/notes/memory?q=aisle+seat", key=ACME_KEY)
    assert status == 200
    assert hits["data"][0]["task_id"] == task_id
    # A proxied session too; the list has both, most recent first, with what the proxy knows.
    loom.wire.script(openai_text("Hello."))
    loom.openai(ACME_KEY).chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "Hi"}], user="chat"
    )
    assert loom.service  # once the reply is recorded (after the client has it)
    status, listed, _ = call("GET", f"{loom.v1}/sessions", key=ACME_KEY)
    assert status == 200
    by_id = {s["id"]: s for s in listed["data"]}
    assert [s["id"] for s in listed["data"]] == ["chat", "notes"]
    assert by_id["chat"]["model"] == "gpt-test"
    assert by_id["chat"]["requests"] == 1
    assert by_id["chat"]["messages"] == 2  # the user's message and the recorded reply
    assert by_id["notes"]["requests"] == 0
    assert call("GET", f"{loom.v1}/sessions", key=GLOBEX_KEY)[1]["data"] == []
    status, gone, _ = call("DELETE", f"{loom.v1}/sessions/notes/memory/{task_id}", key=ACME_KEY)
    assert (status, gone) == (200, {"forgotten": True})
    status, hits, _ = call("GET", f"{loom.v1}/sessions/notes/memory?q=aisle+seat", key=ACME_KEY)
    assert all(h["task_id"] != task_id for h in hits["data"])
    assert call("DELETE", f"{loom.v1}/sessions/notes/memory/{task_id}", key=ACME_KEY)[0] == 404


def test_a_session_without_an_id_is_made_and_named(loom) -> None:
    loom.wire.script(openai_text("One."), openai_text("Two."))
    c = loom.openai(ACME_KEY)
    messages: list[dict] = [{"role": "user", "content": "Count with me."}]
    raw = c.chat.completions.with_raw_response.create(model="gpt-test", messages=messages)
    made = raw.headers["x-loom-session"]
    assert made.startswith("s_")
    assert len(made) == 34
    # The client learns the id from the header, and continues the session with it.
    messages += [{"role": "assistant", "content": "One."}, {"role": "user", "content": "Next?"}]
    again = c.chat.completions.with_raw_response.create(
        model="gpt-test", messages=messages, extra_headers={"X-Loom-Session": made}
    )
    assert again.headers["x-loom-session"] == made
    status, info, _ = call("GET", f"{loom.v1}/sessions/{made}", key=ACME_KEY)
    assert status == 200
    assert info["requests"] == 2
    assert [t["action"] for t in info["l1"]] == [
        "user_message",
        "assistant_message",
        "user_message",
        "assistant_message",
    ]
    # Two requests without an id are two sessions.
    loom.wire.script(openai_text("Three."))
    other = c.chat.completions.with_raw_response.create(
        model="gpt-test", messages=[{"role": "user", "content": "Hi"}]
    )
    assert other.headers["x-loom-session"] not in (made, None)

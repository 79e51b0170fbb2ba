"""`POST /v1/messages` and prompt caching: the client's own ``cache_control`` marks carried to
the window Loom sends, and the cache's reads and writes reported as the upstream said, driven
by the official `anthropic` SDK over real HTTP, through Loom, to a recording upstream."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from tests.agent._servers import (
    anthropic_end,
    anthropic_message_start,
    anthropic_sse,
    anthropic_text,
    anthropic_text_block,
    openai_text,
)
from tests.server._http import call
from tests.server.conftest import ACME_KEY

HOUR = {"type": "ephemeral", "ttl": "1h"}
FIVE = {"type": "ephemeral"}
LOOKUP = {
    "name": "lookup",
    "description": "Look a word up.",
    "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}},
}


@pytest.fixture
def client(loom_factory) -> Iterator[tuple[Any, anthropic.Anthropic]]:  # type: ignore[no-untyped-def]
    loom = loom_factory(window=12000)  # a Claude window keeps a margin for its estimate
    made = anthropic.Anthropic(base_url=loom.url, api_key=ACME_KEY, max_retries=0)
    yield loom, made
    made.close()


def marked_blocks(sent: dict[str, Any]) -> list[tuple[str, Any]]:
    """Where the upstream got a ``cache_control``: (place, its value), in prompt order."""
    out = [
        (f"tool {t['name']}", t["cache_control"])
        for t in sent.get("tools", ())
        if "cache_control" in t
    ]
    system = sent.get("system")
    if isinstance(system, list):
        out += [("system", b["cache_control"]) for b in system if "cache_control" in b]
    for message in sent["messages"]:
        for block in message["content"]:
            if "cache_control" in block:
                text = block.get("text") or block.get("content") or block.get("type")
                out.append((f"{message['role']}: {text}", block["cache_control"]))
    return out


def test_the_clients_marks_reach_the_upstream_where_it_put_them(client) -> None:
    loom, anth = client
    loom.wire.script(anthropic_text("Noted."))
    raw = anth.messages.with_raw_response.create(
        model="claude-test",
        max_tokens=100,
        system=[{"type": "text", "text": "You are a glossary.", "cache_control": HOUR}],
        tools=[{**LOOKUP, "cache_control": HOUR}],
        messages=[
            {"role": "user", "content": "Define loom."},
            {"role": "assistant", "content": "A frame for weaving."},
            {
                "role": "user",
                "content": [{"type": "text", "text": "And warp?", "cache_control": FIVE}],
            },
        ],
        extra_headers={"X-Loom-Session": "marks-1"},
    )
    assert raw.parse().content[0].text == "Noted."
    assert raw.headers["X-Loom-Cache-Marks"] == "kept=3, left_out=0, not_sent=0"
    sent = loom.wire.requests[0].body
    marks = marked_blocks(sent)
    assert marks[:2] == [("tool lookup", HOUR), ("system", HOUR)]
    assert ("user: And warp?", FIVE) in marks
    assert len(marks) <= 4  # Loom's own breakpoints fill what is left of Anthropic's four
    # The system prompt is Loom's: the tenant's instructions, then the client's.
    assert sent["system"][0]["text"] == "You work for ACME.\n\nYou are a glossary."


def test_loom_s_own_breakpoints_before_a_one_hour_mark_take_its_ttl(client) -> None:
    loom, anth = client
    loom.wire.script(anthropic_text("Yes."))
    anth.messages.create(
        model="claude-test",
        max_tokens=100,
        system="Be brief.",  # unmarked: Loom marks it itself
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": HOUR}]}
        ],
    )
    marks = marked_blocks(loom.wire.requests[0].body)
    assert marks[0] == ("system", HOUR)  # Anthropic refuses a 5m breakpoint before a 1h one
    assert ("user: Hi", HOUR) in marks


def test_a_mark_on_a_message_the_window_left_out_is_reported_not_refused(loom_factory) -> None:
    loom = loom_factory(window=3000)
    loom.wire.script(anthropic_text("Fine."))
    old = "The first thing I said, which was long. " * 40
    history: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": old, "cache_control": FIVE}]},
        {"role": "assistant", "content": "Understood."},
    ]
    for i in range(30):
        history += [
            {"role": "user", "content": f"Step {i}: " + "more words here " * 12},
            {"role": "assistant", "content": f"Done with step {i}."},
        ]
    history.append({"role": "user", "content": "What next?"})
    with anthropic.Anthropic(base_url=loom.url, api_key=ACME_KEY, max_retries=0) as anth:
        raw = anth.messages.with_raw_response.create(
            model="claude-test", max_tokens=100, messages=history
        )
    assert raw.parse().content[0].text == "Fine."
    assert raw.headers["X-Loom-Cache-Marks"] == "kept=0, left_out=1, not_sent=0"
    sent = loom.wire.requests[0].body
    texts = [b.get("text", "") for m in sent["messages"] for b in m["content"]]
    assert old not in texts  # the marked message is not in the window...
    assert all(control == FIVE for _, control in marked_blocks(sent))  # ...Loom's marks are


def test_marks_are_not_sent_to_an_openai_upstream_and_the_header_says_so(client) -> None:
    loom, anth = client
    loom.wire.script(openai_text("Hello."))
    raw = anth.messages.with_raw_response.create(
        model="gpt-test",
        max_tokens=50,
        system=[{"type": "text", "text": "Be kind.", "cache_control": FIVE}],
        messages=[{"role": "user", "content": "Hi"}],
    )
    assert raw.parse().content[0].text == "Hello."
    assert raw.headers["X-Loom-Cache-Marks"] == "kept=0, left_out=0, not_sent=1"
    assert "cache_control" not in str(loom.wire.requests[0].body)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"cache_control": {"type": "persistent"}}, "messages[0].content[0].cache_control"),
        ({"cache_control": {"type": "ephemeral", "ttl": "2h"}}, '"5m" or "1h"'),
    ],
)
def test_a_malformed_mark_is_a_400_before_anything(client, change, named) -> None:
    loom, _ = client
    body = {
        "model": "claude-test",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi", **change}]}],
    }
    status, answer, _ = call(
        "POST", f"{loom.v1}/messages", body=body, headers={"x-api-key": ACME_KEY}
    )
    assert status == 400
    assert answer["error"]["type"] == "invalid_request_error"
    assert named in answer["error"]["message"]
    assert loom.wire.requests == []


def test_more_than_four_marks_is_refused_as_anthropic_does(client) -> None:
    loom, anth = client
    block = {"type": "text", "text": "x", "cache_control": FIVE}
    with pytest.raises(anthropic.BadRequestError) as refused:
        anth.messages.create(
            model="claude-test",
            max_tokens=10,
            system=[block, block],
            messages=[{"role": "user", "content": [block, block, block]}],
        )
    assert "5 blocks with `cache_control`" in str(refused.value)
    assert loom.wire.requests == []


# --- usage: the cache's reads and writes ----------------------------------------------------


def cached_reply() -> Any:
    return anthropic_sse(
        anthropic_message_start(input_tokens=40, cache_read=300, cache_creation=1200),
        anthropic_text_block(0, "Cached."),
        anthropic_end("end_turn", output_tokens=5),
    )


@pytest.mark.parametrize("stream", [False, True])
def test_cache_writes_are_reported_as_the_anthropic_upstream_said(client, stream) -> None:
    loom, anth = client
    loom.wire.script(cached_reply())
    request = {
        "model": "claude-test",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "Hi"}],
    }
    if stream:
        with anth.messages.stream(**request) as events:
            message = events.get_final_message()
    else:
        message = anth.messages.create(**request)
    assert message.usage.cache_creation_input_tokens == 1200
    assert message.usage.cache_read_input_tokens == 300
    assert message.usage.input_tokens == 40


def test_an_openai_upstream_writes_no_cache(client) -> None:
    loom, anth = client
    loom.wire.script(openai_text("Hi."))
    message = anth.messages.create(
        model="gpt-test", max_tokens=50, messages=[{"role": "user", "content": "Hi"}]
    )
    assert message.usage.cache_creation_input_tokens == 0


def test_a_model_set_to_the_one_hour_cache_asks_for_it_and_is_billed_so(loom_factory) -> None:
    loom = loom_factory(window=12000, claude={"cache_ttl": "1h"})
    anth = anthropic.Anthropic(base_url=loom.url, api_key=ACME_KEY, max_retries=0)
    loom.clients.append(anth)
    loom.wire.script(anthropic_text("Yes."))
    raw = anth.messages.with_raw_response.create(
        model="claude-test",
        max_tokens=100,
        system="Be brief.",
        messages=[{"role": "user", "content": "Hi"}],
    )
    marks = marked_blocks(loom.wire.requests[0].body)
    assert [control for _, control in marks] == [HOUR] * len(marks) != []
    _, stored, _ = call("GET", f"{loom.v1}/reports/{raw.headers['X-Loom-Report']}", key=ACME_KEY)
    assert stored["report"]["pricing"] == "anthropic-1h"  # its bill predicted at 2x writes


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"provider": "anthropic", "cache_ttl": "2h"}, '`cache_ttl` in .* must be "5m" or "1h"'),
        ({"provider": "openai", "cache_ttl": "1h"}, "is for Anthropic's prompt cache"),
    ],
)
def test_a_bad_cache_ttl_is_refused_naming_the_model(model: dict[str, Any], message: str) -> None:
    from loomctx.errors import ConfigError
    from loomctx.server._config import serve_config_from

    with pytest.raises(ConfigError, match=message):
        serve_config_from({"models": {"m": model}}, store="x.db", embedder="none")

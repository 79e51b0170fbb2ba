"""Images in tool results and audio in user turns, through the proxy's faces, driven by the
official `anthropic` and `openai` SDKs over real HTTP, to a recording upstream.

A tool result's image reaches an Anthropic upstream inside its ``tool_result``; an OpenAI
upstream, whose tool messages carry text only, gets it in a user message right after the
tool results (as agent frameworks send a tool's screenshot). Audio (``input_audio``) reaches
an OpenAI upstream intact, counted by its duration; an Anthropic model refuses it with a 400
before anything is stored."""

from __future__ import annotations

import base64
import io
import wave
from typing import Any

import anthropic
import openai
import pytest

from loomctx.memory.core import TASK
from loomctx.messages import tool_parts_note
from tests.agent._servers import anthropic_text, openai_text
from tests.server.conftest import ACME_KEY
from tests.server.test_bad_input import _records
from tests.server.test_failures import buggy  # noqa: F401  (a fixture)
from tests.server.test_images import png

SHOT = png(640, 400)
LOOK = {
    "name": "screenshot",
    "description": "A screenshot of the app.",
    "input_schema": {"type": "object", "properties": {}},
}


def anthropic_tool_exchange() -> list[dict[str, Any]]:
    """A user turn, the model's call, and a result that holds text and a screenshot."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": SHOT}}
    return [
        {"role": "user", "content": "What does the app show?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "screenshot", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "Taken."}, image],
                }
            ],
        },
    ]


def test_a_tool_results_image_reaches_an_anthropic_upstream_inside_its_result(
    loom_factory,
) -> None:
    loom = loom_factory(window=12000)
    loom.wire.script(anthropic_text("A login form."))
    with anthropic.Anthropic(base_url=loom.url, api_key=ACME_KEY, max_retries=0) as client:
        message = client.messages.create(
            model="claude-test", max_tokens=100, tools=[LOOK], messages=anthropic_tool_exchange()
        )
    assert message.content[0].text == "A login form."
    [last] = loom.wire.requests[0].body["messages"][-1:]
    [result] = last["content"]
    assert result["type"] == "tool_result"
    assert result["tool_use_id"] == "toolu_1"
    blocks = [{k: v for k, v in b.items() if k != "cache_control"} for b in result["content"]]
    assert blocks == [
        {"type": "text", "text": "Taken."},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": SHOT}},
    ]


def test_a_tool_results_image_follows_the_results_for_an_openai_upstream(loom_factory) -> None:
    loom = loom_factory(window=8000)
    loom.wire.script(openai_text("A login form."), openai_text("Yes."))
    with anthropic.Anthropic(base_url=loom.url, api_key=ACME_KEY, max_retries=0) as client:
        exchange = anthropic_tool_exchange()
        client.messages.create(
            model="gpt-test",
            max_tokens=100,
            tools=[LOOK],
            messages=exchange,
            extra_headers={"X-Loom-Session": "shots"},
        )
        sent = loom.wire.requests[0].body["messages"]
        assert sent[-2] == {"role": "tool", "tool_call_id": "toolu_1", "content": "Taken."}
        assert sent[-1] == {
            "role": "user",
            "content": [
                {"type": "text", "text": tool_parts_note("toolu_1")},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{SHOT}"}},
            ],
        }
        # The next call: memory keeps the result with a stand-in for the screenshot.
        client.messages.create(
            model="gpt-test",
            max_tokens=100,
            tools=[LOOK],
            messages=[
                *exchange,
                {"role": "assistant", "content": "A login form."},
                {"role": "user", "content": "Is a password field there?"},
            ],
            extra_headers={"X-Loom-Session": "shots"},
        )
    history = loom.wire.requests[1].body["messages"]
    [result] = [m for m in history if m["role"] == "tool"]
    assert "Taken." in result["content"]
    assert "[image: image/png 640x400]" in result["content"]
    assert history[-1] == {"role": "user", "content": "Is a password field there?"}


@pytest.mark.parametrize(
    ("model", "script"),
    [("claude-test", anthropic_text("A chart.")), ("gpt-test", openai_text("A chart."))],
)
def test_a_responses_function_output_may_hold_an_image(loom_factory, model, script) -> None:
    loom = loom_factory(window=12000)
    loom.wire.script(script)
    reply = loom.openai(ACME_KEY).responses.create(
        model=model,
        tools=[{"type": "function", "name": "plot", "parameters": {"type": "object"}}],
        input=[
            {"role": "user", "content": "Plot the sales."},
            {"type": "function_call", "call_id": "call_p", "name": "plot", "arguments": "{}"},
            {
                "type": "function_call_output",
                "call_id": "call_p",
                "output": [
                    {"type": "input_text", "text": "Plotted."},
                    {"type": "input_image", "image_url": f"data:image/png;base64,{SHOT}"},
                ],
            },
        ],
    )
    assert reply.output_text == "A chart."
    sent = loom.wire.requests[0].body["messages"]
    if model == "claude-test":
        [result] = sent[-1]["content"]
        assert result["content"][1]["source"]["data"] == SHOT
    else:
        assert sent[-2]["role"] == "tool"
        assert sent[-2]["content"] == "Plotted."
        assert sent[-1]["content"][1]["image_url"]["url"].endswith(SHOT)


def wav(seconds: float, rate: int = 4000) -> str:
    """A silent mono 8-bit WAV of `seconds`, base64-encoded."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(1)
        out.setframerate(rate)
        out.writeframes(b"\x80" * int(seconds * rate))
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def audio_turn(seconds: float) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is said here?"},
            {"type": "input_audio", "input_audio": {"data": wav(seconds), "format": "wav"}},
        ],
    }


def test_audio_reaches_an_openai_upstream_intact(loom) -> None:
    loom.wire.script(openai_text("Nothing: it is silent."))
    turn = audio_turn(2.0)
    reply = loom.openai(ACME_KEY).chat.completions.create(
        model="gpt-test", messages=[turn], user="ears"
    )
    assert reply.choices[0].message.content == "Nothing: it is silent."
    assert loom.wire.requests[0].body["messages"][-1] == turn


def test_audio_the_window_cannot_hold_is_refused_with_its_size(loom) -> None:
    """180 s of audio is counted as 1800 tokens: more than the 1600 a 2000-token window
    leaves for input."""
    with pytest.raises(openai.BadRequestError) as err:
        loom.openai(ACME_KEY).chat.completions.create(
            model="gpt-test", messages=[audio_turn(180.0)], user="long"
        )
    assert err.value.code == "context_length_exceeded"
    assert "the current turn needs 18" in str(err.value)  # 1800 for the audio, and the text
    assert loom.wire.requests == []


def test_audio_for_an_anthropic_model_is_a_clear_400_before_anything(loom) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        loom.openai(ACME_KEY).chat.completions.create(
            model="claude-test",
            messages=[audio_turn(1.0)],
            extra_headers={"X-Loom-Session": "deaf"},
        )
    assert err.value.code == "unsupported_content"
    assert "whose API takes no audio" in str(err.value)
    assert loom.wire.requests == []
    assert _records(loom) == 0


def test_a_passed_through_tool_results_image_still_follows_the_results(buggy, wire) -> None:  # noqa: F811
    """Loom fails (a bug in its store) and passes the request through: an OpenAI upstream
    still gets the tool result's image in a user message, not inside the tool message."""
    url = buggy(passthrough=True, fails=TASK)
    wire.script(openai_text("A login form."))
    with anthropic.Anthropic(base_url=url, api_key=ACME_KEY, max_retries=0) as client:
        raw = client.messages.with_raw_response.create(
            model="gpt-test", max_tokens=100, tools=[LOOK], messages=anthropic_tool_exchange()
        )
    assert raw.headers["X-Loom-Passthrough"] == "true"
    sent = wire.requests[0].body["messages"]
    assert sent[-2] == {"role": "tool", "tool_call_id": "toolu_1", "content": "Taken."}
    assert sent[-1]["content"][0] == {"type": "text", "text": tool_parts_note("toolu_1")}

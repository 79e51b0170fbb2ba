"""`loomctx.testing.OpenAIWireServer`: a `ScriptedLLM` over OpenAI's wire protocol, driven by
the official `openai` client (streaming and not, text and tool calls, usage, errors)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import openai
import pytest

from loomctx.messages import ToolCall
from loomctx.testing import OpenAIWireServer, ScriptedLLM


def test_text_tool_calls_and_usage_over_http() -> None:
    llm = ScriptedLLM(
        [
            "Hello there",
            [ToolCall(id="call_1", name="get_weather", arguments={"city": "Oslo"})],
        ]
    )
    with (
        OpenAIWireServer(llm, model="m1") as server,
        openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0) as client,
    ):
        done = client.chat.completions.create(
            model="m1",
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"},
            ],
        )
        assert done.choices[0].message.content == "Hello there"
        assert done.choices[0].finish_reason == "stop"
        assert done.model == "m1"
        assert done.usage is not None
        assert done.usage.prompt_tokens > 0
        assert done.usage.completion_tokens > 0
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
        stream = client.chat.completions.create(
            model="m1",
            messages=[{"role": "user", "content": "Weather in Oslo?"}],
            tools=tools,  # type: ignore[list-item]
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for delta in chunk.choices[0].delta.tool_calls or () if chunk.choices else ():
            slot = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            slot["id"] += delta.id or ""
            assert delta.function is not None
            slot["name"] += delta.function.name or ""
            slot["arguments"] += delta.function.arguments or ""
    assert calls == {0: {"id": "call_1", "name": "get_weather", "arguments": '{"city":"Oslo"}'}}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].usage is not None
    assert not chunks[-1].choices
    # What the model received: Loom's messages, and the tools.
    assert [m.content for m in llm.calls[0].messages] == ["Be brief.", "Hi"]
    assert llm.calls[1].tools[0]["function"]["name"] == "get_weather"
    assert server.requests[1]["stream"] is True
    llm.assert_complete()


def test_a_stream_without_usage_asked_has_no_usage_chunk() -> None:
    llm = ScriptedLLM(["one", "two"])
    with (
        OpenAIWireServer(llm) as server,
        openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0) as client,
    ):
        chunks = list(
            client.chat.completions.create(
                model="x", messages=[{"role": "user", "content": "hi"}], stream=True
            )
        )
    assert all(c.choices for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "one"


def test_failures_are_openai_errors() -> None:
    llm = ScriptedLLM(["only one"])
    with (
        OpenAIWireServer(llm) as server,
        openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0) as client,
    ):
        client.chat.completions.create(model="x", messages=[{"role": "user", "content": "a"}])
        # The script is used up: a 500 naming why, not a hang.
        with pytest.raises(openai.InternalServerError, match="ScriptExhausted"):
            client.chat.completions.create(model="x", messages=[{"role": "user", "content": "b"}])
        # Messages Loom's model cannot read: a 400.
        with pytest.raises(openai.BadRequestError, match="bad request"):
            client.chat.completions.create(
                model="x",
                messages=[{"role": "wizard", "content": "b"}],  # type: ignore[list-item, misc]
            )
        for path, data, status in (
            ("/v1/chat/completions", b"{not json", 400),
            ("/v1/chat/completions", b"[1]", 400),
            ("/v1/chat/completions", b'{"messages": "hi"}', 400),
            ("/v1/embeddings", b"{}", 404),
        ):
            request = urllib.request.Request(
                server.base_url.removesuffix("/v1") + path, data=data, method="POST"
            )
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(request, timeout=10)
            assert err.value.code == status
            assert json.loads(err.value.read())["error"]["message"]

"""What a client sees when the upstream misbehaves: a stream without a reply, or a chunk whose
fields have the wrong types, is a 502 in OpenAI's error shape (before the response starts),
or an error event that ends the stream (after). And the reply names the model the client
asked for, whatever the upstream calls it."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.agent._servers import SSEReply, anthropic_text, openai_chunk, openai_sse
from tests.server._http import call
from tests.server.conftest import ACME_KEY

HI = [{"role": "user", "content": "hi"}]


def _bad(**fields: Any) -> dict[str, Any]:
    return {**openai_chunk({"content": "x"}), **fields}


@pytest.mark.parametrize(
    ("reply", "needle"),
    [
        (SSEReply(events=["data: [DONE]\n\n"]), "ended its stream without a reply"),
        (SSEReply(events=[]), "ended its stream without a reply"),
        (openai_sse([_bad(choices="x")]), "`choices` is a string, not list"),
        (openai_sse([_bad(choices=[{"delta": "x"}])]), "`choices[0].delta` is a string"),
        (openai_sse([_bad(choices=[None])]), "`choices[0]` is null, not dict"),
        (openai_sse([_bad(created="soon")]), "`created` is a string"),
        (openai_sse([_bad(usage=[1])]), "`usage` is an array"),
        (
            openai_sse([openai_chunk({"tool_calls": [{"index": "0", "function": {}}]})]),
            "`choices[0].delta.tool_calls[0].index` is a string, not int",
        ),
        (
            openai_sse([openai_chunk({"tool_calls": [{"index": 0, "function": {"name": 7}}]})]),
            "`choices[0].delta.tool_calls[0].function.name` is a number",
        ),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_a_reply_loom_cannot_read_is_a_502(
    loom, reply: SSEReply, needle: str, stream: bool
) -> None:
    loom.wire.script(reply)
    status, body, _ = call(
        "POST",
        f"{loom.v1}/chat/completions",
        key=ACME_KEY,
        body={"model": "gpt-test", "messages": HI, "stream": stream},
    )
    assert status == 502
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "upstream_error"
    assert needle in body["error"]["message"]
    assert "`gpt-test`" in body["error"]["message"]


def test_a_bad_chunk_mid_stream_ends_the_stream_on_an_error_event(loom) -> None:
    loom.wire.script(
        openai_sse([openai_chunk({"role": "assistant", "content": "Hel"}), _bad(choices=7)])
    )
    client = loom.openai(ACME_KEY)
    stream = client.chat.completions.create(model="gpt-test", messages=HI, stream=True)
    got: list[str] = []
    with pytest.raises(openai.APIError) as raised:
        got.extend(chunk.choices[0].delta.content or "" for chunk in stream)
    assert got == ["Hel"]
    assert "`choices` is a number, not list" in raised.value.message
    assert raised.value.type == "upstream_error"


@pytest.mark.parametrize("model", ["gpt-test", "claude-test"])
@pytest.mark.parametrize("stream", [False, True])
def test_the_reply_names_the_model_the_client_asked_for(loom, model: str, stream: bool) -> None:
    """`gpt-test` is `gpt-upstream` upstream, which names itself in its chunks: the client
    still reads `gpt-test` (as it does `claude-test`)."""
    if model == "gpt-test":
        upstream = "gpt-upstream-2026-01-01"
        loom.wire.script(
            openai_sse(
                [
                    openai_chunk({"role": "assistant", "content": "hi"}, model=upstream),
                    openai_chunk({}, finish_reason="stop", model=upstream),
                ]
            )
        )
    else:
        loom.wire.script(anthropic_text("hi"))
    client = loom.openai(ACME_KEY)
    if stream:
        chunks = list(client.chat.completions.create(model=model, messages=HI, stream=True))
        assert {c.model for c in chunks} == {model}
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "hi"
    else:
        reply = client.chat.completions.create(model=model, messages=HI)
        assert reply.model == model
        assert reply.choices[0].message.content == "hi"

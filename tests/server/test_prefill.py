"""A window sent upstream ends on an assistant message only when the client's own request
does (a prefill it asked for): the proxy builds its window with `prefill=` set from the
request, never by accident."""

from __future__ import annotations

import openai
import pytest

from tests.agent._servers import anthropic_text
from tests.server.conftest import ACME_KEY


def test_a_prefill_the_client_sends_reaches_the_upstream_built_by_loom(loom) -> None:
    loom.wire.script(anthropic_text('"ok": true}'))
    client = loom.openai(ACME_KEY)
    client.chat.completions.create(
        model="claude-test",
        messages=[
            {"role": "user", "content": "Answer in JSON."},
            {"role": "assistant", "content": "{"},
        ],
        user="prefill",
    )
    sent = loom.wire.requests[0].body
    assert sent["messages"][-1]["role"] == "assistant"
    assert "You work for ACME." in str(sent["system"])  # Loom's window, not a passthrough


def test_a_blank_user_turn_never_sends_the_previous_reply_as_a_prefill(loom) -> None:
    loom.wire.script(anthropic_text("Hello again."))
    client = loom.openai(ACME_KEY)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="claude-test",
            messages=[
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello! How can I help?"},
                {"role": "user", "content": [{"type": "text", "text": " \n "}]},
            ],
            user="blank",
        )
    assert refused.value.code == "empty_user_message"
    assert loom.wire.requests == []  # refused with a clear error: nothing went upstream
    assert loom.service.sessions("acme") == []  # and nothing was stored

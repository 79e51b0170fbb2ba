"""A turn no window can hold (one user message larger than the model's window) is refused
with a 400 naming the sizes, before anything is stored and before any model call: it is never
passed through without the tenant's instructions and budget."""

from __future__ import annotations

import openai
import pytest

from tests.agent._servers import openai_text
from tests.server._http import call
from tests.server.conftest import ACME_KEY


@pytest.mark.parametrize("model", ["gpt-test", "claude-test"])
def test_a_user_message_larger_than_the_window_is_refused_with_the_sizes(loom, model) -> None:
    loom.wire.script(openai_text("I should never be asked."))
    huge = "pelican " * 3000
    with pytest.raises(openai.BadRequestError) as refused:
        loom.openai(ACME_KEY).chat.completions.create(
            model=model, messages=[{"role": "user", "content": huge}], user="huge"
        )
    assert refused.value.status_code == 400
    error = refused.value.body
    assert isinstance(error, dict)
    assert error["code"] == "context_length_exceeded"
    assert error["param"] == "messages"
    message = error["message"]
    assert message.startswith("the current turn needs ")
    needed = int(message.split()[4])
    assert needed > 3000
    assert f"model `{model}`'s window of 2000 tokens" in message
    available = int(message.split(", more than the ")[1].split()[0])
    assert needed > available
    assert "leaves for input after its output reserve of" in message
    assert loom.wire.requests == []  # nothing went upstream
    status, _, _ = call("GET", f"{loom.v1}/sessions/huge", key=ACME_KEY)
    assert status == 404  # nothing was stored

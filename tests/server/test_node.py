"""A non-Python agent through Loom: the `openai` npm package (tests/server/node) against the
proxy: a tool call, its result sent back with the whole history, a streamed answer, an error.

`npm ci` in tests/server/node installs the package from package-lock.json (the only time the
registry is used); this test runs it when node_modules is missing and npm is there. In CI
(`CI=true`) a missing Node.js is a failure, not a skip.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.agent._servers import openai_chunk, openai_sse, openai_text, openai_tool_delta
from tests.server.conftest import ACME_KEY, node_with_openai

NODE = Path(__file__).parent / "node"


def test_openai_npm_client(loom) -> None:
    node = node_with_openai()
    loom.wire.script(
        openai_sse(
            [
                openai_chunk({"role": "assistant", "content": ""}),
                openai_chunk(
                    openai_tool_delta(
                        0, id="call_o1", name="get_weather", arguments='{"city":"Oslo"}'
                    )
                ),
                openai_chunk({}, finish_reason="tool_calls"),
            ]
        ),
        openai_text("Snowy in Oslo", ", -3C."),
    )
    done = subprocess.run(
        [node, str(NODE / "client.mjs")],
        env={**os.environ, "LOOM_URL": loom.v1, "LOOM_KEY": ACME_KEY},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["report"].startswith("rep_")
    assert out["call"] == {"id": "call_o1", "name": "get_weather", "arguments": '{"city":"Oslo"}'}
    assert out["streamed"] == "Snowy in Oslo, -3C."
    assert out["error"]["status"] == 404
    assert "no-such-model" in out["error"]["message"]
    sent = loom.wire.requests[1].body["messages"]
    assert sent[-1] == {"role": "tool", "tool_call_id": "call_o1", "content": "snow, -3C"}
    tasks = loom.service.memory("acme", "node-agent").get_l1_tasks(limit=10)
    assert [t.action for t in tasks] == ["user_message", "get_weather", "assistant_message"]

"""One agent turn as the commands run it: the reply, the window's report, and sub-agents."""

from __future__ import annotations

import io
import json

from loomctx.agent.executor import Agent
from loomctx.cli._agent import ask, choose_llm
from loomctx.cli._offline import OfflineResponder
from loomctx.messages import ToolCall
from loomctx.testing import ScriptedLLM


async def test_a_sub_agents_windows_are_not_the_turns_own() -> None:
    child = Agent(ScriptedLLM(["The depot is in Leeds."]), name="researcher", embedder=None)
    parent = Agent(
        ScriptedLLM(
            [
                [ToolCall(id="c1", name="researcher", arguments={"task": "Where is the depot?"})],
                "It is in Leeds.",
            ]
        ),
        tools=[child.as_tool(name="researcher", description="Finds things out.")],
        name="lead",
        model_context_window=3000,
        embedder=None,
    )
    log = io.StringIO()
    answer = await ask(parent, "Where is our depot?", events=log)
    assert answer.text == "It is in Leeds."
    assert answer.windows == 2
    assert answer.report.window == 3000
    assert "turn" in {s.name for s in answer.report.sources}
    events = [json.loads(line) for line in log.getvalue().splitlines()]
    windows = [e for e in events if e["type"] == "context_assembled"]
    assert len(windows) == 3
    assert sum(1 for e in windows if e["parent_run_id"] is not None) == 1


def test_choosing_the_model() -> None:
    llm, described = choose_llm(None, {}, offline=False)
    assert isinstance(llm, OfflineResponder)
    assert described.startswith("offline responder (no LLM configured")
    llm, described = choose_llm(None, {"LOOM_MODEL": "gpt-4o", "OPENAI_API_KEY": "k"}, offline=True)
    assert described == "offline responder (--offline)"
    llm, described = choose_llm("anthropic/claude-x", {"ANTHROPIC_API_KEY": "k"}, offline=False)
    assert described == llm.name
    assert "claude-x" in described

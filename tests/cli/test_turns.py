"""One agent turn as the commands run it: the reply, the window's report, and sub-agents."""

from __future__ import annotations

import io
import json

from loomctx import AgentWindow
from loomctx.agent.executor import Agent
from loomctx.cli._agent import RecordingLLM, ask, choose_llm
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
        embedder=None,
        window=AgentWindow(model_context_window=3000),
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


async def test_the_recorder_keeps_the_current_turns_calls_only() -> None:
    """A long `loomctx chat` kept every window it ever sent in memory."""
    llm = RecordingLLM(ScriptedLLM(["One.", [ToolCall(id="c1", name="add", arguments={})], "Two."]))

    def add() -> int:
        """Add nothing."""
        return 0

    agent = Agent(llm, tools=[add], embedder=None)
    first = await ask(agent, "Say one.")
    assert len(llm.sent) == 1
    second = await ask(agent, "Say two.")
    assert len(llm.sent) == 2  # the second turn's two calls, not all three
    assert [len(a.calls) for a in (first, second)] == [1, 2]
    assert second.calls[0].messages == llm.sent[0][0]
    assert any(m.content == "Say two." for m in second.calls[0].messages)


def test_choosing_the_model() -> None:
    llm, described = choose_llm(None, {}, offline=False)
    assert isinstance(llm, OfflineResponder)
    assert described.startswith("offline responder (no LLM configured")
    llm, described = choose_llm(None, {"LOOM_MODEL": "gpt-4o", "OPENAI_API_KEY": "k"}, offline=True)
    assert described == "offline responder (--offline)"
    llm, described = choose_llm("anthropic/claude-x", {"ANTHROPIC_API_KEY": "k"}, offline=False)
    assert described == llm.name
    assert "claude-x" in described

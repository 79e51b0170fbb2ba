"""`Agent.preview`: the window a run would be sent, built without recording or remembering
anything."""

from __future__ import annotations

from loomctx import Agent, LoomMemory
from loomctx.testing import FunctionLLM


async def test_a_preview_is_the_run_s_first_window_and_leaves_no_trace() -> None:
    memory = LoomMemory("a", embedder=None)
    llm = FunctionLLM(lambda messages, tools, options: "Noted.")
    agent = Agent(llm, "Be brief.", memory=memory)
    await agent.run("My sister lives in Lisbon.")
    recorded = memory.get_l1_tasks(limit=100)
    taken = agent.turns_taken
    preview = await agent.preview("Where does my sister live?")
    assert memory.get_l1_tasks(limit=100) == recorded
    assert agent.turns_taken == taken
    # The next run's first call is the preview, and its history goes on from the last one.
    await agent.run("Where does my sister live?")
    assert preview.messages == llm.calls[-1].messages
    memory.close()

"""`loomctx bench locomo` measures the window an `Agent` sends, not a window of its own."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from loomctx import AgentWindow
from loomctx.agent.executor import Agent
from loomctx.agent.llm import LLMOptions
from loomctx.evaluation.cost import SYSTEM
from loomctx.evaluation.datasets import load_locomo
from loomctx.evaluation.locomo import _locomo_tasks, window_agent
from loomctx.memory.core import LoomMemory
from loomctx.messages import Message
from loomctx.testing.llm import FunctionLLM
from tests.evaluation.test_evaluate import locomo_data, write


def _memory(folder: Path) -> LoomMemory:
    folder.mkdir()
    (conv,) = load_locomo(write(folder / "l.json", locomo_data()))
    memory = LoomMemory(conv.sample_id, embedder=None)
    memory.add_tasks(_locomo_tasks(conv, date_in_text=False))
    return memory


@pytest.mark.parametrize(("budget", "reserve_ratio"), [(600, 0.625), (3000, 0.25)])
def test_the_bench_window_is_the_one_an_agent_sends_on_the_same_memory(
    tmp_path: Path, budget: int, reserve_ratio: float
) -> None:
    question = locomo_data()[0]["qa"][0]["question"]
    measured = _memory(tmp_path / "bench")
    window = asyncio.run(window_agent(measured, budget).preview(question))
    assert window.token_count <= budget

    def answer(
        messages: Sequence[Message], tools: Sequence[Mapping[str, Any]], _: LLMOptions | None
    ) -> str:
        return "Denver."

    # A user's agent on the same conversation: the same instructions, window and reserve,
    # everything else its defaults; what it sends on its first call is what was measured.
    llm = FunctionLLM(answer)
    used = _memory(tmp_path / "agent")
    agent = Agent(
        llm,
        SYSTEM,
        memory=used,
        name="assistant",
        window=AgentWindow(model_context_window=budget + 1000, output_reserve_ratio=reserve_ratio),
    )
    assert asyncio.run(agent.run(question)) == "Denver."
    assert list(llm.calls[0].messages) == list(window.messages)
    sources = {b.source for b in window.blocks}
    assert {"system_prompt", "L1_recent", "user_input"} <= sources
    if budget == 600:  # too small for the whole conversation: the old evidence is retrieved
        assert "unified_retrieval" in sources
    measured.close()
    used.close()

"""A short replay of the shipped demo conversation through a real `Agent` (a `ScriptedLLM`
answering with the conversation's own replies), every call's window saved as `loomctx chat`
saves it: the data the inspector's tests look at.

The window is small (700 tokens) so that history outgrows its room and is compacted within a
few turns; one turn calls a tool whose output carries a `<script>` payload (untrusted text
that must show as text in the page, never run).
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path

from loomctx import Agent, AgentWindow, MemoryEmbedding, MemoryTiers, tool
from loomctx.cli._agent import RecordingLLM, ask
from loomctx.cli._reports import save_window
from loomctx.memory.core import LoomMemory
from loomctx.messages import ToolCall
from loomctx.stores.sqlite import SQLiteStore
from loomctx.testing import ScriptedLLM

SESSION = "demo-replay"
PAYLOAD = '<script>document.title="pwned"</script><img src=x onerror="document.title=1">'
TOOL_TURN = 3  # the user turn whose first call is a tool call


@tool
def search_tracker(query: str) -> str:
    """Search the issue tracker.

    Args:
        query: What to look for.
    """
    return f"#301 checkout: totals off by a cent {PAYLOAD}"


def demo_exchanges(limit: int) -> list[tuple[str, str]]:
    """The first `limit` (user turn, reply) pairs of the demo conversation."""
    path = resources.files("loomctx") / "_data" / "demo" / "conversation.jsonl"
    out: list[tuple[str, str]] = []
    pending = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        m = json.loads(line)
        if m["role"] == "user":
            pending = m["content"]
        elif m["role"] == "assistant" and m.get("content") and pending:
            out.append((pending, m["content"]))
            pending = ""
        if len(out) == limit:
            break
    return out


def replay(path: Path, *, turns: int = 8, window: int = 700) -> list[int]:
    """Replay `turns` user turns into the SQLite store at `path`; returns how many model
    calls each turn made. Runs in a thread of its own: a test's event loop may be running."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(_replay(path, turns, window))).result()


async def _replay(path: Path, turns: int, window: int) -> list[int]:
    exchanges = demo_exchanges(turns)
    steps: list[object] = []
    for n, (_, reply) in enumerate(exchanges, 1):
        if n == TOOL_TURN:
            steps.append(
                [ToolCall(id="c1", name="search_tracker", arguments={"query": "checkout"})]
            )
        steps.append(reply)
    store = SQLiteStore(path)
    memory = LoomMemory(
        SESSION,
        store=store,
        embedder=None,
        tiers=MemoryTiers(max_l1_size=6),
        embedding=MemoryEmbedding(in_background=False),
    )
    llm = RecordingLLM(ScriptedLLM(steps))  # type: ignore[arg-type]
    agent = Agent(
        llm,
        system_instructions="You are the Lantern project's assistant. Be brief.",
        tools=[search_tracker],
        memory=memory,
        name="assistant",
        window=AgentWindow(model_context_window=window, output_reserve_ratio=0.2),
    )
    calls = []
    try:
        for turn, (prompt, _) in enumerate(exchanges, 1):
            answer = await ask(agent, prompt)
            for n, sent in enumerate(answer.calls, 1):
                save_window(
                    store,
                    session=SESSION,
                    turn=turn,
                    call=n,
                    prompt=prompt,
                    report=sent.report,
                    messages=sent.messages,
                    tools=sent.tools,
                    model="scripted",
                )
            calls.append(len(answer.calls))
    finally:
        memory.close()
        store.close()
    return calls

"""loom-agent 0.5.6 `ContextOrchestrator` (the project the seeds come from) on the workload.

Set up as its README does: a `LoomMemory` fed one task per message (`node.message`, and
`node.tool_call` for a call), `L1RecentSource` and `L2ImportantSource` over it, an
`InMemoryKnowledgeBase` holding the documents behind `RAGKnowledgeSource`, and
`UserInputSource`; `build_context(query, system_prompt=...)`. Its `TiktokenCounter` reads
the o200k encoding offline (see _peer_common). What it cannot do: keep tool calls as calls
(it renders them as text), count tool definitions, or find a document unless the whole
query is a substring of it (`InMemoryKnowledgeBase` matches the query verbatim).
"""

from __future__ import annotations

import asyncio
import time
from importlib.metadata import version
from typing import Any

from _peer_common import run, timed_builds


def body(workload: dict[str, Any]) -> dict[str, Any]:
    from loom.context.orchestrator import ContextOrchestrator
    from loom.context.sources import (
        L1RecentSource,
        L2ImportantSource,
        RAGKnowledgeSource,
        UserInputSource,
    )
    from loom.memory.core import LoomMemory
    from loom.memory.tokenizer import TiktokenCounter
    from loom.providers.knowledge.base import KnowledgeItem
    from loom.providers.knowledge.memory import InMemoryKnowledgeBase
    from loom.runtime.task import Task, TaskStatus

    counter = TiktokenCounter(model="gpt-4o")
    memory = LoomMemory(node_id="perf", token_counter=counter)
    start = time.perf_counter()
    for m in workload["history"]:
        for call in m.get("tool_calls") or []:
            fn = call["function"]
            memory.add_task(
                Task(
                    action="node.tool_call",
                    sourceAgent="assistant",
                    parameters={"tool_name": fn["name"], "tool_args": fn["arguments"]},
                    status=TaskStatus.COMPLETED,
                )
            )
        if m.get("content"):
            memory.add_task(
                Task(
                    action="node.message",
                    sourceAgent=m["role"],
                    parameters={"content": m["content"]},
                    status=TaskStatus.COMPLETED,
                )
            )
    ingest = time.perf_counter() - start
    kb = InMemoryKnowledgeBase()
    for i, doc in enumerate(workload["documents"]):
        kb.add_item(KnowledgeItem(id=f"note-{i}", content=doc, source="notes", relevance=1.0))
    user = UserInputSource()
    orchestrator = ContextOrchestrator(
        token_counter=counter,
        sources=[L1RecentSource(memory), L2ImportantSource(memory), RAGKnowledgeSource(kb), user],
        model_context_window=workload["window"],
        output_reserve_ratio=workload["reserve"] / workload["window"],
    )
    loop = asyncio.new_event_loop()

    def build(query: str) -> list[dict[str, Any]]:
        user.set_input(query)
        context = orchestrator.build_context(query, system_prompt=workload["system"])
        return [dict(m) for m in loop.run_until_complete(context)]

    try:
        build_ms, windows, timed_out = timed_builds(workload, build)
    finally:
        loop.close()
    notes = [
        "loom-agent 0.5.6 ContextOrchestrator (LoomMemory L1/L2, InMemoryKnowledgeBase",
        "behind RAGKnowledgeSource, UserInputSource): tool calls are flattened to text;",
        "tool definitions are not counted; a document is found only when the whole query",
        "is a substring of it.",
    ]
    return {
        "ingest_s": ingest,
        "build_ms": build_ms,
        "windows": windows,
        "notes": notes,
        "timed_out": timed_out,
    }


if __name__ == "__main__":
    run("loom-agent ContextOrchestrator", version("loom-agent"), body)

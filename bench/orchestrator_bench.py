"""ContextOrchestrator.build with every source of the context engine, on real conversation text.

Run: .venv/bin/python bench/orchestrator_bench.py
Workload (BENCHMARKS.md section 2): an 8,000-token window with 1,000 reserved for output; a
system prompt; 5 tool definitions; 4 skills; 10 earlier agent outputs; a history of N LoCoMo
turns (every 10th exchange a tool call with its result); the current question. Reports p50 and
p95 of repeated builds and the utilization of the 7,000 input tokens, side by side for N.
"""

from __future__ import annotations

import asyncio
import time

from _common import locomo_turns

from loomctx import ContextOrchestrator, Message, TiktokenCounter, ToolCall
from loomctx.context.sources import (
    AgentOutputSource,
    HistorySource,
    PromptSource,
    Skill,
    SkillSource,
    ToolSource,
    UserInputSource,
)

INSTRUCTIONS = (
    "You are a helpful assistant with a long memory of this conversation. Answer from the "
    "conversation and the reference context; say so when you do not know. Cite dates."
)


def tool(name: str, description: str, *params: str) -> dict[str, object]:
    props = {p: {"type": "string", "description": f"The {p}."} for p in params}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": list(params)},
        },
    }


TOOLS = [
    tool("search_memory", "Search earlier conversations for a fact.", "query"),
    tool("get_calendar", "List calendar events between two dates.", "start", "end"),
    tool("send_message", "Send a message to a friend.", "to", "text"),
    tool("get_weather", "Current weather for a city.", "city"),
    tool("run_sql", "Run a read-only SQL query on the notes database.", "sql"),
]
SKILLS = [
    Skill(name="dates", description="Resolve relative dates", triggers=("when", "date", "day"),
          instructions="Convert relative dates to absolute dates using the session date. " * 8),
    Skill(name="summaries", description="Summarize a stretch of conversation",
          triggers=("summarize", "summary"), instructions="Keep names, dates, decisions. " * 8),
    Skill(name="advice", description="Give careful personal advice", triggers=("should", "advice"),
          instructions="Be kind and concrete; suggest one next step. " * 8),
    Skill(name="lists", description="Answer with lists", triggers=("list", "which"),
          instructions="Use short bullet lists. " * 8),
]  # fmt: skip


def history(turns: list[str]) -> list[Message]:
    out: list[Message] = []
    for i, text in enumerate(turns):
        if i % 2 == 0:
            out.append(Message.user(text))
            continue
        if i % 20 == 1:
            call = ToolCall(id=f"c{i}", name="search_memory", arguments={"query": text[:40]})
            out.append(Message.assistant(tool_calls=[call]))
            out.append(Message.tool(f"found: {turns[i - 1][:120]}", tool_call_id=f"c{i}"))
        out.append(Message.assistant(text))
    return out


def make(n: int, turns: list[str], counter: TiktokenCounter) -> ContextOrchestrator:
    outputs = AgentOutputSource([f"Earlier answer {i}: {turns[i * 7]}" for i in range(10)])
    return ContextOrchestrator(
        token_counter=counter,
        sources=[
            PromptSource(INSTRUCTIONS),
            ToolSource(TOOLS),
            SkillSource(SKILLS),
            outputs,
            HistorySource(history(turns[:n])),
            UserInputSource(),
        ],
        model_context_window=8000,
        output_reserve_ratio=0.125,
    )


async def measure(orch: ContextOrchestrator, query: str, repeat: int) -> tuple[float, float, float]:
    for _ in range(3):
        window = await orch.build(query=query)
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        window = await orch.build(query=query)
        samples.append(time.perf_counter() - t0)
    samples.sort()
    p50 = samples[len(samples) // 2] * 1000
    p95 = samples[int(len(samples) * 0.95)] * 1000
    return p50, p95, window.report.utilization


def main() -> None:
    turns = locomo_turns()
    counter = TiktokenCounter()
    query = "When did Caroline go to the LGBTQ support group, and what did she say about it?"
    print(f"{'N turns':>8} {'p50 ms':>8} {'p95 ms':>8} {'utilization':>12}")
    for n in (100, 1000, 2700):
        p50, p95, util = asyncio.run(measure(make(n, turns, counter), query, repeat=200))
        print(f"{n:>8} {p50:8.2f} {p95:8.2f} {util:12.1%}")


if __name__ == "__main__":
    main()

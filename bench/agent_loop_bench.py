"""What the agent loop adds to every turn on top of the model, with a model that takes no time.

Run: .venv/bin/python bench/agent_loop_bench.py
A `ScriptedLLM` answers at once. A turn runs from its start (the run's start, or the end of the
turn before) to its `TurnCompleted` event: retrieval, the window build, the model call, the
tools, recording in memory. The loop's overhead is that minus the time spent inside the
model's stream, which for `ScriptedLLM` is its own work (counting the window's tokens for the
usage it reports); that is shown beside it. Workloads, on real conversation text (LoCoMo):

- (a) one turn, no tools, no retriever, a fresh in-memory memory;
- (b) five turns that each call a tool, then a final reply (six turns), with a retriever over
  300 LoCoMo turns (lexical, top 5) asked before every model call;
- (c) as (b), with one `LoomMemory` on a SQLite file holding 0, 1,000 and 10,000 earlier
  tasks (plus what the runs before recorded): its L1, L2 and L4 sources fill the window from
  them every turn, and every turn's tasks are written to the file.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from _common import locomo_turns

from loomctx import (
    Agent,
    AgentSources,
    AgentWindow,
    LLMOptions,
    LoomMemory,
    Message,
    SQLiteStore,
    Task,
    TaskStatus,
    TiktokenCounter,
    ToolCall,
    tool,
)
from loomctx.agent import BaseContextRetriever, Document, LLMChunk
from loomctx.agent.events import ContextAssembled, RunStarted, TurnCompleted
from loomctx.memory.task import USER_MESSAGE
from loomctx.testing import ScriptedLLM
from loomctx.text import coverage, terms

COUNTER = TiktokenCounter()
TURNS = locomo_turns()
QUESTION = "When did Caroline go to the LGBTQ support group, and what did she say about it?"


class TimedLLM:
    """Passes a model's stream through, adding up the time spent inside it."""

    def __init__(self, inner: ScriptedLLM) -> None:
        self.inner = inner
        self.name = inner.name
        self.spent = 0.0

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        options: LLMOptions | None = None,
    ) -> AsyncIterator[LLMChunk]:
        chunks = self.inner.stream(messages, tools=tools, options=options)
        while True:
            start = time.perf_counter()
            try:
                chunk = await anext(chunks)
            except StopAsyncIteration:
                self.spent += time.perf_counter() - start
                return
            self.spent += time.perf_counter() - start
            yield chunk


class TurnsRetriever(BaseContextRetriever):
    """Conversation turns sharing the most terms with the query."""

    def __init__(self, texts: list[str]) -> None:
        super().__init__(counter=COUNTER, max_tokens=1500)
        self.texts = texts
        self.term_sets = [frozenset(terms(t)) for t in texts]

    async def retrieve_for_query(self, query: str, top_k: int = 5) -> list[Document]:
        wanted = frozenset(terms(query))
        scored = sorted(
            ((coverage(wanted, s), i) for i, s in enumerate(self.term_sets)), reverse=True
        )[:top_k]
        return [Document(id=f"turn{i}", content=self.texts[i], score=s) for s, i in scored if s]


@tool
def recall(topic: str) -> str:
    """The conversation turn that mentions a topic first.

    Args:
        topic: A word or name to look for.
    """
    return next((t for t in TURNS if topic.lower() in t.lower()), "nothing found")


TOPICS = ["support group", "painting", "adoption", "camping", "pottery"]


def script(tool_turns: int) -> ScriptedLLM:
    steps: list[Any] = [
        [ToolCall(id=f"c{i}", name="recall", arguments={"topic": TOPICS[i % len(TOPICS)]})]
        for i in range(tool_turns)
    ]
    steps.append("Caroline went to the support group on 7 May 2023 and found it inspiring.")
    return ScriptedLLM(steps, counter=COUNTER)


Sample = tuple[float, float, int]
"""One turn: its seconds, the seconds of those inside the model, the window's tokens."""


async def one_run(agent: Agent, llm: TimedLLM) -> list[Sample]:
    out: list[Sample] = []
    start = spent = 0.0
    tokens = 0
    async for event in agent.stream(QUESTION):
        if isinstance(event, RunStarted):
            start, spent = time.perf_counter(), llm.spent
        elif isinstance(event, ContextAssembled):
            tokens = event.total_tokens
        elif isinstance(event, TurnCompleted):
            now = time.perf_counter()
            out.append((now - start, llm.spent - spent, tokens))
            start, spent = now, llm.spent
    return out


async def measure(
    runs: int, tool_turns: int, memory: LoomMemory | None
) -> list[tuple[float, float]]:
    retriever = TurnsRetriever(TURNS[:300]) if tool_turns else None
    samples: list[Sample] = []
    for i in range(runs + 2):
        llm = TimedLLM(script(tool_turns))
        agent = Agent(
            llm=llm,
            system_instructions="You remember what your friends told you. Cite dates.",
            tools=[recall] if tool_turns else [],
            memory=memory or LoomMemory("bench", counter=COUNTER, embedder=None),
            window=AgentWindow(token_counter=COUNTER),
            sources=AgentSources(retriever=retriever),
        )
        turns = await one_run(agent, llm)
        if i >= 2:  # the first two runs warm caches up
            samples += turns
    return samples


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def report(label: str, samples: list[Sample]) -> None:
    overhead = [total - model for total, model, _ in samples]
    model = [m for _, m, _ in samples]
    tokens = sorted(t for _, _, t in samples)[len(samples) // 2]
    print(
        f"{label:<40} {len(samples):>5} {percentile(overhead, 0.5):>8.2f} "
        f"{percentile(overhead, 0.9):>8.2f} {percentile(model, 0.5):>10.2f} {tokens:>8,}"
    )


def earlier_tasks(n: int) -> list[Task]:
    return [
        Task(
            action=USER_MESSAGE,
            source_agent="user",
            parameters={"content": f"{TURNS[i % len(TURNS)]} #{i}"},
            status=TaskStatus.COMPLETED,
        )
        for i in range(n)
    ]


def main() -> None:
    print(
        f"{'workload':<40} {'turns':>5} {'p50 ms':>8} {'p90 ms':>8} {'model p50':>10} {'window':>8}"
    )
    report("(a) 1 turn, no tools", asyncio.run(measure(200, 0, None)))
    report("(b) 5 tool turns + reply, retriever", asyncio.run(measure(40, 5, None)))
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "memory.db")
        memory = LoomMemory("bench", store=store, counter=COUNTER, embedder=None)
        stored = 0
        for target in (0, 1_000, 10_000):
            more = earlier_tasks(target)[stored:]
            for k in range(0, len(more), 1000):
                memory.add_tasks(more[k : k + 1000])
            memory.promote_tasks()
            stored = target
            label = f"(c) (b) + file memory of {target:,}+ tasks"
            report(label, asyncio.run(measure(40, 5, memory)))
        memory.close()
        store.close()
    print("\np50/p90: turn time - time inside the model's stream; model: ScriptedLLM's own token")
    print("counting (what a provider call replaces); window: p50 tokens of the window built.")
    print("N+: N earlier tasks, plus those recorded by the runs measured before (about 13 a run).")


if __name__ == "__main__":
    main()

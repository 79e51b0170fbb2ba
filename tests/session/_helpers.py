"""What the session tests share: Tasks, a recording subscriber, a knowledge source, windows."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from loomctx.context.block import BuildContext, ContextBlock, TokenBudget
from loomctx.context.orchestrator import ContextWindow
from loomctx.memory.task import Task, TaskStatus
from loomctx.session.bus import Event
from loomctx.text import terms


def said(task_id: str, text: str, *, importance: float | None = None) -> Task:
    """A user's message (importance 0.9 unless given)."""
    meta = {} if importance is None else {"importance": importance}
    return Task(
        task_id=task_id,
        source_agent="user",
        action="user_message",
        parameters={"content": text},
        status=TaskStatus.COMPLETED,
        metadata=meta,
    )


def note(task_id: str, text: str, *, importance: float = 0.3) -> Task:
    """A tool call with its result (importance given: 0.3 stays out of L2)."""
    return Task(
        task_id=task_id,
        action="lookup",
        parameters={"q": task_id},
        result=text,
        status=TaskStatus.COMPLETED,
        metadata={"importance": importance},
    )


class Recorder:
    """A bus handler that keeps every event it receives."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.arrived = asyncio.Event()

    async def __call__(self, event: Event) -> None:
        self.events.append(event)
        self.arrived.set()

    def topics(self) -> list[str]:
        return [e.topic for e in self.events]

    def of(self, topic: str) -> list[Event]:
        return [e for e in self.events if e.topic == topic]

    async def wait_for(self, topic: str, count: int = 1) -> list[Event]:
        """Wait (bounded, as a safety net) until `count` events of `topic` arrived."""
        async with asyncio.timeout(10):
            while len(self.of(topic)) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return self.of(topic)


class Knowledge:
    """A knowledge base as a third party would plug it in: a `ContextSource` of documents,
    offering those that share a word with the query."""

    def __init__(self, docs: Sequence[str], *, name: str = "RAG_knowledge") -> None:
        self.docs = list(docs)
        self.name = name
        self.priority = 0.8

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> list[ContextBlock]:
        words = set(terms(query))
        return [
            ContextBlock(
                source=self.name,
                section="context",
                id=f"{self.name}:{i}",
                content=doc,
                token_count=ctx.counter.count(doc),
                priority=0.9,
                truncatable=True,
            )
            for i, doc in enumerate(self.docs)
            if words & set(terms(doc))
        ]


def text_of(window: ContextWindow) -> str:
    """Everything the model would read: contents, tool calls and their arguments."""
    parts = []
    for m in window.messages:
        parts.append(m.content)
        parts += [f"{c.name}({c.arguments_json()})" for c in m.tool_calls]
    return "\n".join(parts)

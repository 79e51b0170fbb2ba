"""A retrieval-augmented agent over a shop's help pages, printing every event as it streams.

Run: .venv/bin/python examples/rag_agent.py ["question"]

Before every model call the agent asks `HelpCenter` (a `BaseContextRetriever`) for the pages
that match the question and what the tools said so far; the pages go into the window as
reference context. With `LOOM_MODEL` set (see `loomctx.agent.providers.llm_from_env`) that model
answers. Without it, an OFFLINE responder stands in: a `FunctionLLM` that calls the order tool
when the question names an order, then answers with the retrieved sentence that best matches
the question. It shows the events; it does not understand anything.
"""

from __future__ import annotations

import asyncio
import re
import sys
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from loomctx import (
    LLM,
    Agent,
    AgentEvent,
    AgentSources,
    LLMOptions,
    Message,
    ToolCall,
    ToolError,
    tool,
)
from loomctx.agent import BaseContextRetriever, Document
from loomctx.agent.events import (
    ContextAssembled,
    LLMCompleted,
    LLMTextDelta,
    RetrievalCompleted,
    RunCompleted,
    RunStarted,
    ToolCallEvent,
    ToolResultEvent,
    TurnCompleted,
)
from loomctx.agent.providers import llm_from_env
from loomctx.testing import FunctionLLM
from loomctx.text import coverage, terms

PAGES = {
    "returns": (
        "Returns. You can return any item within 30 days of delivery for a full refund. Items "
        "that arrived damaged are refunded without sending them back: send us a photo instead. "
        "Refunds reach the original payment method within 5 working days of approval."
    ),
    "shipping": (
        "Shipping. Orders placed before 14:00 on a working day leave our warehouse the same day. "
        "Standard delivery takes 2 to 4 working days in the EU; express delivery takes 1 day. "
        "Delivery is free for orders above 50 euros."
    ),
    "warranty": (
        "Warranty. Kitchen knives and cookware carry a 5-year warranty against manufacturing "
        "defects. Lamps and electrical items carry a 2-year warranty. Normal wear and damage "
        "from misuse are not covered."
    ),
    "loyalty": (
        "Loyalty programme. Members earn one point per euro spent and can spend 100 points as a "
        "5 euro discount. Points expire 12 months after they were earned. Gold members get free "
        "express delivery."
    ),
    "退货政策": (
        "退货政策。自签收之日起30天内可以申请退货。商品在运输中损坏的，退货运费由我们承担；"
        "因个人原因退货的，运费由顾客承担。退款会在我们收到退货后5个工作日内原路退回。"
    ),
}
ORDERS = {"1042": "delivered on 2025-06-12", "1043": "in transit, expected on 2025-07-02"}
QUESTIONS = [
    "My order 1042 arrived damaged. Do I have to send it back to get a refund?",
    "退货的运费由谁承担？",
]
WIDTH = 100


class HelpCenter(BaseContextRetriever):
    """The help pages that share the most terms with the query (English and Chinese)."""

    def __init__(self, pages: Mapping[str, str]) -> None:
        super().__init__(max_tokens=1000)
        self.pages = dict(pages)
        self._terms = {name: frozenset(terms(text)) for name, text in pages.items()}

    async def retrieve_for_query(self, query: str, top_k: int = 5) -> list[Document]:
        """Pages sharing at least one term with `query`, best first."""
        wanted = frozenset(terms(query))
        scored = [(coverage(wanted, self._terms[name]), name) for name in self.pages]
        ranked = sorted((s for s in scored if s[0] > 0), key=lambda s: -s[0])[:top_k]
        return [Document(id=name, content=self.pages[name], score=score) for score, name in ranked]


@tool
def order_status(order_id: str) -> str:
    """Where an order is: delivered (and when) or in transit.

    Args:
        order_id: The order number, e.g. "1042".
    """
    if order_id not in ORDERS:
        raise ToolError(f"no order {order_id!r}; order numbers have four digits, e.g. '1042'")
    return f"Order {order_id} was {ORDERS[order_id]}."


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?。！？；])\s*", text) if s.strip()]


def offline_responder(
    messages: Sequence[Message], tools: Sequence[Mapping[str, Any]], options: LLMOptions | None
) -> str | list[ToolCall]:
    """OFFLINE stand-in for a model: look the order up, then quote the best retrieved sentence."""
    question = next(m.content for m in reversed(messages) if m.role == "user")
    found = [m.content for m in messages if m.role == "tool"]
    order = re.search(r"\b\d{4}\b", question)
    if order and not found and tools:
        return [ToolCall(id="call_1", name="order_status", arguments={"order_id": order.group()})]
    context = "\n".join(m.content for m in messages if '<context source="retrieved"' in m.content)
    wanted = frozenset(terms(question))
    best = max(
        (s for page in PAGES.values() if page in context for s in _sentences(page)),
        key=lambda s: coverage(wanted, frozenset(terms(s))),
        default="I found nothing about that in the help pages.",
    )
    return " ".join([*found, best])


def width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def clip(text: str) -> str:
    """One line of at most `WIDTH` columns."""
    line = text.replace("\n", " ")
    if width(line) <= WIDTH:
        return line
    while width(line) > WIDTH - 1:
        line = line[:-1]
    return line + "…"


def describe(event: AgentEvent) -> str:
    """What an event says, in a few words."""
    if isinstance(event, RunStarted):
        return event.prompt
    if isinstance(event, RetrievalCompleted):
        return ", ".join(f"{d.id} {d.score:.2f}" for d in event.documents) or "nothing"
    if isinstance(event, ContextAssembled):
        used = ", ".join(f"{s['name']} {s['used']}" for s in event.report["sources"] if s["used"])
        return f"{event.total_tokens} tokens: {used}"
    if isinstance(event, LLMTextDelta):
        return repr(event.text)
    if isinstance(event, LLMCompleted):
        return f"finish={event.finish_reason}, {len(event.tool_calls)} tool call(s)"
    if isinstance(event, ToolCallEvent):
        return f"{event.call.name}({event.call.arguments_json()})"
    if isinstance(event, ToolResultEvent):
        return ("error: " if event.is_error else "") + event.content
    if isinstance(event, TurnCompleted):
        return "tools ran, next turn" if event.had_tool_calls else "final reply"
    if isinstance(event, RunCompleted):
        return f"{event.stopped} after {event.turns} turn(s): {event.output}"
    return ""


async def ask(llm: LLM, questions: Sequence[str]) -> None:
    """Each question in a fresh run, printing every event as it arrives."""
    for question in questions:
        agent = Agent(
            llm=llm,
            system_instructions="You answer customers of a small online shop from its help pages.",
            tools=[order_status],
            sources=AgentSources(retriever=HelpCenter(PAGES), top_k=2),
        )
        async for event in agent.stream(question):
            print(clip(f"[turn {event.turn}] {event.type.value:<19} {describe(event)}"))
        print()
    close = getattr(llm, "aclose", None)  # providers hold an HTTP client
    if close is not None:
        await close()


def main(argv: Sequence[str]) -> None:
    llm = llm_from_env()
    if llm is None:
        print("OFFLINE: no model configured (set LOOM_MODEL to use one); the replies come from")
        print("an extractive FunctionLLM responder. Retrieval, tools and context are real.\n")
        llm = FunctionLLM(offline_responder, name="offline-extractive")
    else:
        print(f"model: {llm.name}\n")
    asyncio.run(ask(llm, argv or QUESTIONS))


if __name__ == "__main__":
    main(sys.argv[1:])

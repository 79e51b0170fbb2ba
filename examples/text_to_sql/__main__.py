"""Ask a shop database questions in English or Chinese; watch the schema follow the agent.

Run: .venv/bin/python examples/text_to_sql ["question"] [--db shop.db]

With `LOOM_MODEL` set (e.g. ``LOOM_MODEL=openai/gpt-4o-mini`` and `OPENAI_API_KEY`, or
``LOOM_MODEL=anthropic/claude-haiku-4-5`` and `ANTHROPIC_API_KEY`), that model answers the
question. Without it, the example runs offline: a scripted model replays seed 001's scenario 2
("分析客户购买行为", analyse customer purchase behaviour) against the real database, tools,
retriever and context assembly, so every number printed is real except the model's words.

Every turn prints which tables the retriever chose, what the window holds per source, the
tool calls with their results, and at the end the answer.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import textwrap
import unicodedata
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as `python examples/text_to_sql`: import it as a package
    # (its folder leaves sys.path, so that `tools` or `schema` never shadow another module)
    sys.path[0] = str(Path(__file__).resolve().parent.parent)
    __package__ = "text_to_sql"

from loomctx import LLM, Agent, AgentEvent, Message, ToolCall
from loomctx.agent.events import (
    ContextAssembled,
    LLMCompleted,
    RetrievalCompleted,
    RunCompleted,
    RunStarted,
    ToolCallEvent,
    ToolResultEvent,
)
from loomctx.agent.providers import llm_from_env
from loomctx.testing import ScriptedLLM

from .agent import build_agent
from .database import create_database

WIDTH = 100
DEFAULT_QUESTION = "Which product categories brought in the most revenue in the last 90 days?"
SCENARIO_2 = "分析客户购买行为"
SCENARIO_2_SQL = """\
SELECT c.segment,
       COUNT(DISTINCT c.id) AS buyers,
       COUNT(DISTINCT o.id) AS orders,
       ROUND(1.0 * COUNT(DISTINCT o.id) / COUNT(DISTINCT c.id), 2) AS orders_per_buyer,
       ROUND(SUM(oi.quantity * oi.unit_price_cents) / 100.0 / COUNT(DISTINCT o.id), 2)
         AS avg_order,
       ROUND(AVG(p.unit_price_cents) / 100.0, 2) AS avg_item_price
FROM customers c
JOIN orders o ON o.customer_id = c.id AND o.status != 'cancelled'
JOIN order_items oi ON oi.order_id = o.id
JOIN products p ON p.id = oi.product_id
GROUP BY c.segment
ORDER BY avg_order DESC"""


def _summarize(messages: Sequence[Message]) -> str:
    """The scripted model's last answer: the rows of the last query, in words."""
    rows = [line.split(" | ") for line in messages[-1].content.splitlines()[1:-1]]
    lines = [
        f"- {segment}: {buyers} buyers placed {orders} orders ({per} each); an order "
        f"averages {avg}, at {price} per item."
        for segment, buyers, orders, per, avg, price in rows
    ]
    return "Purchase behaviour by customer segment (orders not cancelled):\n" + "\n".join(lines)


def walkthrough() -> ScriptedLLM:
    """Seed 001, scenario 2: the model lists the tables first, then queries with what the
    listing revealed (the retriever has added `products` to the schema by then)."""
    return ScriptedLLM(
        [
            ("First, let me see which tables exist.", [ToolCall(id="t1", name="list_tables")]),
            [ToolCall(id="t2", name="run_sql", arguments={"query": SCENARIO_2_SQL})],
            _summarize,
        ],
        name="scripted-walkthrough",
    )


def width(text: str) -> int:
    """Columns `text` takes in a terminal (CJK characters take two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def fit(text: str, indent: str = "  ", limit: int = 12) -> str:
    """`text` wrapped to `WIDTH` columns under `indent`, at most `limit` lines."""
    out: list[str] = []
    for line in text.splitlines() or [""]:
        for piece in textwrap.wrap(line, WIDTH - len(indent), subsequent_indent="  ") or [""]:
            while width(piece) > WIDTH - len(indent):  # wide characters: cut to the columns
                piece = piece[:-2] + "…"
            out.append(indent + piece)
    if len(out) > limit:
        out[limit - 1 :] = [f"{indent}... ({len(out) - limit + 1} more lines)"]
    return "\n".join(out)


def show(event: AgentEvent) -> str | None:
    """One event as text, or None for events the walk-through does not print."""
    if isinstance(event, RunStarted):
        return f"question: {event.prompt}"
    if isinstance(event, RetrievalCompleted):
        tables = [f"{d.id} ({d.score:.2f})" for d in event.documents if d.score]
        return f"\n── turn {event.turn} " + "─" * 80 + "\n" + fit("schema: " + ", ".join(tables))
    if isinstance(event, ContextAssembled):
        parts = [f"{s['name']} {s['used']:,}" for s in event.report["sources"] if s["used"]]
        available = event.report["available"]
        head = f"window: {event.total_tokens:,} of {available:,} tokens = "
        return fit(head + " · ".join(parts))
    if isinstance(event, LLMCompleted) and event.text and event.tool_calls:
        return fit(f"model: {event.text}")
    if isinstance(event, ToolCallEvent):
        arguments = [f"{k}: {v}" for k, v in event.call.arguments.items()]
        return "\n".join([f"  → {event.call.name}", *(fit(a, "      ", 20) for a in arguments)])
    if isinstance(event, ToolResultEvent):
        said = "failed" if event.is_error else "returned"
        return f"  ← {event.name} {said}:\n" + fit(event.content, "      ", 24)
    if isinstance(event, RunCompleted):
        used = f", {event.usage.input_tokens:,} tokens in" if event.usage else ""
        return f"\nanswer ({event.turns} turns{used}):\n" + fit(event.output, limit=30)
    return None


async def ask(agent: Agent, question: str) -> None:
    """Stream the run, printing each event worth seeing."""
    async for event in agent.stream(question):
        text = show(event)
        if text is not None:
            print(text)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="text_to_sql", description=__doc__.splitlines()[0])
    parser.add_argument("question", nargs="?", help=f"default: {DEFAULT_QUESTION!r}")
    parser.add_argument("--db", type=Path, help="shop database to use (created if missing)")
    args = parser.parse_args(argv)
    llm: LLM | None = llm_from_env()
    with tempfile.TemporaryDirectory() as tmp:
        database = args.db or Path(tmp) / "shop.db"
        if not database.exists():
            create_database(database)
        if llm is None:
            print("OFFLINE WALK-THROUGH: no model configured (set LOOM_MODEL to use one).")
            print("The model's replies are scripted; database, tools, retrieval and context are")
            print("real. Seed 001, scenario 2: the schema follows what `list_tables` revealed.\n")
            if args.question:
                print(f"(not answering {args.question!r}: that needs a model)\n")
            asyncio.run(ask(build_agent(walkthrough(), database), SCENARIO_2))
        else:
            print(f"model: {llm.name}\n")
            asyncio.run(ask(build_agent(llm, database), args.question or DEFAULT_QUESTION))


if __name__ == "__main__":
    main()

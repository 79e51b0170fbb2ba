"""Build one context window from every source of the engine, and say what went in and why.

Run: make demo   (or: .venv/bin/python examples/context_window.py)

A support agent with instructions, five tools, three skills, earlier answers and a 300-turn
conversation (with tool calls) gets a new question. The window is 4,000 tokens with 500 kept
for the reply: Loom keeps the instructions and the question whole, prefers the tools and
skills the question needs, keeps the newest history as whole tool units, summarizes the
stretch just before it, and reports every decision.
"""

from __future__ import annotations

import asyncio
import textwrap

from loomctx import ContextOrchestrator, ContextWindow, Message, TiktokenCounter, ToolCall
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
    "You are the support agent of a small online bookshop. Be precise about orders, dates "
    "and amounts; look facts up with the tools instead of guessing."
)


def tool(name: str, description: str, **params: str) -> dict[str, object]:
    props = {k: {"type": "string", "description": v} for k, v in params.items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": list(props)},
        },
    }


TOOLS = [
    tool("find_order", "Look up an order by its number.", order="Order number"),
    tool("refund_order", "Refund an order in full.", order="Order number", reason="Why"),
    tool("track_parcel", "Where a parcel is now.", tracking="Tracking code"),
    tool("search_books", "Search the catalogue.", query="Title, author or subject"),
    tool("send_email", "Email the customer.", subject="Subject", body="Text"),
]
SKILLS = [
    Skill(
        name="refunds",
        description="The refund policy and how to apply it",
        triggers=("refund", "return", "money back"),
        instructions="Refunds are allowed within 30 days of delivery. Damaged books are "
        "refunded without a return. Always confirm the order number first.",
    ),
    Skill(
        name="shipping",
        description="Carriers, delivery times and tracking",
        triggers=("parcel", "delivery", "tracking", "shipping"),
        instructions="Standard delivery takes 2-4 working days; express 1 day.",
    ),
    Skill(
        name="tone",
        description="How we write to customers",
        always=True,
        instructions="Warm, short, concrete. One apology at most.",
    ),
]


def conversation(turns: int) -> list[Message]:
    out: list[Message] = []
    for i in range(turns):
        order = 5000 + i
        out.append(Message.user(f"Hi, could you check order {order}? It has not arrived."))
        call = ToolCall(id=f"call_{i}", name="find_order", arguments={"order": str(order)})
        out.append(Message.assistant(tool_calls=[call]))
        out.append(Message.tool(f"order {order}: shipped day {i % 28 + 1}", tool_call_id=call.id))
        out.append(Message.assistant(f"Order {order} shipped on day {i % 28 + 1} of the month."))
    return out


def print_report(window: ContextWindow) -> None:
    r = window.report
    print(
        f"window {r.window} tokens, {r.output_reserve} kept for the reply, {r.available} for "
        f"input; used {r.token_count} ({r.utilization:.1%}), of which framing "
        f"{r.overhead_tokens}"
    )
    print(f"\n{'source':14} {'alloc':>6} {'offered':>8} {'used':>6} {'blocks':>7}  status")
    for s in r.sources:
        print(
            f"{s.name:14} {s.allocated:>6} {s.requested:>8} {s.used:>6} "
            f"{s.blocks_kept:>3}/{s.blocks_offered:<3}  {s.status}"
        )
    groups: dict[tuple[str, str, str], int] = {}
    for b in r.blocks:
        if b.status != "kept":
            why = b.reason.split(": ", 1)[-1] if b.status == "summarized" else b.reason
            key = (b.source, b.status, why)
            groups[key] = groups.get(key, 0) + 1
    print(f"\nnot kept whole ({sum(groups.values())} blocks):")
    for (source, status, why), n in groups.items():
        print(f"  {n:>3} {source:12} {status:10}")
        print(textwrap.fill(why, width=96, initial_indent="      ", subsequent_indent="      "))


async def main() -> None:
    history = conversation(300)
    orchestrator = ContextOrchestrator(
        token_counter=TiktokenCounter(),
        sources=[
            PromptSource(INSTRUCTIONS),
            ToolSource(TOOLS),
            SkillSource(SKILLS),
            AgentOutputSource(
                [f"Earlier answer: order {5000 + i} was refunded." for i in range(5)]
            ),
            HistorySource(history),
            UserInputSource(),
        ],
        model_context_window=4000,
        max_output_tokens=500,
    )
    question = "My parcel for order 5299 never came. Can I get a refund?"
    window = await orchestrator.build(query=question)
    print_report(window)
    full = TiktokenCounter().count_messages(
        [Message.system(INSTRUCTIONS), *history, Message.user(question)], tools=TOOLS
    )
    print(f"\nsending the whole history instead would take {full} tokens")
    print("\nthe window, message by message (first 70 characters):")
    for m in (*window.messages[:3], None, *window.messages[-4:]):
        if m is None:
            print("  ...")
            continue
        text = m.content or ", ".join(f"{c.name}({c.arguments_json()})" for c in m.tool_calls)
        print(f"  {m.role:9} {text[:70]!r}")


if __name__ == "__main__":
    asyncio.run(main())

"""What Loom does today, in one screen: assemble a prompt from prioritised parts to a budget.

Run: make demo   (or: .venv/bin/python examples/assembler_demo.py)

An agent's system prompt is built from instructions, retrieved documents, tool definitions
and examples. The budget is too small for all of it: Loom keeps what must be kept whole,
cuts the next most valuable part at a sentence end, drops the rest, and says why.
"""

from __future__ import annotations

import json

from loomctx import Message, TiktokenCounter, ToolCall
from loomctx.context import ComponentPriority, ContextAssembler

INSTRUCTIONS = (
    "You are a data analyst for an online shop. Answer with SQL that runs on SQLite. "
    "Never modify data. If a table you need is not described below, ask for its schema."
)
DOCS = "\n".join(
    f"Document {i}: table `{name}` has columns {cols}. {note}"
    for i, (name, cols, note) in enumerate(
        [
            ("orders", "id, customer_id, created_at, status", "Status is one of new, paid, sent."),
            ("order_items", "order_id, product_id, quantity, unit_price", "Prices are in cents."),
            ("customers", "id, name, email, country", "Country is an ISO 3166 code."),
            ("products", "id, title, category, price", "Categories are free text."),
            ("reviews", "id, product_id, stars, body", "Stars run from 1 to 5."),
            ("returns", "id, order_id, reason, created_at", "A return refers to a whole order."),
        ],
        start=1,
    )
)
TOOLS = json.dumps(
    [{"name": "run_sql", "description": "Run a read-only SQL query", "parameters": {"sql": "str"}}]
)
EXAMPLES = (
    "Q: How many orders were paid yesterday?\n"
    "A: SELECT count(*) FROM orders WHERE status = 'paid' "
    "AND date(created_at) = date('now', '-1 day');\n" * 6
)


def main() -> None:
    counter = TiktokenCounter()
    assembler = ContextAssembler(max_tokens=300, token_counter=counter)
    assembler.add_component("instructions", INSTRUCTIONS, ComponentPriority.CRITICAL,
                            truncatable=False)  # fmt: skip
    assembler.add_component("retrieved_docs", DOCS, ComponentPriority.HIGH)
    assembler.add_component("tool_definitions", TOOLS, ComponentPriority.MEDIUM,
                            truncatable=False)  # fmt: skip
    assembler.add_component("examples", EXAMPLES, ComponentPriority.LOW)

    prompt = assembler.assemble()
    summary = assembler.get_summary()
    print("=" * 78)
    print(prompt)
    print("=" * 78)
    print(
        f"budget {summary['budget']} tokens ({summary['token_counter']}): "
        f"requested {summary['requested_tokens']}, assembled {summary['total_tokens']}"
    )
    print(f"{'component':18} {'priority':>8} {'tokens':>7} {'kept':>6}  status     why")
    for c in summary["components"]:
        print(
            f"{c['name']:18} {c['priority']:>8} {c['tokens']:>7} {c['included_tokens']:>6}  "
            f"{c['status']:10} {c['reason']}"
        )
    window = [Message.system(prompt), Message.user("Which products were returned most?")]
    call = ToolCall(id="call_1", name="run_sql", arguments={"sql": "SELECT 1"})
    window.append(Message.assistant(tool_calls=[call]))
    print(
        f"\nas chat messages with the user's question and a tool call: "
        f"{counter.count_messages(window)} tokens billed"
    )


if __name__ == "__main__":
    main()

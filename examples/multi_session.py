"""A support agent with three customer sessions, a policy update broadcast to all of them, and
one window across them: what each window holds, and how the aggregate splits its budget.

Run: .venv/bin/python examples/multi_session.py   (offline, no LLM, a few seconds)

Each customer talks in their own session (their words never reach another customer's
window). The agent broadcasts a policy change to every session and a perk to gold customers
only. Then a supervisor asks one question across all three sessions: the aggregate window
gives each session a share of 420 tokens by relevance to the question, keeps the shared
instructions and the broadcast once, and fits the budget exactly. Finally one session ends
(its memory is archived at the agent level) and a new controller reopens the store.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections import defaultdict
from pathlib import Path

from loomctx import ContextWindow, SQLiteStore, Task, TaskStatus
from loomctx.context import BuildContext, ContextBlock, TokenBudget
from loomctx.session.controller import ContextController
from loomctx.session.session import Session
from loomctx.text import terms

BUDGET = 420
SUPERVISOR = "Which refunds are still open?"
QUESTIONS = ["Can I get the refund instead?", "Is my parcel lost?", "When is my refund?"]
ORDERS = {"ana": "4411", "ben": "5120", "chloe": "6007"}
INSTRUCTIONS = (
    "You are the support agent of a small online bookshop. Quote order numbers exactly and "
    "never promise what the policies below do not allow."
)
POLICIES = [
    "Refund policy: refunds are paid to the original card within 5 working days.",
    "Shipping policy: parcels within the EU arrive in 3 to 7 days; tracking starts at dispatch.",
    "Damaged books: send a photo; we replace the book or refund it, the customer chooses.",
]
CUSTOMERS = {
    "ana": (
        "gold",
        [
            ("user", "Hi, my order 4411 arrived with a torn cover."),
            ("tool", "find_order", {"order": "4411"}, "4411: 'Dune', shipped 2 May, paid"),
            ("assistant", "Sorry about that! Could you send a photo of the cover?"),
            ("user", "Sent. I would rather have a refund than a replacement."),
        ],
    ),
    "ben": (
        "free",
        [
            ("user", "Where is my parcel? Order 5120, it has been ten days."),
            ("tool", "track_parcel", {"order": "5120"}, "5120: held at customs in Lyon"),
            ("assistant", "Your parcel is held at customs in Lyon; I have asked them why."),
        ],
    ),
    "chloe": (
        "gold",
        [
            ("user", "I was charged twice for order 6007. Please refund one payment."),
            ("tool", "find_payments", {"order": "6007"}, "6007: two card payments of 18.90"),
            ("assistant", "I see both payments; the duplicate will be refunded today."),
            ("user", "Thanks. When will the refund reach my card?"),
        ],
    ),
}


class PolicyBook:
    """The shop's policies as a context source (a `KnowledgeBase` plugs in the same way):
    the policies that share a word with the query, as dynamic context."""

    name = "RAG_knowledge"
    priority = 0.8

    def __init__(self, policies: list[str]) -> None:
        self.policies = policies

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> list[ContextBlock]:
        words = set(terms(query))
        return [
            ContextBlock(
                source=self.name,
                section="context",
                id=f"{self.name}:{i}",
                content=text,
                token_count=ctx.counter.count(text),
                priority=0.9,
                truncatable=True,
            )
            for i, text in enumerate(self.policies)
            if words & set(terms(text))
        ]


def task(customer: str, n: int, turn: tuple[object, ...]) -> Task:
    """One conversation turn as a Task: a message, or a tool call with its result."""
    if turn[0] in ("user", "assistant"):
        return message(f"{customer}-{n}", str(turn[1]), user=turn[0] == "user")
    _, name, args, result = turn
    assert isinstance(args, dict)
    return Task(
        task_id=f"{customer}-{n}",
        action=str(name),
        parameters=args,
        result=result,
        status=TaskStatus.COMPLETED,
    )


def message(task_id: str, text: str, *, user: bool = False) -> Task:
    return Task(
        task_id=task_id,
        source_agent="user" if user else "agent",
        action="user_message" if user else "assistant_message",
        parameters={"content": text},
        status=TaskStatus.COMPLETED,
    )


def per_source(window: ContextWindow) -> str:
    """Tokens used per source, in the window's order: ``name tokens`` pairs."""
    return "  ".join(f"{s.name} {s.used}" for s in window.report.sources if s.used)


def per_session(window: ContextWindow) -> dict[str, dict[str, int]]:
    """Tokens of the aggregate window by session (or "shared"), then by the source each
    block came from in its session."""
    used = [b.used_tokens for b in window.report.blocks if b.status in ("kept", "truncated")]
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for block, tokens in zip(window.blocks, used, strict=True):
        owner = block.metadata["session_id"] if block.source.startswith("session:") else "shared"
        out[owner][block.metadata.get("origin", block.source)] += tokens
    return out


async def converse(controller: ContextController) -> list[Session]:
    """The three customers' sessions, their conversations, a broadcast and a gold perk."""
    book = PolicyBook(POLICIES)
    sessions = []
    for customer, (plan, turns) in CUSTOMERS.items():
        session = await controller.create_session(
            customer,
            system_prompt=INSTRUCTIONS,
            sources=[book],
            priority=0.8 if plan == "gold" else 0.4,
            metadata={"plan": plan},
        )
        for n, turn in enumerate(turns):
            await session.add_task(task(customer, n, turn))
        sessions.append(session)
    update = message("policy-update", "Update: refunds now reach the card in 3 working days.")
    everyone = await controller.broadcast(update)
    perk = message("gold-perk", "As a gold customer your next delivery is free.")
    gold = await controller.distribute_filtered(perk, lambda s: s.metadata["plan"] == "gold")
    print(f"broadcast to {', '.join(everyone)}; gold perk to {', '.join(gold)}\n")
    return sessions


async def show_sessions(sessions: list[Session]) -> None:
    print("Each session's window for its customer's question (tokens per source):")
    for session, question in zip(sessions, QUESTIONS, strict=True):
        # A call of the conversation: the question is recorded, then the window is built.
        window = await session.turn(question)
        text = " ".join(m.content for m in window.messages)
        # Isolation: no other customer's order number reaches this window.
        assert not [o for c, o in ORDERS.items() if c != session.id and o in text]
        print(f"  {session.id:<6} {window.token_count:>4} tokens: {per_source(window)}")


async def show_aggregate(controller: ContextController, sessions: list[Session]) -> None:
    ids = [s.id for s in sessions]
    window = await controller.aggregate_context(ids, SUPERVISOR, BUDGET, strategy="relevance")
    exact = controller.counter.count_messages(window.messages, tools=window.tools)
    print(
        f"\nSupervisor: {SUPERVISOR!r} across the three sessions, split by relevance:\n"
        f"  {window.token_count} tokens (recounted: {exact}) of a {BUDGET}-token budget"
    )
    shares = {s.name: s.allocated for s in window.report.sources}
    found = per_session(window)
    for name in [*ids, "shared"]:
        origins = found.get(name, {})
        detail = "  ".join(f"{o} {n}" for o, n in sorted(origins.items())) or "-"
        used = sum(origins.values())
        if name == "shared":
            print(f"  instructions and question, used {used:>3}: {detail}")
        else:
            print(f"  {name:<6} share {shares[f'session:{name}']:>3}, used {used:>3}: {detail}")
    text = "\n".join(m.content for m in window.messages)
    print(
        f"  the broadcast appears {text.count('3 working days')} time(s), the instructions "
        f"{text.count(INSTRUCTIONS)}\n  the agent-level L3 now holds "
        f"{len(controller.memory.get_l3_summaries())} summaries of the sessions' L2 tasks"
    )


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "support.db"
        with SQLiteStore(path) as store:
            async with ContextController(store) as controller:
                sessions = await converse(controller)
                await show_sessions(sessions)
                await show_aggregate(controller, sessions)
                await controller.get_session("ben").pause()
                await controller.end_session("ana")  # archived at the agent level

        with SQLiteStore(path) as store:
            async with ContextController(store) as again:
                states = ", ".join(
                    f"{sid} {again.get_session(sid).state.value}" for sid in again.session_ids()
                )
                hits = again.memory.search_tasks("torn cover", limit=1)
                print(
                    f"\nAfter a restart: {states}; ana's archive has her first turn: "
                    f"{hits[0].task_id if hits else None}"
                )


if __name__ == "__main__":
    asyncio.run(main())

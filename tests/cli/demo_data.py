"""Writes the demo's bundled conversation: `python -m tests.cli.demo_data`.

A product lead (Maya) and her assistant run "Lantern", the new online ordering system of
Tidewater Books, over eight weeks: stand-ups, bug triage, reviews, ticket searches (tool
calls), and now and then a decision that `loomctx demo` later asks about. The filler is drawn
from templates with a fixed seed, so the file is the same on every run and every machine;
`test_demo_data.py` checks that the bundled file is exactly what this script writes.

The facts the demo's questions need (and where they are) are listed in `FACTS`; a few
distractors mention the same words (the launch, the database, payments) on purpose, as a
real conversation does.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

OUT = Path(__file__).parents[2] / "src" / "loomctx" / "_data" / "demo" / "conversation.jsonl"
SEED = 20250301
DAYS = 40

PEOPLE = ["Tom", "Priya", "Jonas", "Aiko", "Dev", "Lena", "Marcus"]
COMPONENTS = ["search", "checkout", "inventory", "accounts", "email receipts", "admin panel"]
BUGS = [
    "the cart badge shows the old count after a refresh",
    "ISBN search ignores hyphens",
    "the order confirmation email has a broken logo",
    "sorting by price puts out-of-stock books first",
    "the password reset link expires after five minutes",
    "gift cards cannot be combined with a discount code",
    "the admin export times out for more than 5,000 orders",
    "author names with accents are garbled in receipts",
    "the wishlist loses items when a user logs in on a second device",
    "the stock count goes negative when two orders race",
]
FEATURES = [
    "let customers reserve a book for pickup",
    "show the shelf location in the store",
    "add a 'staff picks' carousel to the home page",
    "send a reminder when a reserved book is about to be released",
    "support paying with store credit",
    "let customers follow an author",
]
PR_TITLES = [
    "retry failed webhooks with backoff",
    "cache the category tree",
    "move prices to integer cents",
    "paginate the order history",
    "index books by normalized ISBN",
    "split the checkout form into steps",
]

# Decisions the demo asks about, on fixed days, each an exchange (user, assistant).
FACTS: dict[int, tuple[str, str]] = {
    2: (
        "We need to settle the database for the inventory service today. Tom likes MongoDB, "
        "Jonas wants PostgreSQL. What do you recommend?",
        "Decision for the record: the inventory service database is PostgreSQL 16, not MongoDB. "
        "Stock updates must be transactional (two orders for the last copy must never both "
        "succeed), and Postgres gives us row locks and constraints for that.",
    ),
    9: (
        "Leadership wants a launch date. Is March 14 realistic if checkout is done by March 1?",
        "Yes: with checkout done by March 1, a public launch on March 14 leaves two weeks for "
        "the beta. I have put March 14 in the plan as the launch date.",
    ),
    14: (
        "Who should own the payments integration? I want one name per area.",
        "Owners, one per area: Priya Raman owns the payments integration (the Stripe account, "
        "webhooks and refunds), Tom owns search, Aiko owns accounts, and Jonas owns inventory.",
    ),
    22: (
        "Checkout was down for 40 minutes last night. What was the root cause?",
        "The root cause of the checkout outage: the TLS certificate on the payment gateway "
        "proxy expired at 21:00, so every payment call failed. Dev renewed it by hand; the "
        "fix is automatic renewal with cert-manager, which is now on the proxy.",
    ),
    30: (
        "Stripe says our payment certification needs two more weeks. What does that do to "
        "the launch?",
        "It moves the launch: the new launch date is April 2, not March 14, because the "
        "payment provider certification slipped by two weeks. I told the leadership channel "
        "and updated the plan.",
    ),
}


def _ticket(rng: random.Random) -> int:
    return rng.randint(180, 940)


def _filler(rng: random.Random, day: int) -> Iterator[list[dict[str, Any]]]:
    """Exchanges of everyday project work: each a list of OpenAI-format messages."""
    person = rng.choice(PEOPLE)
    comp = rng.choice(COMPONENTS)
    bug = rng.choice(BUGS)
    kind = rng.randrange(7)
    if kind == 0:
        n = rng.randint(2, 9)
        yield [
            {"role": "user", "content": f"How many bugs are open in {comp} right now?"},
            {
                "role": "assistant",
                "content": f"{n} open bugs in {comp}. The oldest is #{_ticket(rng)}: {bug}. "
                f"{person} has it and expects a fix this week.",
            },
        ]
    elif kind == 1:
        yield [
            {"role": "user", "content": "Draft my stand-up note for today, short please."},
            {
                "role": "assistant",
                "content": f"Yesterday: reviewed the {comp} changes with {person}. Today: "
                f"triage the new {rng.choice(COMPONENTS)} reports and unblock the beta "
                "checklist. Blockers: none.",
            },
        ]
    elif kind == 2:
        feature = rng.choice(FEATURES)
        yield [
            {
                "role": "user",
                "content": f"{person} asked whether we could {feature}. Worth doing before "
                "the launch?",
            },
            {
                "role": "assistant",
                "content": f"Not before the launch: it touches {comp} and needs design work. "
                f"I added it to the post-launch list with a note from {person}.",
            },
        ]
    elif kind == 3:
        pr = rng.randint(40, 400)
        title = rng.choice(PR_TITLES)
        yield [
            {"role": "user", "content": f"Any concerns with PR #{pr} ({title})?"},
            {
                "role": "assistant",
                "content": f"PR #{pr} looks good overall. Two notes for {person}: add a test "
                "for the empty case, and log the retry count so we can see it in the "
                "dashboard.",
            },
        ]
    elif kind == 4:
        call_id = f"call_{day}_{rng.randint(1000, 9999)}"
        found = rng.sample(BUGS, 2)
        a, b = _ticket(rng), _ticket(rng)
        yield [
            {"role": "user", "content": f"Search the tracker for anything new about {comp}."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": "search_tickets",
                            "arguments": json.dumps({"query": comp, "status": "open"}),
                        },
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": f"2 tickets: #{a} {found[0]} (assignee {person}); #{b} {found[1]} "
                "(unassigned)",
            },
            {
                "role": "assistant",
                "content": f"Two open tickets in {comp}: #{a} ({found[0]}), which {person} "
                f"has, and #{b} ({found[1]}), still unassigned.",
            },
        ]
    elif kind == 5:
        yield [
            {"role": "user", "content": f"Can {person} take #{_ticket(rng)}: {bug}?"},
            {
                "role": "assistant",
                "content": f"{person} has room this sprint, so yes; I assigned it and linked "
                f"the {comp} design notes.",
            },
        ]
    else:
        hours = rng.randint(2, 12)
        yield [
            {"role": "user", "content": f"How did the {comp} load test go?"},
            {
                "role": "assistant",
                "content": f"It held 300 orders a minute for {hours} hours with a p95 under "
                f"400 ms. {person} wants one more run with the search cache turned off.",
            },
        ]


def conversation() -> list[dict[str, Any]]:
    """The whole conversation, in OpenAI chat format, oldest first."""
    rng = random.Random(SEED)
    messages: list[dict[str, Any]] = []
    for day in range(1, DAYS + 1):
        messages.append({"role": "user", "content": f"Good morning! Day {day} of the Lantern "
                                                    "project, what is on my plate?"})  # fmt: skip
        messages.append(
            {
                "role": "assistant",
                "content": f"Morning, Maya. Top of the list: the {rng.choice(COMPONENTS)} "
                f"review with {rng.choice(PEOPLE)}, then the beta checklist.",
            }
        )
        for _ in range(rng.randint(1, 3)):
            for exchange in _filler(rng, day):
                messages.extend(exchange)
        if day in FACTS:
            question, answer = FACTS[day]
            messages.append({"role": "user", "content": question})
            messages.append({"role": "assistant", "content": answer})
    return messages


def render() -> str:
    """The file's text: one JSON message per line."""
    return "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in conversation())


if __name__ == "__main__":
    OUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUT} ({len(conversation())} messages)")

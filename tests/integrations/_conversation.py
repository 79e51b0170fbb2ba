"""A conversation for the adapters' tests: a fact said early, then turns that push it out of
the window's history, then a question about it; and the checks every adapter's window meets."""

from __future__ import annotations

from collections.abc import Sequence

from loomctx import LoomMemory, MemoryEmbedding
from loomctx.messages import Message, split_units
from loomctx.tokens import TiktokenCounter

WINDOW = 900
"""The adapters' window in the tests: far less than the conversation."""

FACT = "Remember this: the vault code for the Lisbon office is 7421."
QUESTION = "What is the vault code for the Lisbon office?"
FILLER = [
    f"Turn {i}: please check the weather in city number {i} and tell me whether the "
    f"ferry schedule for harbour {i} changes this week; also note that shipment batch "
    f"{i} is packed in crates of {i + 3} boxes each, stacked by the loading dock."
    for i in range(14)
]


def memory() -> LoomMemory:
    """A conversation's memory: lexical search, an in-memory SQLite store."""
    return LoomMemory("conversation", embedder=None, embedding=MemoryEmbedding(fast_embedder=None))


def check_window(messages: Sequence[Message], *, budget: int = WINDOW) -> None:
    """Within `budget` tokens, each tool call with its result (`split_units` raises for a
    call without its result or a result without its call)."""
    counter = TiktokenCounter()
    assert counter.count_messages(list(messages)) <= budget
    units = split_units(list(messages))
    calls = [c.id for u in units for m in u.messages for c in m.tool_calls]
    results = [m.tool_call_id for u in units for m in u.messages if m.role == "tool"]
    assert sorted(calls) == sorted(r for r in results if r is not None)

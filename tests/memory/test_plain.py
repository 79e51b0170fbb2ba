"""The plain path: `LoomMemory.add(messages)` in the formats users have, `recall(query)` as
plain data that sees what was just added; `ContextOrchestrator.build_sync`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from loomctx import MemoryEmbedding
from loomctx.context.orchestrator import ContextOrchestrator
from loomctx.context.sources.memory import L1RecentSource
from loomctx.context.sources.prompt import PromptSource, UserInputSource
from loomctx.errors import ConfigError, MessageFormatError
from loomctx.memory.core import SYNC_EMBED_LIMIT, LoomMemory
from loomctx.memory.plain import Recall
from loomctx.messages import Message
from loomctx.testing.embedders import HashingEmbedder

OPENAI = [
    {"role": "system", "content": "You are a travel agent."},
    {"role": "user", "content": "Book me a flight to Lisbon on 3 June; I prefer aisle seats."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "book_flight", "arguments": '{"to": "LIS"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "booked: TP1351, seat 14C"},
    {"role": "assistant", "content": "Done: TP1351 on 3 June, aisle seat 14C."},
]
ANTHROPIC = [
    {"role": "user", "content": "What is the weather in Oslo?"},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "tu_1", "name": "weather", "input": {"city": "Oslo"}},
        ],
    },
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "snow, -4 C"}],
    },
]


@pytest.fixture
def memory() -> Iterator[LoomMemory]:
    m = LoomMemory("plain", embedder=HashingEmbedder(dim=64))
    yield m
    m.close()


def test_add_openai_messages_and_recall_plain_data(memory: LoomMemory) -> None:
    ids = memory.add(OPENAI)
    assert len(ids) == 3  # the system message is not remembered; the call and result are one
    found = memory.recall("Lisbon aisle seat", limit=3)
    assert isinstance(found, Recall)
    assert found.search == "hybrid"
    assert found.note == ""
    assert found.items[0].role == "user"
    assert "aisle" in found.items[0].content
    assert {i.role for i in found} <= {"user", "assistant", "tool"}
    data = found.to_dict()
    assert json.loads(json.dumps(data)) == data  # JSON types only
    assert data["items"][0]["said_at"].endswith("+00:00")


def test_just_added_items_are_found_by_vectors_at_once(memory: LoomMemory) -> None:
    memory.add([{"role": "user", "content": "My cat Miso hates thunderstorms."}])
    found = memory.recall("Miso thunderstorms")
    assert found.items
    assert "dense" in found.items[0].via
    assert found.note == ""


def test_a_large_add_says_what_vectors_did_not_see_yet() -> None:
    memory = LoomMemory(
        "plain-big",
        embedder=HashingEmbedder(dim=32),
        embedding=MemoryEmbedding(in_background=False),
    )
    try:
        turns = [{"role": "user", "content": f"note {i}: the code is {i * 7}"} for i in range(3)]
        memory.add(turns, embed=False)
        found = memory.recall("the code is 14")
        assert found.search == "hybrid"
        assert found.note.startswith("3 item(s) not embedded yet")
        assert found.items  # found by their words all the same
        assert memory.background is not None
        memory.background.drain()
        assert memory.recall("the code is 14").note == ""
        # More than the limit is left to the background by default.
        many = [{"role": "user", "content": f"line {i}"} for i in range(SYNC_EMBED_LIMIT + 1)]
        memory.add(many)
        assert memory.recall("line 3").note.startswith(f"{SYNC_EMBED_LIMIT + 1} item(s)")
    finally:
        memory.close()


def test_anthropic_messages_are_told_from_their_blocks(memory: LoomMemory) -> None:
    ids = memory.add(ANTHROPIC)
    assert len(ids) == 3  # user, the assistant's text, the tool call with its result
    tool = [i for i in memory.recall("Oslo weather snow", limit=5) if i.role == "tool"]
    assert tool
    assert tool[0].content == "snow, -4 C"


def test_strings_and_loom_messages_and_a_named_format() -> None:
    memory = LoomMemory("plain-lex", embedder=None)
    try:
        memory.add("I am allergic to peanuts.")
        memory.add([Message.assistant("Noted: no peanuts.")], session_id="s1")
        memory.add([{"role": "user", "content": "Plain dicts read the same."}], format="anthropic")
        found = memory.recall("peanuts")
        assert found.search == "lexical"
        assert "no embedder" in found.note
        assert [i.role for i in found] == ["user", "assistant"] or [i.role for i in found] == [
            "assistant",
            "user",
        ]
        assert any(i.session_id == "s1" for i in found)
    finally:
        memory.close()


@pytest.mark.parametrize(
    ("payload", "kwargs", "error", "needle"),
    [
        ({"role": "user", "content": "x"}, {}, ConfigError, "list of messages"),
        ([Message.user("a"), {"role": "user", "content": "b"}], {}, ConfigError, "one kind"),
        ([{"content": "no role"}], {}, MessageFormatError, "role"),
        ([{"role": "user", "content": "x"}], {"format": "gemini"}, ConfigError, "`format`"),
        (42, {}, ConfigError, "int"),
    ],
)
def test_bad_input_is_a_typed_error(
    payload: object, kwargs: dict[str, str], error: type[Exception], needle: str
) -> None:
    memory = LoomMemory("plain-bad", embedder=None)
    try:
        with pytest.raises(error, match=needle):
            memory.add(payload, **kwargs)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="limit"):
            memory.recall("x", limit=0)
        with pytest.raises(ConfigError, match="string"):
            memory.recall(["x"])  # type: ignore[arg-type]
    finally:
        memory.close()


def test_build_sync_without_a_loop_and_its_error_inside_one() -> None:
    memory = LoomMemory("plain-sync", embedder=None)
    memory.add(OPENAI)
    orchestrator = ContextOrchestrator(
        sources=[PromptSource("You help."), L1RecentSource(memory), UserInputSource()],
        model_context_window=4000,
    )
    try:
        window = orchestrator.build_sync("Which seat did I get?")
        assert window.messages[-1].content == "Which seat did I get?"
        assert any("14C" in m.content for m in window.messages)

        async def inside() -> None:
            orchestrator.build_sync("again")

        with pytest.raises(ConfigError, match=r"await orchestrator\.build"):
            asyncio.run(inside())
    finally:
        memory.close()


def test_one_loom_message_and_the_length_of_a_recall() -> None:
    memory = LoomMemory("plain-one", embedder=None)
    try:
        memory.add(Message.user("The staging port is 8443."))
        found = memory.recall("staging port")
        assert len(found) == 1
        assert found.items[0].content == "The staging port is 8443."
    finally:
        memory.close()

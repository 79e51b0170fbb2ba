"""What is new in a conversation a client (or an agent framework) sends whole every time.

The proxy keeps, per session, how many of the client's messages it has recorded (`count`) and
the digests of the first and the last of them. A request whose message at ``count - 1``
and whose first message have those digests extends what was recorded: the messages from
`count` on are new. That is the usual case, and it is checked in constant time however long
the history is: only the messages from the current turn on are converted, and the known part
of a long history (re-sent on every call) costs the proxy one pass over its roles.

A request that does not match (the client trimmed its history, edited it, or regenerated a
reply) is taken from its last user message on: that turn is new, what came before it is
treated as known, and the session's marks restart from this request. An edit in the middle
of a history whose first and last messages are unchanged is not seen: the memory keeps the
version it recorded (the window is built from memory, not from the client's copy).

A digest covers what a message means, not how the client spelled it (``content: null``
or ``""``, key order, the arguments' JSON spacing): role, text, tool calls (id, name, parsed
arguments), and the id a tool result answers. So the reply Loom recorded matches the copy of
it the client sends back.

System messages are not conversation: they are the client's instructions, sent as the
window's system prompt on every call, never recorded.

A request whose turn is recorded already (a retry) is told apart by its key: see
`loomctx.server._ledger` (the proxy's).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loomctx.messages import Message, from_openai
from loomctx.parts import part_to_openai

__all__ = ["Split", "message_digest", "request_digest", "split_request"]


def message_digest(message: Message) -> str:
    """A digest of what `message` says (see the module docstring)."""
    calls = [[c.id, c.name, c.arguments] for c in message.tool_calls]
    payload: list[Any] = [message.role, message.content, calls, message.tool_call_id or ""]
    if message.parts:  # images and files (a text-only message keeps its digest)
        payload.append([part_to_openai(p) for p in message.parts])
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _raw_digest(raw: Mapping[str, Any]) -> str:
    return message_digest(from_openai([raw])[0])


@dataclass(frozen=True, slots=True, kw_only=True)
class Split:
    """A request's conversation (system messages removed), split.

    - `total`: how many messages the conversation has;
    - `known`: how many leading ones earlier requests recorded;
    - `turn_start`: the index of the last user message (the current turn), or `total`;
    - `tail`: the messages from `offset` on (``min(known, turn_start)``), converted;
    - `first`, `last`: the digests of the first and the last message;
    - `diverged`: the history did not extend the recorded one.
    """

    total: int
    known: int
    turn_start: int
    offset: int
    tail: tuple[Message, ...]
    first: str
    last: str
    diverged: bool

    def _at(self, index: int) -> int:
        return index - self.offset

    @property
    def new(self) -> tuple[Message, ...]:
        """The messages to record now."""
        return self.tail[self._at(self.known) :]

    @property
    def query(self) -> str:
        """The current user turn's text ("" without one)."""
        if self.turn_start < self.total:
            return self.tail[self._at(self.turn_start)].content
        return ""

    @property
    def turn_message(self) -> Message | None:
        """The current user turn's message, with its images and files (None without one)."""
        if self.turn_start < self.total:
            return self.tail[self._at(self.turn_start)]
        return None

    @property
    def in_flight(self) -> tuple[Message, ...]:
        """What follows the user turn: the exchange of this turn so far (tool units)."""
        return self.tail[self._at(self.turn_start) + 1 :]

    @property
    def before_turn(self) -> tuple[Message, ...]:
        """The new messages before the current turn (an imported history)."""
        return self.tail[self._at(self.known) : max(0, self._at(self.turn_start))]

    @property
    def current(self) -> tuple[Message, ...]:
        """The new messages of the current turn."""
        return self.tail[max(self._at(self.known), self._at(self.turn_start)) :]


def split_request(
    conversation: Sequence[Mapping[str, Any]], *, count: int, first: str, last: str
) -> Split:
    """Split the client's `conversation` (OpenAI messages, no system ones) given what the
    session recorded: `count` messages, the first and the last with digests `first` and
    `last`. Raises `MessageFormatError` for a malformed message it converts."""
    total = len(conversation)
    turn_start = next(
        (i for i in range(total - 1, -1, -1) if conversation[i].get("role") == "user"), total
    )
    extends = count == 0 or (
        count <= total
        and _raw_digest(conversation[0]) == first
        and _raw_digest(conversation[count - 1]) == last
    )
    known = count if extends else min(turn_start, total)
    offset = min(known, turn_start)
    tail = tuple(from_openai(conversation[offset:]))
    head = tail[0] if offset == 0 and tail else None
    return Split(
        total=total,
        known=known,
        turn_start=turn_start,
        offset=offset,
        tail=tail,
        first=(message_digest(head) if head is not None else _raw_digest(conversation[0]))
        if total
        else "",
        last=message_digest(tail[-1]) if tail else last,
        diverged=not extends,
    )


def request_digest(conversation: Sequence[Mapping[str, Any]], split: Split) -> str:
    """A digest of the request itself, whatever the session recorded: how many messages it
    has, its first message, the message before its last user message, and everything from
    that user message on. The same for a retry, different for the next turn or a changed
    message of the current one; constant time in the history's length, as `split_request`
    is (an edit in the middle of the history is not seen, as there)."""
    start = split.turn_start
    before = ""
    if 0 < start <= split.total:
        at = split._at(start - 1)
        before = message_digest(split.tail[at]) if at >= 0 else _raw_digest(conversation[start - 1])
    turn = [message_digest(m) for m in split.tail[max(0, split._at(start)) :]]
    text = json.dumps([split.total, split.first, before, turn], separators=(",", ":"))
    return hashlib.sha256(text.encode("ascii")).hexdigest()

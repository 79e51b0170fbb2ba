"""What is new in a client's request: the client sends its whole history every time.

The proxy keeps, per session, how many of the client's messages it has recorded and a hash
chain over them: ``h(0) = ""``, ``h(i) = sha256(h(i-1) + fingerprint(message i))``. A request
whose first `count` messages chain to the stored hash simply extends what was recorded: the
rest is new (the usual case, checked in one pass over the messages, whatever the length of
the history). A request that does not (the client trimmed its history, or edited it, or
regenerated a reply) is taken from its last user message on: that turn is new, what came
before it is treated as already known, and the chain restarts from this request.

A fingerprint covers what a message means, not how the client spelled it (``content: null``
or ``""``, key order, the arguments' JSON spacing): role, text, tool calls (id, name, parsed
arguments), and the id a tool result answers. So the reply Loom recorded matches the copy of
it the client sends back.

System messages are not part of the chain: they are the client's instructions, sent as the
window's system prompt on every call, never recorded as conversation.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from loomctx.messages import Message

__all__ = ["Split", "chain", "fingerprint", "split_request"]


def fingerprint(message: Message) -> str:
    """A digest of what `message` says (see the module docstring)."""
    calls = [[c.id, c.name, c.arguments] for c in message.tool_calls]
    payload = [message.role, message.content, calls, message.tool_call_id or ""]
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def chain(previous: str, message: Message) -> str:
    """The hash chain after `message`."""
    return hashlib.sha256((previous + fingerprint(message)).encode("ascii")).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class Split:
    """A request's conversation (system messages removed), split.

    - `known`: how many leading messages were recorded by earlier requests;
    - `turn_start`: the index of the last user message (the current turn), or
      ``len(messages)`` if there is none;
    - `hashes`: the chain after each message (``hashes[i]`` after ``messages[:i]``);
    - `diverged`: the history did not extend the recorded one.
    """

    messages: tuple[Message, ...]
    known: int
    turn_start: int
    hashes: tuple[str, ...]
    diverged: bool

    @property
    def new(self) -> tuple[Message, ...]:
        """The messages to record now."""
        return self.messages[self.known :]

    @property
    def query(self) -> str:
        """The current user turn's text ("" without one)."""
        if self.turn_start < len(self.messages):
            return self.messages[self.turn_start].content
        return ""

    @property
    def in_flight(self) -> tuple[Message, ...]:
        """What follows the user turn: the exchange of this turn so far (tool units)."""
        return self.messages[self.turn_start + 1 :]


def split_request(messages: Sequence[Message], *, count: int, head: str) -> Split:
    """Split `messages` (no system messages) given what a session recorded: `count`
    messages with chain hash `head`."""
    hashes = [""]
    for m in messages:
        hashes.append(chain(hashes[-1], m))
    turn_start = next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"),
        len(messages),
    )
    if count <= len(messages) and hashes[count] == head:
        known, diverged = count, False
    else:
        known, diverged = min(turn_start, len(messages)), True
    return Split(
        messages=tuple(messages),
        known=known,
        turn_start=turn_start,
        hashes=tuple(hashes),
        diverged=diverged,
    )

"""The client's own ``cache_control`` marks on ``POST /v1/messages``, carried to the window.

An Anthropic client marks where its prompt may be cached: on a system block, on a tool, on a
block of a message. Loom builds the window from the session's memory, not from the client's
copy, so each mark is moved to the matching content of the window Loom sends:

- a mark on a system block goes on the window's system prompt (Loom's instructions, then the
  client's: the stable prefix), with the client's ``ttl``;
- a mark on a tool goes on that tool (by name);
- a mark on a block of a message goes on the last block of that message in the window, if
  the window holds it whole; a message Loom left out of the window cannot carry it: the mark
  is counted as left out (the ``X-Loom-Cache-Marks`` header), not an error;
- Loom's own breakpoints (`loomctx.messages.mark_anthropic_cache`) fill what is left of
  Anthropic's four.

A request with more than four marks, or a ``cache_control`` that is not
``{"type": "ephemeral"}`` with an optional ``ttl`` of ``"5m"`` or ``"1h"``, is refused with a
400, as Anthropic refuses it. An OpenAI upstream takes no marks (OpenAI caches prompt prefixes
by itself): the header says they were not sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from loomctx.messages import CacheMarks, Message
from loomctx.server._errors import RequestError

__all__ = ["ClientMarks", "MarkedMessage", "check_count", "control_of", "header_of", "message_key"]

_MAX_MARKS: Final = 4
_TTLS: Final = ("5m", "1h")


def control_of(raw: Any, where: str) -> Mapping[str, Any] | None:
    """The ``cache_control`` of the block or tool `raw` (None if it has none), or a 400
    naming `where` it is wrong."""
    if not isinstance(raw, Mapping) or raw.get("cache_control") is None:
        return None
    control = raw["cache_control"]
    if (
        not isinstance(control, Mapping)
        or control.get("type") != "ephemeral"
        or set(control) - {"type", "ttl"}
        or control.get("ttl", "5m") not in _TTLS
    ):
        raise RequestError(
            f'`{where}.cache_control` must be {{"type": "ephemeral"}}, with an optional '
            f'`ttl` of "5m" or "1h"; got {control!r:.80}',
            param="cache_control",
        )
    return dict(control)


def check_count(count: int) -> None:
    """A 400 if a request has `count` marks, more than Anthropic allows."""
    if count > _MAX_MARKS:
        raise RequestError(
            f"the request has {count} blocks with `cache_control`; Anthropic allows at most "
            f"{_MAX_MARKS}: remove the earliest",
            param="cache_control",
        )


def message_key(message: Message) -> tuple[Any, ...]:
    """What tells a message of the client's request in the window Loom built."""
    calls = tuple(call.id for call in message.tool_calls)
    return (message.role, message.content, message.tool_call_id, calls)


@dataclass(frozen=True, slots=True, kw_only=True)
class MarkedMessage:
    """A message the client marked: its key, how many messages with the same key follow it
    in the request (the window keeps the newest), and the mark."""

    key: tuple[Any, ...]
    later: int
    control: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientMarks:
    """The marks of one request, before the window is built."""

    system: Mapping[str, Any] | None = None
    tools: Mapping[str, Mapping[str, Any]]
    messages: tuple[MarkedMessage, ...] = ()

    def __len__(self) -> int:
        return (self.system is not None) + len(self.tools) + len(self.messages)

    def resolve(self, messages: Sequence[Message]) -> tuple[CacheMarks, int]:
        """The marks placed on `messages` (the window sent), and how many marks are left
        out because their message is not in it."""
        keys = [message_key(m) for m in messages]
        ends: dict[int, Mapping[str, Any]] = {}
        left_out = 0
        for marked in self.messages:
            at = [i for i, key in enumerate(keys) if key == marked.key]
            if len(at) > marked.later:
                ends[at[-1 - marked.later] + 1] = marked.control
            else:
                left_out += 1
        has_system = any(m.role == "system" and m.content for m in messages)
        if self.system is not None and not has_system:
            left_out += 1
        marks = CacheMarks(
            system=self.system if has_system else None, tools=dict(self.tools), ends=ends
        )
        return marks, left_out


def header_of(marks: ClientMarks, left_out: int, *, sent: bool) -> str:
    """The ``X-Loom-Cache-Marks`` header: how many of the client's marks were sent, left
    out of the window, or not sent because the upstream takes none."""
    if not sent:
        return f"kept=0, left_out=0, not_sent={len(marks)}"
    return f"kept={len(marks) - left_out}, left_out={left_out}, not_sent=0"

"""What builds remember of a session's previous windows (`LayoutState`), and the sizes that
predict what a provider's prompt cache reads of the next one: the prefix a window repeats of
the previous one (`repeated_prefix_tokens`) and the prompt's size at each cache breakpoint
(`cache_marks`)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loomctx.context.compactor import HistoryMark
from loomctx.context.render import Layout
from loomctx.errors import check_int
from loomctx.messages import Message
from loomctx.tokens import TOKENS_REPLY_PRIMING, TokenCounter

__all__ = ["LayoutState", "cache_marks", "repeated_prefix_tokens"]


def repeated_prefix_tokens(
    counter: TokenCounter,
    previous: tuple[Sequence[Message], Sequence[Mapping[str, Any]]] | None,
    messages: Sequence[Message],
    tools: Sequence[Mapping[str, Any]],
    total: int | None = None,
) -> int:
    """Tokens of a prompt (`messages` and `tools`) that repeat, in place, the `previous`
    prompt of the conversation: the tools, then the longest run of leading messages equal to
    the previous ones. What a provider's exact-prefix cache can read (0 for a first prompt,
    or when the tools changed, since they come first).

    `total` is the prompt's whole count, if known: a prefix longer than half the prompt is
    then measured as `total` less what follows it, as `cache_marks` measures one (message
    counts add up), so a build does not count its whole history again."""
    if previous is None or not previous[0] or list(previous[1]) != list(tools):
        return 0
    k = 0
    for old, new in zip(previous[0], messages, strict=False):
        if old is not new and old != new:
            break
        k += 1
    if k == 0:
        return counter.count_messages([], tools=tools) if tools else 0
    if total is not None and k >= len(messages):
        return total
    if total is not None and 2 * k > len(messages):
        return total - counter.count_messages(messages[k:]) + TOKENS_REPLY_PRIMING
    return counter.count_messages(messages[:k], tools=tools)


def cache_marks(
    counter: TokenCounter,
    messages: Sequence[Message],
    tools: Sequence[Mapping[str, Any]],
    layout: Layout,
    total: int | None = None,
) -> tuple[int, ...]:
    """The prompt's sizes (tools, then messages) up to each cache breakpoint Loom marks: the
    stable prefix (the system message, or the tools without one), then `layout`'s
    `breakpoints` (as `ContextWindow.to_anthropic` marks them); ascending, distinct.

    `total` is the prompt's whole count, if known. A breakpoint in the second half of the
    prompt is measured as `total` less what follows it (message counts add up: each message
    is counted on its own, the reply priming once), so a build counts a few messages again,
    never its whole history."""
    if total is None:
        total = counter.count_messages(messages, tools=tools)
    out = []
    for end in sorted({layout.prefix_end, *layout.breakpoints()}):
        if end == 0 and not tools:
            continue
        if end >= len(messages):
            out.append(total)
        elif 2 * end > len(messages):
            out.append(total - counter.count_messages(messages[end:]) + TOKENS_REPLY_PRIMING)
        else:
            out.append(counter.count_messages(messages[:end], tools=tools))
    return tuple(sorted(set(out)))


class LayoutState:
    """What builds remember of a session's previous windows: where each history source's
    kept history starts and its frozen summary (`HistoryMark`), the previous window's
    messages and tools (to measure how much of the next one repeats it), the sizes of its
    prefixes up to each cache breakpoint and when it was built (to predict what the
    provider's cache reads: nothing once the session was idle past the cache's lifetime).
    `clock` gives that time in seconds (default `time.monotonic`; a test passes its own). At
    most `max_sessions` sessions are remembered, the least recently built forgotten first (a
    forgotten session's next window starts its history afresh)."""

    def __init__(
        self, *, max_sessions: int = 1024, clock: Callable[[], float] = time.monotonic
    ) -> None:
        check_int(max_sessions, "`max_sessions`", minimum=1)
        self.max_sessions = max_sessions
        self.clock = clock
        self._sessions: OrderedDict[str, _Session] = OrderedDict()

    def _session(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            session = self._sessions[session_id] = _Session()
            if len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(session_id)
        return session

    def marks(self, session_id: str) -> dict[str, HistoryMark]:
        """The history marks of a session's last window, by history source (a copy)."""
        session = self._sessions.get(session_id)
        return dict(session.marks) if session is not None else {}


@dataclass(slots=True)
class _Session:
    marks: dict[str, HistoryMark] = field(default_factory=dict)
    messages: tuple[Message, ...] = ()
    tools: tuple[Mapping[str, Any], ...] = ()
    cache_marks: tuple[int, ...] = ()
    built_at: float | None = None

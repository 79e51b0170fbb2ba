"""`LoomWindow`: Loom's window over a framework's message history, the adapters' one core.

An agent framework hands its adapter the whole conversation before each model call (a
pydantic-ai history processor, a LangGraph pre-model hook, an Agents SDK session's items).
`LoomWindow.build` takes it in Loom's message model and does what the proxy does with a
client's request (`loomctx.context.turns` tells what is new):

1. split: the messages before the last user message are the finished turns; that message is
   the turn's query; what follows it is the turn's exchange so far (tool calls with their
   results);
2. record: finished turns the memory does not have yet become Tasks (each tool call with its
   result, one Task) in the `LoomMemory`; the current turn is not recorded until the next
   user message ends it, so a framework may still drop or replace its messages;
3. build: the one window recipe (`loomctx.context.recipe`) over the system prompt, the
   memory (history as far back as the room allows, important memory and retrieval over the
   archive for what no longer fits) and the turn's exchange, within `window` tokens less the
   reply's reserve.

A malformed history (a tool result without its call, a call without a result before the
current turn) raises `MessageFormatError` before anything is recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from loomctx.context.block import BuildContext
from loomctx.context.orchestrator import ContextWindow, LayoutState
from loomctx.context.recipe import (
    WindowSettings,
    memory_sources,
    window_orchestrator,
    window_sources,
)
from loomctx.context.sources import TurnSource
from loomctx.context.turns import message_digest, split_request
from loomctx.errors import ConfigError, check_int
from loomctx.knowledge import KnowledgeBaseProvider
from loomctx.memory.core import LoomMemory, same_view
from loomctx.memory.task import tasks_from_messages
from loomctx.messages import Message, from_openai, split_units, to_openai

__all__ = ["DEFAULT_WINDOW", "LoomWindow", "Marks", "WindowAdapter"]

DEFAULT_WINDOW = 16_000
"""The default `LoomWindow.window`: tokens for the messages, the reply's reserve included."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Marks:
    """How much of a conversation the memory holds: its first `count` messages (system
    messages left out), the first and the last of them with digests `first` and `last`.
    A new history that keeps them extends the recorded one; see `loomctx.context.turns`."""

    count: int = 0
    first: str = ""
    last: str = ""


class LoomWindow:
    """Loom's window for the next model call over a framework's conversation (see the module
    docstring), with `memory` as the conversation's memory.

    - `window`: the tokens the window's messages may take, the reply's reserve included
      (the model's context window less what the framework sends beside the messages, such
      as its tool definitions);
    - `max_output_tokens`: the reply's reserve (default: the orchestrator's share);
    - `settings`: the recipe's `WindowSettings`; `knowledge_bases`: searched with memory;
    - `marks`: what an earlier process recorded of this conversation (`LoomWindow.marks`).
    """

    def __init__(
        self,
        memory: LoomMemory,
        *,
        window: int = DEFAULT_WINDOW,
        max_output_tokens: int | None = None,
        settings: WindowSettings | None = None,
        knowledge_bases: Sequence[KnowledgeBaseProvider] = (),
        marks: Marks | None = None,
    ) -> None:
        if not isinstance(memory, LoomMemory):
            raise ConfigError(f"`memory` must be a LoomMemory, got {type(memory).__name__}")
        check_int(window, "`window` (tokens)", minimum=256)
        self.memory = memory
        self.window = window
        self.max_output_tokens = max_output_tokens
        self.settings = settings or WindowSettings()
        self.marks = marks or Marks()
        """What the memory holds of the conversation (store it to resume in a new process)."""
        self._sources = memory_sources(memory, knowledge_bases, settings=self.settings)
        self._layout = LayoutState()

    def record(self, messages: Sequence[Message]) -> Marks:
        """Record the finished turns of `messages` the memory lacks; return the new marks.
        Raises `MessageFormatError` for a malformed history, before recording anything."""
        return self._split_and_record(messages)[0]

    async def build(self, messages: Sequence[Message], *, system: str = "") -> ContextWindow:
        """The window for the next call over `messages` (the whole conversation so far;
        its system messages, after `system`, are the window's system prompt), recording its
        finished turns in memory first (module docstring)."""
        _, query, in_flight, instructions = self._split_and_record(messages)
        turn = TurnSource()
        for unit in split_units(list(in_flight)):
            turn.add(unit.messages)
        prompt = "\n\n".join(t for t in (system, *instructions) if t)
        orchestrator = window_orchestrator(
            window_sources(prompt, memory=self._sources, turn=turn),
            counter=self.memory.counter,
            window=self.window,
            settings=self.settings,
            max_output_tokens=self.max_output_tokens,
            state=self._layout,
        )
        # A conversation that ends on a reply gets a window that ends on it too (the
        # framework adds the next input after it), as the conversation was handed over.
        ends_on_reply = bool(messages) and messages[-1].role == "assistant"
        with same_view():
            return await orchestrator.build(
                query,
                ctx=BuildContext(session_id=self.memory.node_id, agent_id="integration"),
                prefill=ends_on_reply,
            )

    def _split_and_record(
        self, messages: Sequence[Message]
    ) -> tuple[Marks, str, tuple[Message, ...], list[str]]:
        for i, m in enumerate(messages):
            if not isinstance(m, Message):
                raise ConfigError(f"message {i} must be a Message, got {type(m).__name__}")
        instructions = [m.content for m in messages if m.role == "system"]
        raw = to_openai(m for m in messages if m.role != "system")
        marks = self.marks
        split = split_request(raw, count=marks.count, first=marks.first, last=marks.last)
        tasks = tasks_from_messages(list(split.before_turn), agent="assistant")
        split_units(list(split.in_flight))  # checks the turn's exchange pairs up
        if tasks:
            self.memory.add_tasks(tasks)
            self.memory.promote_tasks()
        # A history shorter than the marks (a framework dropped its last turn) keeps them.
        end = split.turn_start if split.diverged else max(split.known, split.turn_start)
        if end != marks.count or split.diverged:
            last = message_digest(from_openai([raw[end - 1]])[0]) if end else ""
            marks = Marks(count=end, first=split.first if end else "", last=last)
            self.marks = marks
        return marks, split.query, split.in_flight, instructions


class WindowAdapter:
    """What an adapter that hands a framework Loom's window of its messages holds: the
    conversation's `LoomWindow` (`loom`; its constructor's arguments are this one's) and the
    last window built (`last_window`, whose `report` says what went in and why). A subclass
    checks its framework is installed in `_start` (naming the extra to install)."""

    def __init__(
        self,
        memory: LoomMemory,
        *,
        window: int = DEFAULT_WINDOW,
        max_output_tokens: int | None = None,
        settings: WindowSettings | None = None,
        knowledge_bases: Sequence[KnowledgeBaseProvider] = (),
    ) -> None:
        self._start()
        self.loom = LoomWindow(
            memory,
            window=window,
            max_output_tokens=max_output_tokens,
            settings=settings,
            knowledge_bases=knowledge_bases,
        )
        """What builds its windows; `loom.memory` is the conversation's memory."""
        self.last_window: ContextWindow | None = None
        """The last window built."""

    def _start(self) -> None:
        """Called first by `__init__`: raise `MissingExtraError` (naming the extra) if the
        adapter's framework is not installed, and set up the adapter's own state."""

"""A plain conversation history, for users who bring their own list of messages."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from loomctx.context.block import BuildContext, ContextBlock, TokenBudget
from loomctx.context.compactor import SUMMARY_UNITS
from loomctx.context.sources._common import billed, check_source
from loomctx.errors import MessageFormatError
from loomctx.messages import Message, MessageUnit, flatten_units, split_units
from loomctx.tokens import TokenCounter

__all__ = ["HistorySource"]

# Priority of a unit `age` units older than the newest: 0.98 ** age, never below 0.01.
_AGE_DECAY: Final = 0.98
_MIN_PRIORITY: Final = 0.01


class HistorySource:
    """Earlier messages as `history` blocks, one per unit (a plain message, or a tool call
    with all its results), newest first.

    The history is validated with `split_units` when given and on every `append` / `extend`
    (`MessageFormatError` on an orphan result, an unanswered call or a reused call id): add a
    tool unit whole, in one `extend`. Each block holds one unit's `messages`, its index among
    the units (`sequence`), the tokens its messages are billed inside a conversation
    (`token_count`), priority ``max(0.01, 0.98 ** age)`` (the newest unit has age 0) and
    metadata ``{"age": age, "tool_unit": bool}``; blocks are never truncatable. Blocks are
    offered until the next older unit would exceed `budget.ceiling`, so what is offered is
    always a contiguous, newest part of the history (that next unit is offered too when it
    holds an image or a file, so that the report says it was dropped, why, and its size); a
    unit's token count is measured once per token counter, so a build costs the units it
    offers, not the length of the history.

    Once the session's window holds history from some unit on (`BuildContext.history_start`,
    which the orchestrator sets), units more than `SUMMARY_UNITS` older than that one are not
    offered: the window keeps history append-only from there, and a compaction summarizes no
    more than those (at an 8,000-token window, 85 units offered per build instead of 181).
    While the history does not grow, a build hands over the same block objects as the last
    one, so that what the orchestrator derives from them is looked up, not made again.
    """

    __slots__ = (
        "_blocks",
        "_blocks_for",
        "_call_ids",
        "_counter",
        "_tokens",
        "_units",
        "name",
        "priority",
    )

    def __init__(
        self, messages: Sequence[Message] = (), *, name: str = "history", priority: float = 0.8
    ) -> None:
        self.name, self.priority = check_source("HistorySource", name, priority)
        self._units: list[MessageUnit] = []
        self._tokens: list[int] = []  # per unit; -1 until measured with `_counter`
        self._counter: TokenCounter | None = None
        self._call_ids: set[str] = set()
        # The blocks of the last build by unit, valid while the history has `_blocks_for`
        # units (a block's age, and so its priority, is counted from the newest unit).
        self._blocks: dict[int, ContextBlock] = {}
        self._blocks_for = -1
        self._add(messages, "`messages`")

    @property
    def messages(self) -> list[Message]:
        """The whole history, oldest first (a new list)."""
        return flatten_units(self._units)

    def __len__(self) -> int:
        """The number of units (plain messages and tool units) in the history."""
        return len(self._units)

    def append(self, message: Message) -> None:
        """Add one message (a tool call must come with its results: use `extend`)."""
        self._add((message,), "`append`")

    def extend(self, messages: Iterable[Message]) -> None:
        """Add messages: whole units, each tool call followed by all of its results."""
        self._add(messages, "`extend` (messages counted from the first one passed)")

    def _add(self, messages: Iterable[Message], where: str) -> None:
        if isinstance(messages, str | Message):
            raise MessageFormatError(
                f"{where}: expected a list of `Message` values, got {type(messages).__name__}; "
                "wrap a single message in a list"
            )
        batch = list(messages)
        for i, m in enumerate(batch):
            if not isinstance(m, Message):
                raise MessageFormatError(
                    f"{where}: message {i} is a {type(m).__name__}, not a `Message`; convert "
                    "provider payloads with `from_openai` or `from_anthropic`"
                )
        try:
            units = split_units(batch)
        except MessageFormatError as exc:
            raise MessageFormatError(f"{where}: {exc}") from exc
        new_ids = [call.id for unit in units for call in unit.messages[0].tool_calls]
        for call_id in new_ids:
            if call_id in self._call_ids:
                raise MessageFormatError(
                    f"{where}: tool call id {call_id!r} is already used earlier in history "
                    f"`{self.name}`; every tool call needs a unique id"
                )
        self._call_ids.update(new_ids)
        self._units.extend(units)
        self._tokens.extend([-1] * len(units))

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> list[ContextBlock]:
        """The newest units that fit `budget.ceiling` together, newest first."""
        counter = ctx.counter
        if counter is not self._counter:
            self._counter = counter
            self._tokens = [-1] * len(self._units)
            self._blocks_for = -1
        if self._blocks_for != len(self._units):
            self._blocks = {}
            self._blocks_for = len(self._units)
        made = self._blocks
        blocks: list[ContextBlock] = []
        room = budget.ceiling
        newest = len(self._units) - 1
        start = ctx.history_start.get(self.name)
        oldest = 0 if start is None else max(0, min(start, newest) - SUMMARY_UNITS)
        for k in range(newest, oldest - 1, -1):
            block = made.get(k)
            if block is None:
                unit = self._units[k]
                tokens = self._tokens[k]
                if tokens < 0:
                    tokens = self._tokens[k] = billed(counter, unit.messages)
                age = newest - k
                block = made[k] = ContextBlock(
                    source=self.name,
                    section="history",
                    messages=unit.messages,
                    token_count=tokens,
                    priority=max(_MIN_PRIORITY, _AGE_DECAY**age),
                    truncatable=False,
                    sequence=k,
                    metadata={"age": age, "tool_unit": unit.is_tool_unit},
                )
            if block.token_count > room:
                if any(m.parts for m in block.messages):
                    # Offered all the same, so that the report says the image was dropped,
                    # why, and its size, instead of the history silently ending before it.
                    blocks.append(block)
                break
            room -= block.token_count
            blocks.append(block)
        return blocks

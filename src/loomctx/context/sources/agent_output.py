"""Earlier outputs of the agent, worth less the older they are."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from loomctx.context.block import BuildContext, ContextBlock, TokenBudget
from loomctx.context.sources._common import check_source, fit_ceiling, short
from loomctx.errors import ConfigError, check_int

__all__ = ["AgentOutputSource"]


class AgentOutputSource:
    """The agent's earlier outputs (answers, intermediate results), decayed by age.

    `add(text, turn=...)` records an output; `outputs` given at construction are added at turns
    0, 1, 2, ... Only the last `max_outputs` are kept. Each output is offered as a truncatable
    `context` block, newest first, with priority ``decay ** age``, where `age` is the latest
    turn minus the output's turn, and metadata ``{"turn": turn, "age": age}``. Blank outputs
    are not offered; blocks beyond `budget.ceiling` are cut or left out.
    """

    __slots__ = ("_added", "_outputs", "decay", "max_outputs", "name", "priority")

    def __init__(
        self,
        outputs: Sequence[str] = (),
        *,
        name: str = "agent_output",
        priority: float = 0.5,
        decay: float = 0.7,
        max_outputs: int = 20,
    ) -> None:
        self.name, self.priority = check_source("AgentOutputSource", name, priority)
        if isinstance(decay, bool) or not isinstance(decay, int | float) or not 0 < decay <= 1:
            raise ConfigError(
                f"`decay` of AgentOutputSource `{self.name}` must be a number with "
                f"0 < decay <= 1, got {short(decay)}; 1 keeps every output at full priority"
            )
        check_int(max_outputs, f"`max_outputs` of AgentOutputSource `{self.name}`", minimum=1)
        if isinstance(outputs, str):
            raise ConfigError(
                f"`outputs` must be a list of strings, got the string {short(outputs)}; wrap it "
                "in a list"
            )
        self.decay = float(decay)
        self.max_outputs = max_outputs
        # (serial, turn, text): the serial keeps block ids unique when a turn has two outputs.
        self._outputs: deque[tuple[int, int, str]] = deque(maxlen=max_outputs)
        self._added = 0
        for text in outputs:
            self.add(text)

    def add(self, text: str, *, turn: int | None = None) -> None:
        """Record an output of `turn` (by default, the turn after the last one added).

        Turns must not go backwards; several outputs may share a turn.
        """
        if not isinstance(text, str):
            raise ConfigError(
                f"an agent output must be a string, got {type(text).__name__} {short(text)}"
            )
        last = self._outputs[-1][1] if self._outputs else None
        if turn is None:
            turn = 0 if last is None else last + 1
        elif isinstance(turn, bool) or not isinstance(turn, int) or turn < (last or 0):
            floor = 0 if last is None else last
            raise ConfigError(
                f"`turn` must be an int >= {floor} (turns never go backwards), got {short(turn)}"
            )
        self._outputs.append((self._added, turn, text))
        self._added += 1

    def __len__(self) -> int:
        """How many outputs are kept (at most `max_outputs`)."""
        return len(self._outputs)

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> list[ContextBlock]:
        """The kept outputs, newest first, decayed by age, within `budget.ceiling`."""
        if not self._outputs:
            return []
        latest = self._outputs[-1][1]
        blocks: list[ContextBlock] = []
        for serial, turn, text in reversed(self._outputs):
            if not text.strip():
                continue
            age = latest - turn
            blocks.append(
                ContextBlock(
                    source=self.name,
                    section="context",
                    content=text,
                    token_count=ctx.counter.count(text),
                    priority=self.decay**age,
                    truncatable=True,
                    sequence=turn,
                    id=f"{self.name}:{serial}",
                    metadata={"turn": turn, "age": age},
                )
            )
        return fit_ceiling(blocks, budget.ceiling, ctx.counter)

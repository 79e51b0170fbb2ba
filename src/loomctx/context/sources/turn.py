"""The exchange of the current run after the user's turn (`TurnSource`): the agent's tool
turns, or the proxy's in-flight tool exchange a client sends, one unit per turn, the newest
pinned."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TypeAlias

from loomctx.context.block import BuildContext, ContextBlock, TokenBudget
from loomctx.context.excerpt import (
    DEFAULT_EXCERPT_SHARE,
    MIN_EXCERPT_TOKENS,
    Excerpt,
    fit_unit,
)
from loomctx.context.sources._common import billed
from loomctx.messages import Message
from loomctx.tokens import TokenCounter

__all__ = ["TurnSource"]

_Shown: TypeAlias = tuple[tuple[Message, ...], tuple[Excerpt, ...]]


class TurnSource:
    """The exchange of the current run after the user's turn: each assistant message with its
    tool calls and their results, one unit per turn. The newest unit is pinned (the model must
    see the results of the calls it just made); older ones are kept by value.

    A turn's tool results take at most `max_result_tokens` together (default:
    `DEFAULT_EXCERPT_SHARE` of the input budget): beyond it, the longest of those that have a
    handle (`add`) are shown as a head and a tail around a marker naming the handle (see
    `loomctx.context.excerpt`), and the unit's block says so in ``metadata["excerpts"]``. So
    the pinned unit fits however large one result is; the whole result is what the handle
    reads (the agent records it in memory, and `read_tool` names the tool that reads it).
    """

    def __init__(
        self,
        *,
        name: str = "turn",
        priority: float = 1.0,
        max_result_tokens: int | None = None,
        read_tool: str | None = None,
    ) -> None:
        self.name = name
        self.priority = priority
        self.max_result_tokens = max_result_tokens
        self.read_tool = read_tool
        self.units: list[tuple[Message, ...]] = []
        self._handles: dict[int, Mapping[str, str]] = {}
        # Each unit as last shown, by index: (the unit, the allowance, what was shown).
        self._shown: dict[int, tuple[tuple[Message, ...], int, _Shown]] = {}

    def add(self, unit: Sequence[Message], *, handles: Mapping[str, str] | None = None) -> None:
        """Append a turn's unit; `handles` maps a tool call's id to the handle under which
        its whole result is stored (results without one are never cut)."""
        self.units.append(tuple(unit))
        self._handles[len(self.units) - 1] = dict(handles or {})

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> list[ContextBlock]:
        """One block per unit, newest first."""
        limit = self.max_result_tokens or int(budget.ceiling * DEFAULT_EXCERPT_SHARE)
        cap = min(budget.ceiling, max(MIN_EXCERPT_TOKENS, limit))
        last = len(self.units) - 1
        blocks: list[ContextBlock] = []
        for i, unit in reversed(list(enumerate(self.units))):
            messages, excerpts = self._unit(i, unit, cap, ctx.counter)
            blocks.append(
                ContextBlock(
                    source=self.name,
                    section="turn",
                    messages=messages,
                    token_count=billed(ctx.counter, messages),
                    priority=1.0 if i == last else 0.95,
                    pinned=i == last,
                    sequence=i,
                    metadata={"excerpts": tuple(e.to_dict() for e in excerpts)} if excerpts else {},
                )
            )
        return blocks

    def _unit(
        self, index: int, unit: tuple[Message, ...], cap: int, counter: TokenCounter
    ) -> _Shown:
        """The unit within `cap` tokens, its long results cut (the same cut on every build)."""
        seen = self._shown.get(index)
        if seen is not None and seen[0] is unit and seen[1] == cap:
            return seen[2]
        handles = self._handles.get(index, {})
        cuttable = {
            m.tool_call_id: h
            for m in unit
            if m.role == "tool" and (h := handles.get(m.tool_call_id or "")) is not None
        }

        def frame(texts: Mapping[str, str]) -> tuple[Message, ...]:
            return tuple(
                replace(m, content=texts[cuttable[m.tool_call_id]])
                if m.role == "tool" and m.tool_call_id in cuttable
                else m
                for m in unit
            )

        texts = {cuttable[m.tool_call_id]: m.content for m in unit if m.tool_call_id in cuttable}
        shown = fit_unit(texts, frame, cap, counter=counter, read_tool=self.read_tool)
        self._shown[index] = (unit, cap, shown)
        return shown

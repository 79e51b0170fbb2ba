"""`Discoveries`: what an agent run has tried and learned, for the retrieval query of each turn.

Seed 001's loop re-retrieves before every model call, for the user's request plus what the
last tool results revealed. That leaves two gaps:

- **What the model tried.** Its own calls carry the most precise words of what it is working
  on: the SQL that names table ``returns``, the path of the file it reads. When a tool answers
  only "no such column: r.order_id", the results alone name nothing to retrieve. So every
  call is evidence, as ``name {"argument": value}``, beside its result.
- **What the run found earlier.** Results replaced on the next turn left the query on turn
  N+2: a listing of tables, read once, was forgotten while the run still worked with those
  tables. So a run keeps all its evidence, and each turn's query holds the newest turn's
  whole, then the earlier pieces that are still relevant, most relevant first.

A piece is *relevant* while it speaks about what the run does now: its relevance is the share
of the *focus* terms it contains (`loomctx.text.terms`; the focus is the user's request and
the newest turn's calls and results). It is recomputed every turn, so a piece leaves the query
when the run has moved on from it, however recent, and stays while the run still works with
it, however old: it decays by relevance, not by turn count. Pieces below `min_relevance` are
left out, and the query holds at most `max_chars` characters (each piece at most
`max_piece_chars`), so a long run does not make an ever longer query.

Everything here is text: tool output is data for the retriever's query, never instructions.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from loomctx.agent.tools import ToolResult
from loomctx.errors import ConfigError, check_int
from loomctx.messages import ToolCall
from loomctx.text import coverage, terms

__all__ = ["Discoveries", "Evidence"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Evidence:
    """One piece of what a run tried or learned: a call (``kind="call"``) or its result."""

    kind: str
    turn: int
    text: str
    terms: frozenset[str]


def _describe(call: ToolCall) -> str:
    arguments = json.dumps(call.arguments, ensure_ascii=False, sort_keys=True)
    return f"{call.name} {arguments}"


class Discoveries:
    """The evidence of one agent run, and the retrieval query it makes each turn.

    >>> found = Discoveries("上个月有多少订单被退回？")
    >>> found.add(turn=1, calls=[call], results=[result])
    >>> found.query()   # the request, the newest calls and results, relevant earlier pieces

    `min_relevance` (default 0.1) is the least share of the focus an earlier piece must
    contain to stay in the query; `max_chars` (default 4,000) bounds the query, and
    `max_piece_chars` (default 1,500) each piece of it (a long result by its head).
    """

    def __init__(
        self,
        request: str,
        *,
        min_relevance: float = 0.1,
        max_chars: int = 4_000,
        max_piece_chars: int = 1_500,
    ) -> None:
        if (
            isinstance(min_relevance, bool)
            or not isinstance(min_relevance, int | float)
            or not 0 <= min_relevance <= 1
        ):
            raise ConfigError(
                f"`min_relevance` must be a number from 0 to 1, got {min_relevance!r}"
            )
        for name, value in (("max_chars", max_chars), ("max_piece_chars", max_piece_chars)):
            check_int(value, f"`{name}`", minimum=1)
        self.request = request
        self.min_relevance = float(min_relevance)
        self.max_chars = max_chars
        self.max_piece_chars = max_piece_chars
        self.evidence: list[Evidence] = []
        self._request_terms = frozenset(terms(request))

    def add(self, *, turn: int, calls: Sequence[ToolCall], results: Sequence[ToolResult]) -> None:
        """Record a turn: each call the model made, then each result it got back."""
        by_id = {r.call_id: r for r in results}
        for call in calls:
            self._piece("call", turn, _describe(call))
            result = by_id.get(call.id)
            if result is not None:
                self._piece("result", turn, result.content)

    def _piece(self, kind: str, turn: int, text: str) -> None:
        text = text.strip()[: self.max_piece_chars]
        if text:
            self.evidence.append(
                Evidence(kind=kind, turn=turn, text=text, terms=frozenset(terms(text)))
            )

    def relevance(self) -> list[tuple[Evidence, float]]:
        """Every earlier piece (before the newest turn) with its relevance to the focus,
        most relevant first (ties: the newer first)."""
        if not self.evidence:
            return []
        newest = self.evidence[-1].turn
        focus = set(self._request_terms)
        for piece in self.evidence:
            if piece.turn == newest:
                focus |= piece.terms
        earlier = [p for p in self.evidence if p.turn < newest]
        scored = [(p, coverage(frozenset(focus), p.terms)) for p in earlier]
        order = {id(p): i for i, p in enumerate(earlier)}
        scored.sort(key=lambda pair: (-pair[1], -order[id(pair[0])]))
        return scored

    def query(self) -> str:
        """The request, the newest turn's calls and results, then the earlier pieces still
        relevant (see the module docstring), within `max_chars`."""
        parts = [self.request.strip()]
        size = len(parts[0])
        if self.evidence:
            newest = self.evidence[-1].turn
            pieces = [p for p in self.evidence if p.turn == newest]
            pieces += [p for p, score in self.relevance() if score >= self.min_relevance]
            for piece in pieces:
                if size + 1 + len(piece.text) > self.max_chars:
                    continue
                parts.append(piece.text)
                size += 1 + len(piece.text)
        return "\n".join(p for p in parts if p)

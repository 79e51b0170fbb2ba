"""What an agent's window is built from beyond the one window recipe
(`loomctx.context.recipe`): retrieval asked again with what the run found (`Requery`), and
the orchestrator whose reports say which tool results are shown as excerpts
(`ExcerptingOrchestrator`). The run's own exchange is `TurnSource`
(`loomctx.context.sources.turn`), re-exported here."""

from __future__ import annotations

from dataclasses import replace

from loomctx.agent.discovery import Discoveries
from loomctx.context.block import BuildContext, ContextBlock, TokenBudget
from loomctx.context.excerpt import note_excerpts
from loomctx.context.orchestrator import ContextOrchestrator, ContextWindow
from loomctx.context.sources.retrieval import UnifiedRetrievalSource
from loomctx.context.sources.turn import TurnSource

__all__ = ["ExcerptingOrchestrator", "Requery", "TurnSource"]


class Requery:
    """A retrieval source asked, on each build, with the run's retrieval query (the request,
    what the model tried and what it found: `Discoveries.query`) instead of the user's turn
    alone, so that memory and knowledge bases are searched again with the new evidence."""

    def __init__(self, source: UnifiedRetrievalSource, found: Discoveries) -> None:
        self.source = source
        self.found = found
        self.name = source.name
        self.priority = source.priority

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> list[ContextBlock]:
        """The source's blocks for `Discoveries.query` (the request alone on the first turn)."""
        return await self.source.collect(self.found.query(), budget, ctx=ctx)


class ExcerptingOrchestrator(ContextOrchestrator):
    """The agent's orchestrator: its reports also say which results are shown as excerpts."""

    async def build(
        self, query: str = "", *, ctx: BuildContext | None = None, prefill: bool = False
    ) -> ContextWindow:
        """`ContextOrchestrator.build`, with `note_excerpts` applied to the report."""
        window = await super().build(query, ctx=ctx, prefill=prefill)
        return replace(window, report=note_excerpts(window.report, window.blocks))

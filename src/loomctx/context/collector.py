"""`ContextCollector`: asks every source at once, each under a deadline, each isolated.

A source that raises, times out or returns something that is not a list of its own blocks
does not stop the build: its failure is recorded and the window is built without it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from loomctx.context.block import BuildContext, ContextBlock, ContextSource, TokenBudget
from loomctx.context.report import SourceStatus
from loomctx.errors import ConfigError

__all__ = ["Collected", "ContextCollector"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Collected:
    """What one source returned, or why it returned nothing."""

    source: ContextSource
    blocks: tuple[ContextBlock, ...]
    status: SourceStatus
    error: str | None
    elapsed_ms: float


class ContextCollector:
    """Runs `collect` on every source concurrently with a per-source `timeout` in seconds."""

    def __init__(self, *, timeout: float = 2.0) -> None:
        if not timeout > 0:
            raise ConfigError(f"`timeout` must be > 0 seconds, got {timeout!r}")
        self.timeout = timeout

    async def collect(
        self,
        sources: Sequence[ContextSource],
        budgets: Mapping[str, TokenBudget],
        query: str,
        *,
        ctx: BuildContext,
    ) -> list[Collected]:
        """One `Collected` per source, in the order of `sources`."""
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(self._one(s, budgets[s.name], query, ctx)) for s in sources]
        return [t.result() for t in tasks]

    async def _one(
        self, source: ContextSource, budget: TokenBudget, query: str, ctx: BuildContext
    ) -> Collected:
        start = time.perf_counter()

        def done(
            blocks: Sequence[ContextBlock], status: SourceStatus, error: str | None
        ) -> Collected:
            elapsed = (time.perf_counter() - start) * 1000
            return Collected(
                source=source, blocks=tuple(blocks), status=status, error=error, elapsed_ms=elapsed
            )

        try:
            async with asyncio.timeout(self.timeout):
                blocks = await source.collect(query, budget, ctx=ctx)
        except TimeoutError:
            return done((), "timeout", f"no answer within {self.timeout:g} s")
        except Exception as exc:  # isolation is the point: any failure of a source is reported
            return done((), "error", f"{type(exc).__name__}: {exc}")
        if not isinstance(blocks, Sequence) or isinstance(blocks, str):
            return done((), "error", f"returned {type(blocks).__name__}, not a list of blocks")
        for block in blocks:
            if not isinstance(block, ContextBlock):
                return done((), "error", f"returned a {type(block).__name__}, not a ContextBlock")
            if block.source != source.name:
                return done(
                    (),
                    "error",
                    f"returned a block labelled `{block.source}`; blocks must carry their "
                    f"source's name `{source.name}`",
                )
        return done(blocks, "ok", None)

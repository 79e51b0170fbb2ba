"""Unified retrieval as a context source (seed 002's passive channel).

Before every model call, `UnifiedRetrievalSource` searches memory (L4) and every knowledge base
together with the retrieval pipeline (`loomctx.retrieval.pipeline.retrieve`: recall, rewrite,
hop, rerank), and `RetrievalInjector` turns the best evidence into context blocks within the
source's budget:

    query -> retrieve (recall -> rewrite -> hop -> rerank) -> RetrievalInjector -> ContextBlocks

The injector lives in `context` rather than `retrieval` because it makes `ContextBlock`s
(imports point downward: retrieval knows nothing of the window).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from loomctx._memo import Memo
from loomctx.context.block import BuildContext, ContextBlock, TokenBudget, new_context_block
from loomctx.context.sources._common import MIN_CUT_TOKENS, check_source, fit_ceiling
from loomctx.errors import ConfigError, check_int, check_unit
from loomctx.memory.core import LoomMemory
from loomctx.memory.task import Task, task_label
from loomctx.retrieval.evidence import MEMORY_ORIGIN, Evidence
from loomctx.retrieval.pipeline import retrieve
from loomctx.retrieval.recall import recall
from loomctx.retrieval.reranker import Reranker
from loomctx.retrieval.rewriter import QueryRewriter
from loomctx.retrieval.settings import RetrievalSettings
from loomctx.tokens import TokenCounter

if TYPE_CHECKING:
    from loomctx.knowledge import KnowledgeBaseProvider

__all__ = ["TOKENS_PER_CANDIDATE", "RetrievalInjector", "UnifiedRetrievalSource"]

TOKENS_PER_CANDIDATE: Final = RetrievalSettings().tokens_per_candidate
"""With `fill`, how many tokens of budget call for one more candidate (a short turn: ~30)."""


_LABELS: Final = 8192  # memory items' labels kept, by task object

_label: Memo[Task, str] = Memo(task_label, _LABELS)


class RetrievalInjector:
    """Reranked evidence to context blocks, best first, within a token budget.

    Each block says where it came from and why it ranked: `origin`, the final `score`, the
    recall scores and every signal's score, in its metadata (and so in the `ContextReport`).
    The block's priority is its score relative to the best candidate's; its id is the
    candidate's, behind the knowledge base's name for knowledge (``knowledge:handbook:a.md#2``,
    also its label in the window); memory items are labelled with when they were said
    (``[8 May 2023] speaker: text``, `task_label`), never with their task id.

    `whole_below`: a candidate of fewer tokens is offered as not truncatable, so the engine
    keeps it whole or leaves it for a candidate that fits (default 0: all truncatable;
    `UnifiedRetrievalSource` passes `RetrievalSettings.whole_below`, 64).
    """

    def __init__(self, *, whole_below: int = 0) -> None:
        check_int(whole_below, "RetrievalInjector: `whole_below`", minimum=0)
        self.whole_below = whole_below

    def blocks(
        self,
        candidates: Sequence[Evidence],
        ceiling: int,
        counter: TokenCounter,
        *,
        source: str,
    ) -> list[ContextBlock]:
        """The best `candidates` as blocks within `ceiling` (first fit, `fit_ceiling`).

        Blocks are built, and their tokens counted, only as `fit_ceiling` reads them, and it
        stops once fewer than `MIN_CUT_TOKENS` tokens are left: only a whole candidate of a
        few words could still go in then, below every better one. A window is filled by a
        small share of the candidates, so most are never built (docs/benchmarks.md,
        "Design measurements")."""
        if not candidates:
            return []
        return fit_ceiling(
            self._offered(candidates, counter, source),
            ceiling,
            counter,
            min_room=MIN_CUT_TOKENS,
        )

    def _offered(
        self, candidates: Sequence[Evidence], counter: TokenCounter, source: str
    ) -> Iterator[ContextBlock]:
        best = max(candidates[0].score, 1e-9)
        # A few candidates at a time (`fit_ceiling` reads only as many as fill the ceiling),
        # their scores rounded together (`round4`).
        for start in range(0, len(candidates), _CHUNK):
            chunk = candidates[start : start + _CHUNK]
            values: list[Any] = []
            for c in chunk:
                scores = c.scores  # read once (the properties read the same dictionary)
                values.append(scores.get("score", 0.0))
                values.append(scores.get("relevance", 0.0))
                if (vector := scores.get("vector_score")) is not None:
                    values.append(vector)
                if (lexical := scores.get("lexical_score")) is not None:
                    values.append(lexical)
                # (a signal's 0 or 1, most of them, is its own rounding)
                values.extend(v for v in c.signals.values() if not (v == 1.0 or v == 0.0))
            rounded = round4(values)
            at = 0
            for c in chunk:
                scores = c.scores
                score = scores.get("score", 0.0)
                meta: dict[str, object] = {
                    **c.metadata,
                    "origin": c.origin,
                    "score": rounded[at],
                    "relevance": rounded[at + 1],
                }
                at += 2
                vector, lexical = scores.get("vector_score"), scores.get("lexical_score")
                if vector is not None:
                    vector, at = rounded[at], at + 1
                if lexical is not None:
                    lexical, at = rounded[at], at + 1
                signals: dict[str, object] = {}
                for k, v in c.signals.items():
                    if v == 1.0 or v == 0.0:
                        signals[k] = v
                    else:
                        signals[k], at = rounded[at], at + 1
                meta["signals"] = signals
                if vector is not None:
                    meta["vector_score"] = vector
                if lexical is not None:
                    meta["lexical_score"] = lexical
                if c.origin == MEMORY_ORIGIN:
                    # "speaker: text" says what it is; when it was said lets the model resolve
                    # "yesterday" in it. A task id would mean nothing to it (21 tokens for 32
                    # hex).
                    meta["label"] = _label(c.item) if isinstance(c.item, Task) else ""
                yield new_context_block(
                    source=source,
                    id=f"{source}:{c.id}"
                    if c.origin == MEMORY_ORIGIN
                    else f"{source}:{c.origin}:{c.id}",
                    content=c.text,
                    token_count=(tokens := counter.count(c.text)),
                    priority=max(0.01, min(1.0, score / best)),
                    truncatable=tokens >= self.whole_below,
                    metadata=meta,
                )


_CHUNK: Final = 24


def round4(values: Sequence[Any]) -> list[Any]:
    """``[round(v, 4) for v in values]``, bit for bit, in arrays: `round` works through a
    decimal string (correctly rounded), dear at hundreds of scores a build. A float whose
    scaled value ``v * 10_000`` is not within 1e-6 of a tie rounds to the nearest integer of
    it (the product's error, under 1e-4 here, cannot cross to the other side), and that
    integer over 10,000, with the sign of `v` (a zero keeps it), is the float nearest the
    decimal, as `round` gives; a near tie, a value of 1e12 or more (or not finite), and
    anything not a float (set aside as NaN) go through `round`."""
    if not values:
        return []
    plain = [v if type(v) is float and -1e12 < v < 1e12 else math.nan for v in values]
    floats = np.array(plain, dtype=np.float64)
    scaled = floats * 10_000.0
    whole = np.floor(scaled)
    frac = scaled - whole
    result: list[Any] = np.copysign((whole + (frac > 0.5)) / 10_000.0, floats).tolist()
    for i in np.flatnonzero(~(np.abs(frac - 0.5) >= 1e-6)).tolist():  # near ties, NaN
        result[i] = round(values[i], 4)
    return result


class UnifiedRetrievalSource:
    """L4 memory and knowledge bases, searched together before every model call.

    - `memory`: its archive is searched, L1 included (the compactor keeps a task the recent
      history also offers once; `exclude_recent=True` leaves L1 to the history); its recent
      messages feed the `rewriter`. Tasks of the agent run being built for are left out.
    - `knowledge_bases`: `KnowledgeBaseProvider`s, each searched with ``min_relevance =
      min_score``.
    - `recall_limit` candidates per source (seed 002: 20); `min_score` drops weak recalls.
      With `fill` (default), a grant that could hold more asks for more: one candidate per
      `TOKENS_PER_CANDIDATE` tokens of twice the source's grant (what other sources leave
      flows to it by priority), so relevant content at rank 21 is not left out of a
      half-empty window, and a large window does not rerank hundreds of candidates.
    - `rewrite` with `rewriter` (default `QueryRewriter()`): the rewritten query is recalled
      *besides* the original one and only adds candidates (see `loomctx.retrieval.rewriter`),
      for queries of at most `rewrite_max_terms` distinct content terms: a follow-up ("and
      its refresh interval?") names little of what it is about; a question that names four
      or more things gains nothing from the conversation's words and would pay a second
      recall, half of the source's time. The rewritten query
      asks each source for `recall_limit` candidates (no more than the original's limit),
      not for the `fill` limit: its candidates rank after the original query's on recall
      relevance (`pipeline.after`), which with `fill` already offer about twice what the grant
      holds. Asking for the `fill` limit made the second recall cost as much as the first,
      for no measurable gain in quality (docs/benchmarks.md, "Design measurements").
    - `reranker` (default `Reranker()`), `injector` (default `RetrievalInjector()`).
    - `settings` (`RetrievalSettings`, default its defaults) gives what is not passed:
      `recall_limit`, `rewrite_max_terms`, the rewriter, the reranker's signal weights and
      `tokens_per_candidate` (the memory-side fields are `LoomMemory`'s own arguments).
    """

    def __init__(
        self,
        memory: LoomMemory | None = None,
        knowledge_bases: Sequence[KnowledgeBaseProvider] = (),
        *,
        name: str = "unified_retrieval",
        priority: float = 0.9,
        recall_limit: int | None = None,
        min_score: float = 0.0,
        rewrite: bool = True,
        rewrite_max_terms: int | None = None,
        rewriter: QueryRewriter | None = None,
        fill: bool = True,
        reranker: Reranker | None = None,
        injector: RetrievalInjector | None = None,
        exclude_recent: bool = False,
        settings: RetrievalSettings | None = None,
    ) -> None:
        self.name, self.priority = check_source("retrieval source", name, priority)
        if settings is not None and not isinstance(settings, RetrievalSettings):
            raise ConfigError(
                f"source `{name}`: `settings` must be a RetrievalSettings or None, got "
                f"{type(settings).__name__}"
            )
        self.settings = settings or RetrievalSettings()
        if recall_limit is None:
            recall_limit = self.settings.recall_limit
        if rewrite_max_terms is None:
            rewrite_max_terms = self.settings.rewrite_max_terms
        if memory is not None and not isinstance(memory, LoomMemory):
            raise ConfigError(
                f"source `{name}`: `memory` must be a LoomMemory or None, got "
                f"{type(memory).__name__}"
            )
        if memory is None and not knowledge_bases:
            raise ConfigError(
                f"source `{name}` has nothing to search: give it a `memory`, "
                "`knowledge_bases`, or both"
            )
        names = [kb.name for kb in knowledge_bases]
        if len(set(names)) != len(names):
            raise ConfigError(f"source `{name}`: two knowledge bases share a name in {names!r}")
        check_int(recall_limit, f"source `{name}`: `recall_limit`", minimum=1)
        check_unit(min_score, f"source `{name}`: `min_score`")
        self.memory = memory
        self.knowledge_bases = list(knowledge_bases)
        self.recall_limit = recall_limit
        self.min_score = min_score
        self.rewriter = (rewriter or self.settings.rewriter()) if rewrite else None
        if isinstance(rewrite_max_terms, bool) or not isinstance(rewrite_max_terms, int):
            raise ConfigError(
                f"source `{name}`: `rewrite_max_terms` must be an int, got {rewrite_max_terms!r}"
            )
        self.rewrite_max_terms = rewrite_max_terms
        self.fill = fill
        self.reranker = reranker or self.settings.reranker()
        self.injector = injector or RetrievalInjector(whole_below=self.settings.whole_below)
        self.exclude_recent = exclude_recent

    @property
    def unembedded(self) -> int:
        """Records of the memory that search finds by their words only, for want of a vector
        yet (`LoomMemory.unembedded`; the build's `SourceReport` carries it)."""
        return self.memory.unembedded if self.memory is not None else 0

    @property
    def unembedded_by(self) -> dict[str, int]:
        """Records of the memory without a vector yet, per embedding model
        (`LoomMemory.unembedded_by`: with a fast embedder, the report says how many have
        its vector only)."""
        return self.memory.unembedded_by if self.memory is not None else {}

    async def candidates(
        self, query: str, *, limit: int | None = None, run_id: str | None = None
    ) -> list[Evidence]:
        """Recalled and reranked evidence for `query`, best first (what `collect` injects):
        `loomctx.retrieval.pipeline.retrieve` over this source's memory and knowledge bases;
        `limit` per source (default `recall_limit`). Tasks of the agent run `run_id` are left
        out: the run's own user turn and exchange are in the window already."""
        limit = limit or self.recall_limit
        if not query.strip():
            return []
        recent = (
            self.memory.get_l1_tasks(limit=self.memory.max_l1_size)
            if self.memory is not None
            else []
        )
        exclude = {
            t.task_id
            for t in recent
            if self.exclude_recent or (run_id is not None and t.metadata.get("run_id") == run_id)
        }

        async def recalled(text: str, limit: int) -> list[Evidence]:
            return await recall(
                text,
                memory=self.memory,
                knowledge_bases=self.knowledge_bases,
                limit=limit,
                min_score=self.min_score,
                exclude=exclude,
                depth=self.settings.pool_depth,
            )

        return await retrieve(
            query,
            recalled,
            limit=limit,
            reranker=self.reranker,
            settings=self.settings,
            rewriter=self.rewriter,
            recent=recent,
            rewrite_max_terms=self.rewrite_max_terms,
            recall_limit=self.recall_limit,
        )

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> list[ContextBlock]:
        """The best candidates as `context` blocks, within the ceiling."""
        limit = self.recall_limit
        if self.fill:
            per = self.settings.tokens_per_candidate
            want = max(2 * budget.tokens, ctx.dynamic_floor)
            limit = max(limit, min(budget.ceiling, want) // per)
        run_id = ctx.metadata.get("run_id")
        ranked = await self.candidates(
            query, limit=limit, run_id=str(run_id) if run_id is not None else None
        )
        return self.injector.blocks(ranked, budget.ceiling, ctx.counter, source=self.name)

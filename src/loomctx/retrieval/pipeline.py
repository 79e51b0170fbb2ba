"""The retrieval pipeline (seed 002), in the order it runs, over one value: `Evidence`.

    recall   every source for the query, concurrently           `loomctx.retrieval.recall`
    rewrite  a short query recalled again with the conversation's words; what it adds
             ranks after the first recall (`after`)              `loomctx.retrieval.rewriter`
    hop      the query with the names its best pieces mention, recalled again; relevance
             gains from it (`hop_merge`; off by default)          `loomctx.retrieval.hop`
    rerank   dedupe, every signal over the pool, final score     `loomctx.retrieval.reranker`
    inject   the best pieces as context blocks within a grant     `RetrievalInjector`

`retrieve` runs the first four; the fifth makes `ContextBlock`s and so lives with them, in
`loomctx.context.sources.retrieval`, whose `UnifiedRetrievalSource` calls `retrieve` and then
its injector. Every step but recall is a plain function of its inputs: a stage hands on new
`Evidence` values with the scores it added (`Evidence.rescored`) and changes none it was given.
Recall is passed in as a function of a query and a limit, so that what is searched (which
memory and knowledge bases, what is left out, how deep) is decided once by the caller.

Why the rewritten query only adds pieces: `loomctx.retrieval.rewriter` (used alone, the words
it adds pull a specific query toward whatever the conversation was about). Why it runs only
for queries of at most `rewrite_max_terms` distinct terms, and asks for no more than
`recall_limit` pieces: see `UnifiedRetrievalSource`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from loomctx.memory.task import Task, task_text
from loomctx.retrieval.evidence import Evidence
from loomctx.retrieval.hop import hop_terms
from loomctx.retrieval.reranker import Reranker
from loomctx.retrieval.rewriter import QueryRewriter
from loomctx.retrieval.settings import RetrievalSettings
from loomctx.text import terms

__all__ = ["Recaller", "after", "hop", "hop_merge", "retrieve", "rewritten"]

Recaller = Callable[[str, int], Awaitable[list[Evidence]]]
"""Recall for a query, at most `limit` pieces per source, every source's in recall order."""


async def retrieve(
    query: str,
    recall: Recaller,
    *,
    limit: int,
    reranker: Reranker,
    settings: RetrievalSettings,
    rewriter: QueryRewriter | None = None,
    recent: Sequence[Task] = (),
    rewrite_max_terms: int | None = None,
    recall_limit: int | None = None,
) -> list[Evidence]:
    """The evidence for `query`, reranked, best first: recall (`limit` per source), rewrite,
    hop, rerank. `recent` are the conversation's last tasks, oldest first (the rewriter's
    words); `rewrite_max_terms` and `recall_limit` default to `settings`' and bound the
    rewrite and the hop (`rewritten`; their recalls ask for at most `recall_limit`)."""
    found = await recall(query, limit)
    again = min(limit, settings.recall_limit if recall_limit is None else recall_limit)
    most = settings.rewrite_max_terms if rewrite_max_terms is None else rewrite_max_terms
    expanded = rewritten(query, rewriter, recent, max_terms=most)
    if expanded is not None:
        found = found + after(found, await recall(expanded, again))
    if settings.hop_weight > 0 and found:
        found = await hop(query, found, recall, reranker=reranker, settings=settings, limit=again)
    return reranker.rerank(query, found)


def rewritten(
    query: str, rewriter: QueryRewriter | None, recent: Sequence[Task], *, max_terms: int
) -> str | None:
    """`query` with the frequent words of `recent` added (`QueryRewriter.rewrite`), or None
    when there is no rewriter, nothing recent, more than `max_terms` distinct terms in the
    query, or nothing to add."""
    if rewriter is None or not recent or len(set(terms(query))) > max_terms:
        return None
    expanded = rewriter.rewrite(query, [task_text(t) for t in recent])
    return None if expanded == query else expanded


def after(found: Sequence[Evidence], extra: Sequence[Evidence]) -> list[Evidence]:
    """The pieces of `extra` (a rewritten query's recall) not in `found`, their relevance
    scaled below the weakest of `found`'s: they fill in after, and rank higher only on
    other signals."""
    seen = {e.key for e in found}
    floor = min((e.relevance for e in found), default=1.0)
    return [e.rescored({"relevance": e.relevance * floor}) for e in extra if e.key not in seen]


async def hop(
    query: str,
    found: list[Evidence],
    recall: Recaller,
    *,
    reranker: Reranker,
    settings: RetrievalSettings,
    limit: int,
) -> list[Evidence]:
    """The second hop (`loomctx.retrieval.hop`): `query` with the names and years its
    `settings.hop_from` best pieces mention, recalled again (`limit` per source) and merged
    into `found` by `hop_merge`; `found` as it is when they name nothing new."""
    first = reranker.rerank(query, found)[: settings.hop_from]
    named = hop_terms(query, first, settings.hop_terms)
    if not named:
        return found
    extra = await recall(f"{query} {' '.join(named)}", limit)
    return hop_merge(found, extra, settings.hop_weight)


def hop_merge(
    found: Sequence[Evidence], extra: Sequence[Evidence], weight: float
) -> list[Evidence]:
    """`found`, each piece's relevance raised by `weight` times its relevance in `extra`,
    then the pieces only `extra` has, at `weight` times their relevance there."""
    at = {e.key: i for i, e in enumerate(found)}
    out = list(found)
    for e in extra:
        i = at.get(e.key)
        if i is not None:
            out[i] = out[i].rescored({"relevance": out[i].relevance + weight * e.relevance})
        else:
            out.append(e.rescored({"relevance": e.relevance * weight}))
    return out

"""Unified retrieval (seed 002): query rewriting, recall, hop, reranking, over `Evidence`.

    query -> recall (memory L4, knowledge bases; concurrently) -> rewrite -> hop -> Reranker

`loomctx.retrieval.pipeline.retrieve` runs it in that order; `UnifiedRetrievalSource` and
`RetrievalInjector` (in `loomctx.context.sources`) put the result in the window. Each piece of
`Evidence` carries its recall scores and every signal's score, for the report.
"""

from loomctx.retrieval.evidence import MEMORY_ORIGIN, Evidence, fingerprint
from loomctx.retrieval.pipeline import retrieve
from loomctx.retrieval.recall import recall, recall_knowledge, recall_memory
from loomctx.retrieval.reranker import Reranker, dedupe, spread_sessions
from loomctx.retrieval.rewriter import QueryRewriter
from loomctx.retrieval.settings import RetrievalSettings as RetrievalSettings  # in `loomctx`
from loomctx.retrieval.signals import (
    ContentLengthSignal,
    OriginDiversitySignal,
    QueryOverlapSignal,
    RelevanceSignal,
    RoleSignal,
    SessionSignal,
    Signal,
    SpeakerSignal,
    TimeSignal,
    default_signals,
)

__all__ = [
    "MEMORY_ORIGIN",
    "ContentLengthSignal",
    "Evidence",
    "OriginDiversitySignal",
    "QueryOverlapSignal",
    "QueryRewriter",
    "RelevanceSignal",
    "Reranker",
    "RoleSignal",
    "SessionSignal",
    "Signal",
    "SpeakerSignal",
    "TimeSignal",
    "dedupe",
    "default_signals",
    "fingerprint",
    "recall",
    "recall_knowledge",
    "recall_memory",
    "retrieve",
    "spread_sessions",
]

"""Unified retrieval (seed 002): query rewriting, recall, reranking.

    query -> QueryRewriter -> recall (memory L4, knowledge bases; concurrently) -> Reranker

`UnifiedRetrievalSource` and `RetrievalInjector` (in `loomctx.context.sources`) put the result in
the window. Candidates carry their recall scores and every signal's score, for the report.
"""

from loomctx.retrieval.candidates import MEMORY_ORIGIN, Candidate, fingerprint
from loomctx.retrieval.recall import recall, recall_knowledge, recall_memory
from loomctx.retrieval.reranker import Reranker, dedupe
from loomctx.retrieval.rewriter import QueryRewriter
from loomctx.retrieval.settings import RetrievalSettings as RetrievalSettings  # in `loomctx`
from loomctx.retrieval.signals import (
    ContentLengthSignal,
    OriginDiversitySignal,
    QueryOverlapSignal,
    Signal,
    SpeakerSignal,
    VectorScoreSignal,
    default_signals,
)

__all__ = [
    "MEMORY_ORIGIN",
    "Candidate",
    "ContentLengthSignal",
    "OriginDiversitySignal",
    "QueryOverlapSignal",
    "QueryRewriter",
    "Reranker",
    "Signal",
    "SpeakerSignal",
    "VectorScoreSignal",
    "dedupe",
    "default_signals",
    "fingerprint",
    "recall",
    "recall_knowledge",
    "recall_memory",
]

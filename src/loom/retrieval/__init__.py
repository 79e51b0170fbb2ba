"""Unified retrieval (seed 002): query rewriting, recall, reranking.

    query -> QueryRewriter -> recall (memory L4, knowledge bases; concurrently) -> Reranker

`UnifiedRetrievalSource` and `RetrievalInjector` (in `loom.context.sources`) put the result in
the window. Candidates carry their recall scores and every signal's score, for the report.
"""

from loom.retrieval.candidates import MEMORY_ORIGIN, Candidate, fingerprint
from loom.retrieval.recall import recall, recall_knowledge, recall_memory
from loom.retrieval.reranker import Reranker, dedupe
from loom.retrieval.rewriter import QueryRewriter
from loom.retrieval.signals import (
    ContentLengthSignal,
    OriginDiversitySignal,
    QueryOverlapSignal,
    Signal,
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
    "VectorScoreSignal",
    "dedupe",
    "default_signals",
    "fingerprint",
    "recall",
    "recall_knowledge",
    "recall_memory",
]

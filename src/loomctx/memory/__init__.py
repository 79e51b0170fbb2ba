"""Tiered memory of tasks on a durable store: `LoomMemory` keeps recent tasks (L1), important
ones (L2), summaries of what left them (L3) and every task, searchable by words and vectors
(L4), with the plain path (`add` messages, `recall` a query) on top; importance, summaries and
the background embedder are its parts.

`LoomMemory`, its settings values (`MemoryTiers`, `MemoryEmbedding`, `MemoryRanking`), `Task`,
`TaskStatus` and `Recall` are at the top level (`loomctx`); here are the rest.
"""

from loomctx.memory.context_builder import ContextBuilder, ExecutionContext
from loomctx.memory.core import MemoryHit
from loomctx.memory.enrichment import BackgroundEmbedder, QuarantinedRecord
from loomctx.memory.plain import Recalled
from loomctx.memory.summarizers import ExtractiveSummarizer, LLMSummarizer, Summarizer
from loomctx.memory.task import MemoryTier, TaskSummary, tasks_from_messages

__all__ = [
    "BackgroundEmbedder",
    "ContextBuilder",
    "ExecutionContext",
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "MemoryHit",
    "MemoryTier",
    "QuarantinedRecord",
    "Recalled",
    "Summarizer",
    "TaskSummary",
    "tasks_from_messages",
]

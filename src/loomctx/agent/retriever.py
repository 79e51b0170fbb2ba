"""`ContextRetriever`: what the agent loop asks, before every model call, for documents.

Seed 001's lesson: retrieving once before the loop is wrong; the query of each turn includes
what the last tool results revealed, so a tool that lists tables brings in their schemas on the
next turn. A retriever answers `retrieve_for_query(query, top_k)` and formats its documents
with `format_documents`, whose default (`BaseContextRetriever`) assembles them with
`ContextAssembler` as seed 001 does: constraints CRITICAL, the first three documents HIGH, the
rest MEDIUM, rules LOW, within 4,000 tokens.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from loomctx.context.assembler import ComponentPriority, ContextAssembler
from loomctx.context.block import BuildContext, ContextBlock, TokenBudget
from loomctx.context.sources.retrieval import UnifiedRetrievalSource
from loomctx.errors import ConfigError
from loomctx.knowledge import KnowledgeBaseProvider
from loomctx.memory.core import LoomMemory
from loomctx.memory.task import task_line
from loomctx.tokens import TiktokenCounter, TokenCounter

__all__ = [
    "BaseContextRetriever",
    "ContextRetriever",
    "Document",
    "KnowledgeRetriever",
    "MemoryRetriever",
    "RetrievedContextSource",
    "UnifiedRetriever",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Document:
    """A retrieved piece of text: `kind` "constraint" and "rule" documents are placed by
    `format_documents` at CRITICAL and LOW priority; others by rank."""

    id: str
    content: str
    score: float = 0.0
    kind: str = "document"
    metadata: Mapping[str, object] = field(default_factory=dict, hash=False)


@runtime_checkable
class ContextRetriever(Protocol):
    """Retrieves documents for a query and formats them for the model."""

    async def retrieve_for_query(self, query: str, top_k: int = 5) -> list[Document]:
        """The `top_k` documents most relevant to `query`, best first."""
        ...

    def format_documents(self, documents: Sequence[Document]) -> str:
        """The documents as one text block for the context window."""
        ...


class BaseContextRetriever:
    """Template: implement `retrieve_for_query`; `format_documents` assembles as seed 001."""

    max_tokens: int = 4000

    def __init__(self, *, counter: TokenCounter | None = None, max_tokens: int = 4000) -> None:
        self.counter = counter or TiktokenCounter()
        self.max_tokens = max_tokens

    async def retrieve_for_query(self, query: str, top_k: int = 5) -> list[Document]:
        """Override: the documents for `query`."""
        raise NotImplementedError

    def format_documents(self, documents: Sequence[Document]) -> str:
        """Constraints CRITICAL, the first three documents HIGH, the rest MEDIUM, rules LOW."""
        assembler = ContextAssembler(max_tokens=self.max_tokens, token_counter=self.counter)
        rank = 0
        for doc in documents:
            if doc.kind == "constraint":
                priority = ComponentPriority.CRITICAL
            elif doc.kind == "rule":
                priority = ComponentPriority.LOW
            else:
                priority = ComponentPriority.HIGH if rank < 3 else ComponentPriority.MEDIUM
                rank += 1
            assembler.add_component(doc.id, doc.content, priority)
        text = assembler.assemble()
        summary = assembler.get_summary()
        log.debug(
            "formatted %d documents: %d of %d tokens (requested %d)",
            len(documents),
            summary["total_tokens"],
            self.max_tokens,
            summary["requested_tokens"],
        )
        return text


class MemoryRetriever(BaseContextRetriever):
    """Documents from a `LoomMemory`'s archive (L4): the tasks that match the query."""

    def __init__(self, memory: LoomMemory, **options: object) -> None:
        super().__init__(**options)  # type: ignore[arg-type]
        self.memory = memory

    async def retrieve_for_query(self, query: str, top_k: int = 5) -> list[Document]:
        """Search hits of the memory, as documents."""
        return [
            Document(id=f"task_{h.task.task_id}", content=task_line(h.task), score=h.score)
            for h in self.memory.search(query, limit=top_k)
        ]


class KnowledgeRetriever(BaseContextRetriever):
    """Documents from knowledge bases: each searched (hybrid) concurrently, the hits merged
    by score. Chunks below `min_relevance` are left out."""

    def __init__(
        self,
        *knowledge_bases: KnowledgeBaseProvider,
        min_relevance: float = 0.0,
        counter: TokenCounter | None = None,
        max_tokens: int = 4000,
    ) -> None:
        super().__init__(counter=counter, max_tokens=max_tokens)
        if not knowledge_bases:
            raise ConfigError("KnowledgeRetriever needs at least one knowledge base")
        self.knowledge_bases = knowledge_bases
        self.min_relevance = min_relevance

    async def retrieve_for_query(self, query: str, top_k: int = 5) -> list[Document]:
        """The `top_k` best chunks over all the knowledge bases."""
        found = await asyncio.gather(
            *(
                kb.search(query, limit=top_k, min_relevance=self.min_relevance)
                for kb in self.knowledge_bases
            )
        )
        hits = sorted((h for part in found for h in part), key=lambda h: -h.score)
        return [
            Document(
                id=f"{h.knowledge_base}:{h.chunk_id}",
                content=h.text,
                score=h.score,
                metadata={"document_id": h.document_id, **h.metadata},
            )
            for h in hits[:top_k]
        ]


class UnifiedRetriever(BaseContextRetriever):
    """Documents from a `UnifiedRetrievalSource`: memory and knowledge bases recalled
    together, rewritten and reranked (seed 002), formatted as seed 001 does."""

    def __init__(
        self,
        source: UnifiedRetrievalSource,
        *,
        counter: TokenCounter | None = None,
        max_tokens: int = 4000,
    ) -> None:
        super().__init__(counter=counter, max_tokens=max_tokens)
        self.source = source

    async def retrieve_for_query(self, query: str, top_k: int = 5) -> list[Document]:
        """The `top_k` best reranked candidates."""
        ranked = await self.source.candidates(query)
        return [
            Document(
                id=f"{c.origin}:{c.id}",
                content=c.text,
                score=c.score,
                metadata={**c.metadata, "origin": c.origin},
            )
            for c in ranked[:top_k]
        ]


class RetrievedContextSource:
    """The formatted documents of this turn's retrieval, as one dynamic-context block.

    The agent loop sets `text` before each build; the block is pinned only if `pinned` (by
    default it is high-priority and truncatable, so it never crowds out the user turn).
    """

    def __init__(self, *, name: str = "retrieved", priority: float = 0.9) -> None:
        self.name = name
        self.priority = priority
        self.text = ""

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> list[ContextBlock]:
        """The current text, if any."""
        if not self.text.strip():
            return []
        return [
            ContextBlock(
                source=self.name,
                section="context",
                content=self.text,
                token_count=ctx.counter.count(self.text),
                priority=1.0,
                truncatable=True,
            )
        ]

"""`Candidate`: one piece of content recalled for a query, from memory or a knowledge base.

Recall makes candidates, the `Reranker` scores them, the `RetrievalInjector` turns the best into
context blocks. A candidate keeps both recall scores (lexical, dense) and every signal's score,
so a report can say why it ranked where it did.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final

from loomctx.text import terms

__all__ = ["MEMORY_ORIGIN", "Candidate", "fingerprint", "term_set"]

MEMORY_ORIGIN: Final = "memory"
"""The origin of candidates recalled from `LoomMemory` (knowledge bases: ``knowledge:<name>``)."""


@lru_cache(maxsize=8192)  # the same memory and knowledge texts come back turn after turn
def fingerprint(text: str) -> str:
    """A content hash that ignores case and whitespace: the same text twice is one candidate."""
    normal = " ".join(text.split()).casefold()  # as `re.sub(r"\s+", " ")` + strip, 3x faster
    return hashlib.blake2b(normal.encode(), digest_size=12).hexdigest()


@lru_cache(maxsize=8192)
def term_set(text: str) -> frozenset[str]:
    """`loomctx.text.terms` of `text` as a set, remembered for the texts seen most recently."""
    return frozenset(terms(text))


@dataclass(slots=True, kw_only=True)
class Candidate:
    """Content recalled for a query.

    `id` is unique within its `origin` (a task id, a chunk id); `relevance` is the recall
    stage's own 0..1 score (fused rank for memory, fused score for knowledge), `vector_score`
    the cosine similarity when a dense search found it, `lexical_score` BM25 relative to the
    best lexical hit. `item` is what was found (a `Task`, a `KnowledgeHit`), for the injector.
    """

    id: str
    text: str
    origin: str
    relevance: float = 0.0
    vector_score: float | None = None
    lexical_score: float | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    item: Any = None
    signals: dict[str, float] = field(default_factory=dict)
    score: float = 0.0  # the reranker's final score

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.text)

    @property
    def terms(self) -> frozenset[str]:
        """The distinct terms of the text (`loomctx.text.terms`), computed once per text."""
        return term_set(self.text)

    @property
    def key(self) -> tuple[str, str]:
        return (self.origin, self.id)

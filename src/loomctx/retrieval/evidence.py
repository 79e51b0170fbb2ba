"""`Evidence`: one piece of content recalled for a query, from memory or a knowledge base.

One frozen value travels the whole pipeline (`loomctx.retrieval.pipeline`): recall makes it,
and each later stage adds what it found with `Evidence.rescored` (a rewritten query's recall
lowers its relevance, the second hop raises it, the `Reranker` adds every signal's score and
the final one) rather than changing it in place or wrapping it in another class. So whatever
holds a value holds every score it earned, and the `RetrievalInjector` can say in the window's
report why a block won.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any, Final

from loomctx._memo import Memo
from loomctx.knowledge import KnowledgeHit
from loomctx.memory.task import Task
from loomctx.text import terms

__all__ = ["MEMORY_ORIGIN", "Evidence", "fingerprint", "new_evidence", "session_of", "term_set"]

MEMORY_ORIGIN: Final = "memory"
"""The origin of evidence recalled from `LoomMemory` (knowledge bases: ``knowledge:<name>``)."""


@lru_cache(maxsize=8192)  # the same memory and knowledge texts come back turn after turn
def fingerprint(text: str) -> str:
    """A content hash that ignores case and whitespace: the same text twice is one piece."""
    normal = " ".join(text.split()).casefold()  # as `re.sub(r"\s+", " ")` + strip, 3x faster
    return hashlib.blake2b(normal.encode(), digest_size=12).hexdigest()


@lru_cache(maxsize=8192)
def term_set(text: str) -> frozenset[str]:
    """`loomctx.text.terms` of `text` as a set, remembered for the texts seen most recently."""
    return frozenset(terms(text))


@dataclass(frozen=True, slots=True, kw_only=True)
class Evidence:
    """Content recalled for a query, with every score a stage gave it.

    `id` is unique within its `origin` (a task id, a chunk id; `key` is both). `item` is what
    was found (a `Task`, a `KnowledgeHit`), for the injector and the speaker signal;
    `metadata` is what recall knew of it (task id, how it was found; a chunk's document).
    `scores` are the named scores of the stages, read through the properties below:
    ``relevance``, recall's own 0..1 score (fused rank for memory, fused score for
    knowledge), as the rewrite and hop stages left it; ``vector_score``, the cosine
    similarity when a dense search found it; ``lexical_score``, BM25 relative to the best
    lexical hit; ``score``, the reranker's final score. `signals` are the reranker's signal
    scores by signal name, which the final score is the weighted mean of.
    """

    id: str
    origin: str
    text: str
    item: Any = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    scores: Mapping[str, float] = field(default_factory=dict)
    signals: Mapping[str, float] = field(default_factory=dict)

    def rescored(
        self, scores: Mapping[str, float], *, signals: Mapping[str, float] | None = None
    ) -> Evidence:
        """This evidence with `scores` added to (or replacing those of the same name in) its
        own, and with `signals` if given: `dataclasses.replace`, at `new_evidence`'s cost (the
        reranker makes one per piece of every pool)."""
        return new_evidence(
            self.id,
            self.origin,
            self.text,
            self.item,
            self.metadata,
            {**self.scores, **scores},
            self.signals if signals is None else signals,
        )

    @property
    def key(self) -> tuple[str, str]:
        """``(origin, id)``: unique among every source's evidence."""
        return (self.origin, self.id)

    @property
    def relevance(self) -> float:
        """Recall's score on 0..1 after the rewrite and hop stages (0 if none)."""
        return self.scores.get("relevance", 0.0)

    @property
    def vector_score(self) -> float | None:
        """The cosine similarity of the dense search that found it, else None."""
        return self.scores.get("vector_score")

    @property
    def lexical_score(self) -> float | None:
        """BM25 relative to the best lexical hit, when the lexical search found it."""
        return self.scores.get("lexical_score")

    @property
    def score(self) -> float:
        """The reranker's final score (0 before reranking)."""
        return self.scores.get("score", 0.0)

    @property
    def fingerprint(self) -> str:
        """`fingerprint` of the text: the same text from two sources is one piece."""
        return fingerprint(self.text)

    @property
    def terms(self) -> frozenset[str]:
        """The distinct terms of the text (`loomctx.text.terms`), computed once per text."""
        return term_set(self.text)


class _Unfrozen:
    """`Evidence`'s slots (its very names, so the same layout), without the frozen
    dataclass's `__setattr__`: `new_evidence` fills one as a plain object, then makes it an
    `Evidence` by ``__class__`` assignment, which Python allows between classes of the same
    layout."""

    __slots__ = Evidence.__slots__


def new_evidence(
    id: str,
    origin: str,
    text: str,
    item: Any,
    metadata: Mapping[str, Any],
    scores: Mapping[str, float],
    signals: Mapping[str, float] | None = None,
) -> Evidence:
    """The value ``Evidence(id=id, ...)`` makes, at a fraction of the cost: recall and the
    reranker make one per piece of every pool on every build, and a frozen dataclass's
    `__init__` parses keywords and sets each field through `object.__setattr__`, where this
    sets the slots of a `_Unfrozen` as plain attributes (cheaper again than calling each
    slot's descriptor) and relabels it."""
    made: Any = _Unfrozen()
    made.id = id
    made.origin = origin
    made.text = text
    made.item = item
    made.metadata = metadata
    made.scores = scores
    made.signals = {} if signals is None else signals
    made.__class__ = Evidence
    evidence: Evidence = made
    return evidence


def session_of(evidence: Evidence) -> Hashable | None:
    """The session a piece was said in: its task's ``session_id`` (metadata, else
    parameters), else the day its task was recorded; None for what is no task's (a
    knowledge chunk), which no session holds."""
    item = evidence.item
    kind = type(item)
    if kind is Task:  # memory search hands back the same task objects build after build
        return _task_session(item)
    if kind is KnowledgeHit:  # (slotted: a metadata, no parameters, no created_at)
        fields = item.metadata
        sid = fields.get("session_id") if isinstance(fields, Mapping) else None
        return sid if isinstance(sid, str) and sid else None
    return _session(item)


def _session(item: Any) -> Hashable | None:
    """`session_of` an evidence's `item`."""
    for where in ("metadata", "parameters"):
        fields = getattr(item, where, None)
        sid = fields.get("session_id") if isinstance(fields, Mapping) else None
        if isinstance(sid, str) and sid:
            return sid
    when = getattr(item, "created_at", None)
    return when.date() if isinstance(when, datetime) else None


_task_session: Memo[Task, Hashable | None] = Memo(_session, 8192)

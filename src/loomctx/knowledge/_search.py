"""`KnowledgeBase.search_sync`'s work: the store's lexical and dense rankings of a base's
chunks as arrays (`Rank`), fused (`loomctx.knowledge._fusion`), the winners made hits.

What fusion and a hit read of a chunk record (its key, text, and the hit's fields) is kept
by the record's version (`seq`, unique in the store to one version of one record): the same
chunks come back query after query, and a chunk record is read (`Fetch`) only the first time
a version of it is found.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

from loomctx.knowledge._fusion import Pool, fused
from loomctx.knowledge._types import KnowledgeHit, new_knowledge_hit
from loomctx.stores.base import (
    Fetch,
    Found,
    MemoryStore,
    Namespace,
    Rank,
    Record,
    Search,
    VectorSearch,
)
from loomctx.text import terms

if TYPE_CHECKING:
    from loomctx.embeddings import Embedder

__all__ = ["ChunkSearch"]

_KEPT: Final = 16_384  # chunk versions kept, per base (a few hundred bytes each, with text)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class _Chunk:
    """What search reads of one version of a chunk record (one value per version, so
    compared by identity)."""

    key: str
    text: str  # as stored (with the overlap): what coverage reads
    shown: str  # without the overlap it repeats from the chunk before it
    chunk_id: str
    document_id: str
    metadata: Mapping[str, Any]

    @classmethod
    def of(cls, record: Record) -> _Chunk:
        data = record.data
        start, end = data.get("overlap", (0, 0))
        return cls(
            key=record.key,
            text=record.text,
            shown=record.text[:start] + record.text[end:],
            chunk_id=f"{data['document_id']}#{data['index']}",
            document_id=str(data["document_id"]),
            metadata=dict(data["metadata"]),
        )


class ChunkSearch:
    """A knowledge base's search of its store, keeping what it read of each chunk version."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._chunks: OrderedDict[int, _Chunk] = OrderedDict()  # by record seq

    def search(
        self,
        query: str,
        *,
        namespace: Namespace,
        kind: str,
        pool: int,
        limit: int,
        floor: float,
        embedder: Embedder | None,
        fast: Embedder | None,
        name: str,
    ) -> list[KnowledgeHit]:
        """Up to `limit` chunks of `kind` in exactly `namespace` for `query`, best first,
        scored above 0 and at least `floor`, from pools of `pool` per ranking; `fast`: the
        fast embedder, whose ranking fills the dense part of chunks `embedder` has no vector
        of yet (None: every chunk has one). `name`: the base's, for the hits."""
        searches: list[Search | VectorSearch] = [
            Search(prefix=namespace, query=query, kind=kind, limit=pool, exact=True)
        ]
        for model in (embedder, fast if embedder is not None else None):
            if model is not None:
                searches.append(
                    VectorSearch(
                        prefix=namespace,
                        vector=model.embed([query], kind="query")[0],
                        model=model.name,
                        kind=kind,
                        limit=pool,
                        exact=True,
                    )
                )
        results: list[Found] = self.store.batch([Rank(search=s) for s in searches])
        pools = self._pools(results)
        chunks, scores, vector_scores, lexical_scores = fused(
            terms(query),
            pools[0],
            pools[1] if embedder is not None else None,
            lexical_complete=len(results[0]) < pool,
            fast=pools[2] if len(pools) > 2 else None,
            limit=limit,
        )
        hits: list[KnowledgeHit] = []
        for chunk, score, vector_score, lexical_score in zip(
            chunks, scores, vector_scores, lexical_scores, strict=True
        ):
            if score <= 0 or score < floor or len(hits) == limit:
                break
            hits.append(
                new_knowledge_hit(
                    chunk.chunk_id,
                    chunk.document_id,
                    chunk.shown,
                    score,
                    vector_score,
                    lexical_score,
                    dict(chunk.metadata),
                    name,
                )
            )
        return hits

    def _pools(self, results: Sequence[Found]) -> list[Pool[_Chunk]]:
        """Each ranking's chunks, read once per version (a chunk changed since the search
        found it is left out: the next search finds its new version)."""
        kept = self._chunks
        seqs = [r.seqs.tolist() for r in results]
        with self._lock:
            got = [list(map(kept.get, s)) for s in seqs]
        if not any(None in chunks for chunks in got):  # (`_Chunk`s compare by identity)
            return [
                Pool(chunks=cast("list[_Chunk]", chunks), scores=r.scores)
                for r, chunks in zip(results, got, strict=True)
            ]
        missing = {
            seq: record_id
            for r, chunks, versions in zip(results, got, seqs, strict=True)
            for record_id, seq, chunk in zip(r.ids.tolist(), versions, chunks, strict=True)
            if chunk is None
        }
        records = self.store.batch([Fetch(ids=list(missing.values()), seqs=list(missing))])[0]
        read = {r.seq: _Chunk.of(r) for r in records if r is not None}
        with self._lock:
            kept.update(read)
            while len(kept) > _KEPT:
                kept.popitem(last=False)
        pools = []
        for r, chunks, versions in zip(results, got, seqs, strict=True):
            chunks = [
                c if c is not None else read.get(seq)
                for c, seq in zip(chunks, versions, strict=True)
            ]
            scores = r.scores.tolist()
            pools.append(
                Pool(
                    chunks=[c for c in chunks if c is not None],
                    scores=[s for c, s in zip(chunks, scores, strict=True) if c is not None],
                )
            )
        return pools

"""Hybrid relevance: lexical and dense results of one search fused into a score in 0..1.

For a chunk found among the candidates of either search:

    score = 0.5 * dense + 0.5 * lexical          (with an embedder)
    score = lexical                              (without)

    lexical = bm25 / best bm25 of the search  *  coverage
    dense   = (cos - worst cos) / (best cos - worst cos) of the dense candidates  *  cos

- ``coverage``: the share of the query's distinct terms (`loomctx.text.terms`) in the chunk;
- a part is 0 when its search did not find the chunk; ``cos`` is clamped to 0..1, and the
  rescaling counts as 1 when every dense candidate has the same cosine;
- while the embedder's vectors are still being computed (in the background, after a fast
  embedder's), a chunk that dense search did not find takes its dense part from the fast
  embedder's search instead, rescaled the same way within that search's candidates: a chunk
  without the embedder's vector yet is searched by its fast vector rather than by its words
  alone. Once every chunk has the embedder's vector, the fast search is not asked.

Why. Each side is a relative score, damped by absolute evidence. Raw scores alone say little:
BM25 grows with the corpus and the query, and cosine similarity depends on the model
(multilingual-e5 puts unrelated texts near 0.75 and close ones near 0.85, so raw cosines
would hardly move a sum), so each is rescaled within this search, as Weaviate's relative
score fusion and OpenSearch's min-max normalisation do. But a relative score gives the best
of weak matches the top mark: one shared common word would score 1 against an English query
over a Chinese document that answers it. So the lexical side is scaled by coverage (one query
term of four: at most 0.25), which also gives lexical-only search an absolute reading, and the
dense side by the cosine itself (a model that says 0.1 is not trusted as a 1). Equal weights:
on LoCoMo, BM25 and e5-small alone score about the same (R@10 57.6 and 58.8) and their fusion
beats both.

Coverage is tested on the lowercased text with `in` (C speed: re-tokenizing 20 candidates
would cost milliseconds), so a term inside a longer word counts, as a stem does; a stem of
four letters or more also counts without its last letter, which stemmers change ("happy" ->
"happi", "making" -> "make").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from loomctx.stores.base import Hit, Record

__all__ = ["DENSE_WEIGHT", "Fused", "fuse"]

DENSE_WEIGHT: Final = 0.5


@dataclass(frozen=True, slots=True, kw_only=True)
class Fused:
    """One chunk's fused score and the raw scores it came from."""

    record: Record
    score: float
    vector_score: float | None
    lexical_score: float | None


def fuse(
    query_terms: Sequence[str],
    lexical: Sequence[Hit],
    dense: Sequence[Hit] | None,
    *,
    lexical_complete: bool,
    fast: Sequence[Hit] = (),
) -> list[Fused]:
    """Every chunk of `lexical`, `dense` (None: no embedder) and `fast` with its fused score,
    best first (ties by key). `lexical_complete`: lexical search returned every chunk that has
    a query term, so a chunk it missed has a BM25 of 0 (else: unknown, None). `fast`: the fast
    embedder's hits, the dense part of the chunks `dense` lacks (see the module docstring)."""
    records: dict[str, Record] = {}
    best = max((h.score for h in lexical), default=0.0)
    lex: dict[str, float] = {}
    for hit in lexical:
        records[hit.record.key] = hit.record
        lex[hit.record.key] = hit.score / best if best > 0 else 0.0
    cosine = _cosines(dense or (), records)
    fast_cosine = _cosines(fast, records) if dense is not None else {}
    dense_part = _dense_parts(cosine)
    for key, part in _dense_parts(fast_cosine).items():
        dense_part.setdefault(key, part)
    probes = [_probe(t) for t in set(query_terms)]
    out = []
    for key, record in records.items():
        lexical_part = 0.0
        if key in lex and probes:
            text = record.text.lower()
            lexical_part = lex[key] * sum(p in text for p in probes) / len(probes)
        if dense is None:
            score = lexical_part
        else:
            part = dense_part.get(key, 0.0)
            score = DENSE_WEIGHT * part + (1 - DENSE_WEIGHT) * lexical_part
        out.append(
            Fused(
                record=record,
                score=min(1.0, max(0.0, score)),
                vector_score=cosine.get(key, fast_cosine.get(key)),
                lexical_score=lex.get(key, 0.0 if lexical_complete else None),
            )
        )
    out.sort(key=lambda f: (-f.score, f.record.key))
    return out


def _cosines(hits: Sequence[Hit], records: dict[str, Record]) -> dict[str, float]:
    """The cosine of each hit by key; adds the hits' records to `records`."""
    cosine: dict[str, float] = {}
    for hit in hits:
        records.setdefault(hit.record.key, hit.record)
        cosine[hit.record.key] = hit.score
    return cosine


def _dense_parts(cosine: dict[str, float]) -> dict[str, float]:
    """Each candidate's dense part: its cosine rescaled within the candidates, times itself."""
    low = min(cosine.values(), default=0.0)
    spread = max(cosine.values(), default=0.0) - low
    return {
        key: ((cos - low) / spread if spread > 0 else 1.0) * min(1.0, max(0.0, cos))
        for key, cos in cosine.items()
    }


def _probe(term: str) -> str:
    """What to look for in the text: the term, or for a stem of four letters or more the
    stem without its last letter (which also finds the term itself)."""
    return term[:-1] if len(term) >= 4 and term.isalpha() else term

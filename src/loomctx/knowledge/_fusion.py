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
on conversations BM25 and e5-small alone rank about as well as each other, and their fusion
beats both (docs/benchmarks.md, "Design measurements").

Coverage is tested on the lowercased text with `in` (C speed: re-tokenizing 20 candidates
would cost milliseconds), so a term inside a longer word counts, as a stem does; a stem of
four letters or more also counts without its last letter, which stemmers change ("happy" ->
"happi", "making" -> "make"). Each text's character pairs are kept as bits of one integer,
with the lowercased text, once per text: a probe with a pair the text lacks cannot be in it,
so only the texts that hold all of a probe's pairs are scanned.

The arithmetic runs over per-chunk numpy arrays (`loomctx.search`, the fusion memory search
uses too), over the chunks of each search as the caller read them (`Pool`: a store's
records, or what `loomctx.knowledge._search` keeps of them by version), with the options
where the two differ: BM25 relative to the best is 0 rather than 1 when no hit scores above
0, each part is damped as above, and the fast embedder fills the dense part's gaps rather
than being a third weighted ranking.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import pairwise
from typing import Any, Final, Generic, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from loomctx.search import (
    best_first,
    first_hits,
    first_scores,
    min_max,
    ranking,
    relative,
    weighted,
)

__all__ = ["DENSE_WEIGHT", "Pool", "fused"]

DENSE_WEIGHT: Final = 0.5
Floats = npt.NDArray[np.float64]


class FusionItem(Protocol):
    """What fusion reads of a chunk: its key (ties) and its text (coverage)."""

    @property
    def key(self) -> str: ...
    @property
    def text(self) -> str: ...


T = TypeVar("T", bound=FusionItem)


@dataclass(frozen=True, slots=True, kw_only=True)
class Pool(Generic[T]):
    """One search's hits, best first: the chunk of each and its score."""

    chunks: Sequence[T] = ()
    scores: Sequence[float] | Floats = field(default_factory=tuple)


def fused(
    query_terms: Sequence[str],
    lexical: Pool[T],
    dense: Pool[T] | None,
    *,
    lexical_complete: bool,
    fast: Pool[T] | None = None,
    limit: int | None = None,
) -> tuple[list[T], list[float], list[float | None], list[float | None]]:
    """The best `limit` (default: all) chunks of `lexical`, `dense` (None: no embedder) and
    `fast` with their fused scores, best first (ties by key), as four lists: chunks, fused
    scores, vector scores, lexical scores (the caller makes its own value of each winner).
    `lexical_complete`: lexical search returned every chunk that has a query term, so a
    chunk it missed has a BM25 of 0 (else: unknown, None). `fast`: the fast embedder's hits,
    the dense part of the chunks `dense` lacks (see the module docstring)."""
    index: dict[str, int] = {}
    chunks: list[T] = []

    def rows(pool: Pool[T]) -> list[int]:
        out = []
        for chunk in pool.chunks:
            key = chunk.key
            row = index.get(key)
            if row is None:
                row = index[key] = len(chunks)
                chunks.append(chunk)
            out.append(row)
        return out

    scored = [
        ranking(rows(pool), pool.scores, pool.scores)
        for pool in (lexical, dense or Pool(), fast if dense is not None and fast else Pool())
    ]
    n = len(chunks)
    if not n:
        return [], [], [], []
    lex = first_scores(scored[0].rows, relative(scored[0], flat=0.0), n)
    dense_hits, fast_hits = first_hits(scored[1].rows), first_hits(scored[2].rows)
    cosine = first_scores(scored[1].rows, scored[1].scores, n, dense_hits)
    fast_cosine = first_scores(scored[2].rows, scored[2].scores, n, fast_hits)
    dense_part = first_scores(
        scored[1].rows, _damped(min_max(scored[1]), scored[1].scores), n, dense_hits
    )
    from_fast = first_scores(
        scored[2].rows, _damped(min_max(scored[2]), scored[2].scores), n, fast_hits
    )
    dense_part = np.where(np.isnan(dense_part), from_fast, dense_part)
    probes = [(p, _pairs(p)) for p in (_probe(t) for t in set(query_terms))]
    lexical_part = np.zeros(n)
    if probes:
        found = scored[0].rows
        covered = [_covered(chunks[i].text, probes) for i in found.tolist()]
        lexical_part[found] = lex[found] * np.asarray(covered, dtype=np.float64) / len(probes)
    if dense is None:
        score = lexical_part
    else:
        score = weighted([(DENSE_WEIGHT, dense_part), (1 - DENSE_WEIGHT, lexical_part)], 1.0)
    score = np.clip(score, 0.0, 1.0)
    keys = [c.key for c in chunks]
    best = best_first(score, n if limit is None else limit, keys)
    at = np.asarray(best, dtype=np.intp)
    cos = np.where(cosine[at] == cosine[at], cosine[at], fast_cosine[at]).tolist()
    missing = 0.0 if lexical_complete else None  # the BM25 of a chunk lexical search missed
    return (
        [chunks[i] for i in best],
        score[at].tolist(),
        [None if c != c else c for c in cos],
        [missing if x != x else x for x in lex[at].tolist()],
    )


def _damped(rescaled: Floats, cosine: Floats) -> Floats:
    """A dense part: the cosine rescaled within the candidates, times the cosine (in 0..1)."""
    out: Floats = rescaled * np.clip(cosine, 0.0, 1.0)
    return out


@lru_cache(maxsize=8192)  # the same chunks come back search after search
def _searchable(text: str) -> list[Any]:
    """`text` in lower case, and once it is searched again its character pairs (`_pairs`;
    -1 until then): a text seen once is scanned, as making its pairs costs several scans."""
    return [text.lower(), -1]


def _pairs(text: str) -> int:
    """A bit per pair of adjacent characters of `text` (of `_PAIR_BITS`, by their code
    points): a text holding `probe` holds all of its pairs, so has all of its bits."""
    if len(text) < 64:  # a probe: fewer steps in Python than numpy's set-up
        bits = 0
        for a, b in pairwise(text):
            bits |= 1 << (_PAIR_BITS - 1 - (ord(a) * 31 + ord(b)) % _PAIR_BITS)
        return bits
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    seen = np.zeros(_PAIR_BITS, dtype=np.bool_)
    # (below 2**32: code points are at most 0x10FFFF; `& (bits - 1)` is `% bits`)
    seen[(codes[:-1] * 31 + codes[1:]) & (_PAIR_BITS - 1)] = True
    return int.from_bytes(np.packbits(seen).tobytes(), "big")


_PAIR_BITS: Final = 1024  # a chunk of ~800 characters has ~300 distinct pairs: a quarter set


def _covered(text: str, probes: Sequence[tuple[str, int]]) -> int:
    """How many of `probes` (each with its `_pairs`) occur in `text`: scanned for only where
    the text has every pair of the probe (once its pairs are known)."""
    kept = _searchable(text)
    lowered, have = kept[0], kept[1]
    if have < 0:
        if len(kept) == 2:  # the first search of this text: scanned, its pairs made next time
            kept.append(True)
            return sum(map(lowered.__contains__, (p for p, _ in probes)))
        have = kept[1] = _pairs(lowered)  # (two threads may both make it: the same value)
    n = 0
    for probe, need in probes:
        if need & have == need and probe in lowered:
            n += 1
    return n


def _probe(term: str) -> str:
    """What to look for in the text: the term, or for a stem of four letters or more the
    stem without its last letter (which also finds the term itself)."""
    return term[:-1] if len(term) >= 4 and term.isalpha() else term

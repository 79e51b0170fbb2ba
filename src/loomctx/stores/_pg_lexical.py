"""BM25 in PostgreSQL over ``lexical_postings``, with the scores of `loomctx.stores._lexical`.

Scoring is the SQLite store's: Okapi BM25 (k1 = 1.2, b = 0.75), IDF
``ln(1 + (N - df + 0.5) / (df + 0.5))`` over the store-wide document frequencies, a query
being an OR of its terms; ties go to the older record (lower id).

Why not rank every match. A query of 5-10 LoCoMo words matches ~35% of the records: at 100k
records, summing BM25 over every matching posting in SQL took 264 ms p50 (a ``simple``
tsvector with a GIN index, its term counts read back with ``unnest``: 8.6 s). So the search
is MaxScore (Turtle and Flood, 1995), which is exact:

1. score the records having any of the rarest query terms (those whose postings add up to
   at most `_FIRST_ROUND` rows): this gives a `limit`-th best score, θ;
2. a term's contribution is at most its IDF times the BM25 term weight of its largest count
   in its shortest text (kept per term in ``lexical_terms``); the commonest terms whose bounds add
   up to less than θ cannot lift a record that has only them into the top `limit`: those
   records are skipped, and the records having any other ("essential") term are scored.
   When the first round already covered the essential terms, there is no second round.

Every round is one statement, filtered by namespace and kind in the postings index.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

import psycopg
from psycopg import sql

__all__ = ["K1", "B", "search_ids", "term_counts"]

K1: Final = 1.2
B: Final = 0.75
_FIRST_ROUND: Final = 500  # postings the first round may read (rarest terms first)
_MAX_TERM_BYTES: Final = 2_000  # longer terms are not indexed (no query ever names one)


def term_counts(analyzed: Sequence[str]) -> Counter[str]:
    """Each indexable term of a text and how often it occurs."""
    return Counter(
        t for t in analyzed if len(t.encode("utf-8", "surrogatepass")) <= _MAX_TERM_BYTES
    )


def search_ids(
    conn: psycopg.Connection,
    query_terms: Sequence[str],
    *,
    filters: sql.Composable,
    params: dict[str, Any],
    limit: int,
) -> list[tuple[int, float]]:
    """Up to `limit` (record id, BM25 score) pairs, best first (ties: lower id first), of
    the records having any of `query_terms` that pass `filters` (a condition over the
    postings' ``namespace`` and ``kind`` columns, with its `params`)."""
    unique = list(dict.fromkeys(query_terms))
    rows = conn.execute(
        "SELECT true, key, value::bigint, 0, 0 FROM loom_meta "
        "WHERE key IN ('texts', 'total_len') UNION ALL "
        "SELECT false, term, df, max_tf, min_len FROM lexical_terms "
        "WHERE term = ANY(%s::text[]) AND df > 0",
        (unique,),
    ).fetchall()
    stats = {key: int(value) for is_stat, key, value, _, _ in rows if is_stat}
    texts, total_len = stats["texts"], stats["total_len"]
    found = [term for is_stat, term, *_ in rows if not is_stat]
    dfs = [int(row[2]) for row in rows if not row[0]]
    shapes = {row[1]: (int(row[3]), int(row[4])) for row in rows if not row[0]}
    if texts == 0 or not found:
        return []
    average = total_len / texts
    idf = {
        term: math.log(1 + (texts - df + 0.5) / (df + 0.5))
        for term, df in zip(found, dfs, strict=True)
    }
    # A term adds at most idf * f(tf, length), f growing with tf and falling with length:
    # its largest count in its shortest text bounds it (however far apart the two were).
    bound = {}
    for term in found:
        tf, shortest = shapes[term]
        bound[term] = idf[term] * tf * (K1 + 1) / (tf + K1 * (1 - B + B * shortest / average))
    df_of = dict(zip(found, dfs, strict=True))
    by_rarity = sorted(idf, key=lambda t: (-idf[t], t))
    first: list[str] = []
    read = 0
    for term in by_rarity:
        if first and read + df_of[term] > _FIRST_ROUND:
            break
        first.append(term)
        read += df_of[term]
    hits = _score(conn, first, idf, bound, average, filters, params, limit, 0.0)
    if len(first) == len(by_rarity):
        return hits
    theta = hits[-1][1] if len(hits) == limit else 0.0
    skipped = 0.0
    essential = list(by_rarity)
    for term in reversed(by_rarity):  # commonest first
        if skipped + bound[term] >= theta:
            break
        skipped += bound[term]
        essential.remove(term)
    if set(essential) <= set(first):
        return hits
    return _score(conn, essential, idf, bound, average, filters, params, limit, theta)


def _score(
    conn: psycopg.Connection,
    essential: list[str],
    idf: dict[str, float],
    bound: dict[str, float],
    average: float,
    filters: sql.Composable,
    params: dict[str, Any],
    limit: int,
    theta: float,
) -> list[tuple[int, float]]:
    """The best `limit` of the records having any `essential` term, scored over every
    query term in `idf`; records that cannot reach `theta` are not scored in full.

    The essential terms' postings are read in one range scan per term and summed per
    record; only a record whose sum plus the other terms' bounds reaches `theta` has its
    postings of the other terms looked up by key (reading every posting of the common
    terms is what MaxScore avoids)."""
    others = [t for t in idf if t not in essential]
    rest = sum(bound[t] for t in others)
    part = "sum(w.idf * p.tf * {k1p} / (p.tf + {k1} * ({b1} + {b} * p.nterms / %(avg)s::float8)))"
    full = "e.partial"
    if others:
        full = (
            "e.partial + coalesce((SELECT " + part + " FROM lexical_postings AS p "
            "JOIN unnest(%(others)s::text[], %(oidf)s::float8[]) AS w (term, idf) "
            "ON w.term = p.term WHERE p.record_id = e.record_id "
            "AND p.term = ANY(%(others)s::text[])), 0)"
        )
    query = sql.SQL(
        "WITH e AS (SELECT p.record_id, " + part + " AS partial FROM lexical_postings AS p "
        "JOIN unnest(%(ess)s::text[], %(eidf)s::float8[]) AS w (term, idf) ON w.term = p.term "
        "WHERE p.term = ANY(%(ess)s::text[]){filters} GROUP BY p.record_id) "
        "SELECT e.record_id, " + full + " AS score FROM e "
        "WHERE e.partial + %(rest)s >= %(theta)s ORDER BY score DESC, e.record_id "
        "LIMIT %(limit)s"
    ).format(
        k1p=sql.Literal(K1 + 1),
        k1=sql.Literal(K1),
        b1=sql.Literal(1 - B),
        b=sql.Literal(B),
        filters=filters,
    )
    rows = conn.execute(
        query,
        {
            **params,
            "avg": average,
            "ess": essential,
            "eidf": [idf[t] for t in essential],
            "others": others,
            "oidf": [idf[t] for t in others],
            "rest": rest,
            "theta": theta * (1 - 1e-9),
            "limit": limit,
        },
    ).fetchall()
    return [(int(record_id), float(score)) for record_id, score in rows]

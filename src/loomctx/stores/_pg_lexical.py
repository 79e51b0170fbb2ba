"""BM25 in PostgreSQL over ``lexical_postings``, with the scores of `loomctx.stores._lexical`.

Scoring is the SQLite store's: Okapi BM25 (k1 = 1.2, b = 0.75), IDF
``ln(1 + (N - df + 0.5) / (df + 0.5))`` over the store-wide document frequencies, a query
being an OR of its terms; ties go to the older record (lower id).

Why not always rank every match. A query of a few conversational words matches about a third
of the records, and summing BM25 over every matching posting in SQL (or ranking a ``simple``
tsvector's matches) is far too slow at archive sizes (docs/benchmarks.md, "Design
measurements"). So the search is MaxScore (Turtle and Flood, 1995), which is exact:

1. score the records having any of the rarest query terms (those whose postings add up to
   at most `_FIRST_ROUND` rows): this gives a `limit`-th best score, θ;
2. a term's contribution is at most its IDF times the BM25 term weight of its largest count
   in its shortest text (kept per term in ``lexical_terms``); the commonest terms whose bounds add
   up to less than θ cannot lift a record that has only them into the top `limit`: those
   records are skipped, and the records having any other ("essential") term are scored.
   When the first round already covered the essential terms, there is no second round.

But when the query's terms have at most `_SCORE_ALL` postings in all, the first round
scores them all: summing a few thousand postings costs less than MaxScore's look-ups by
key and second round, and only past that does MaxScore's pruning pay. The store's
term statistics count postings store-wide; a search of one exact namespace (a
conversation, usually a small part of the store) also counts the postings it keeps, up to
`_SCORE_ALL`, and scores them all when they are fewer: a session of 10k turns in a store
of 110k holds 1.1-3.4k of a window query's postings where the store holds 12-36k, and
MaxScore's first round, chosen by store-wide rarity, found too few of them to prune
anything. A prefix may be most of the store: there, counting thousands of postings only to
find more would slow the search of a large archive.

The statistics and the first round are one statement, a second round another (a round trip
costs as much as summing hundreds of postings); each is filtered by namespace and kind in
the postings index, and returns each hit's `seq` with it, so that the store can use the
records it already holds (`PostgresStore._hits`).
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

import psycopg

__all__ = ["K1", "B", "search_ids", "term_counts"]

K1: Final = 1.2
B: Final = 0.75
_FIRST_ROUND: Final = 500  # postings the first round may read (rarest terms first)
_SCORE_ALL: Final = 8_000  # postings of all the query's terms up to which one round scores all
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
    filters: str,
    params: dict[str, Any],
    limit: int,
    local: bool,
) -> list[tuple[int, float, int]]:
    """Up to `limit` (record id, BM25 score, record seq) triples, best first (ties: lower id
    first), of the records having any of `query_terms` that pass `filters` (SQL text: ``AND``
    conditions over the postings' ``namespace`` and ``kind`` columns, with `params`).

    `local`: whether `filters` is likely to keep a small part of the store (one exact
    namespace: a conversation), so that counting the postings it keeps, up to
    `_SCORE_ALL`, is worth a try before MaxScore."""
    unique = list(dict.fromkeys(query_terms))
    stats, *hits = conn.execute(
        _first_round(filters),
        {
            **params,
            "terms": unique,
            "first": _FIRST_ROUND,
            "all": _SCORE_ALL,
            "local": local,
            "limit": limit,
        },
    ).fetchall()
    texts, total_len, found, dfs, max_tfs, min_lens, firsts = stats[4:]
    found_hits = [(int(r[1]), float(r[2]), int(r[3])) for r in hits]
    if not texts or not found or all(firsts):
        return found_hits
    average = total_len / texts
    idf = {
        term: math.log(1 + (texts - df + 0.5) / (df + 0.5))
        for term, df in zip(found, dfs, strict=True)
    }
    # A term adds at most idf * f(tf, length), f growing with tf and falling with length:
    # its largest count in its shortest text bounds it (however far apart the two were).
    bound = {
        term: idf[term] * tf * (K1 + 1) / (tf + K1 * (1 - B + B * shortest / average))
        for term, tf, shortest in zip(found, max_tfs, min_lens, strict=True)
    }
    first = {term for term, is_first in zip(found, firsts, strict=True) if is_first}
    theta = found_hits[-1][1] if len(found_hits) == limit else 0.0
    skipped = 0.0
    essential = list(found)  # rarest first
    for term in reversed(found):  # commonest first
        if skipped + bound[term] >= theta:
            break
        skipped += bound[term]
        essential.remove(term)
    if set(essential) <= first:
        return found_hits
    others = [t for t in found if t not in essential]
    rows = conn.execute(
        _second_round(filters, others=bool(others)),
        {
            **params,
            "avg": average,
            "ess": essential,
            "eidf": [idf[t] for t in essential],
            "others": others,
            "oidf": [idf[t] for t in others],
            "rest": sum(bound[t] for t in others),
            "theta": theta * (1 - 1e-9),
            "limit": limit,
        },
    ).fetchall()
    return [(int(record_id), float(score), int(seq)) for record_id, score, seq in rows]


# BM25's term weight of a posting ``p`` without the IDF, `{avg}` being the average text
# length; in float8 throughout (a numeric literal would make PostgreSQL compute part of it
# in slow `numeric` arithmetic).
_WEIGHT: Final = (
    f"p.tf * {K1 + 1!r}::float8 / (p.tf + {K1!r}::float8 * ({1 - B!r}::float8 "
    f"+ {B!r}::float8 * p.nterms / {{avg}}))"
)


@functools.cache
def _first_round(filters: str) -> str:
    """The statement of the statistics and the first round, for `filters` (made once per
    filter: psycopg then parses and prepares it once per connection).

    Its first row holds the corpus statistics (columns 4..) and, rarest first, each query
    term found with its document frequency, MaxScore bounds and whether the first round
    scored it; the other rows are the first round's best `limit` (id, score, seq), best
    first. The first round scores the records having any of the rarest terms whose
    postings add up to at most `_FIRST_ROUND` (always the rarest), or of every term when
    they add up to at most `_SCORE_ALL` in the store, or (with `local`) in the filter;
    each over every query term: the other terms' postings of a record are looked up by
    key (a subquery run only when there are any)."""
    weight = _WEIGHT.format(avg="(SELECT total / n FROM c)")
    return f"""
        WITH c AS (
            SELECT max(value::float8) FILTER (WHERE key = 'texts') AS n,
                   max(value::float8) FILTER (WHERE key = 'total_len') AS total
            FROM loom_meta WHERE key IN ('texts', 'total_len')),
        q AS (
            SELECT term, df, max_tf, min_len, ln(1 + (c.n - df + 0.5) / (df + 0.5)) AS idf,
                   row_number() OVER rarity = 1 OR sum(df) OVER rarity <= %(first)s AS rare,
                   sum(df) OVER () AS every
            FROM lexical_terms, c
            WHERE term = ANY(%(terms)s::text[]) AND df > 0 AND c.n > 0
            WINDOW rarity AS (ORDER BY df, term)),
        kept AS (
            SELECT CASE WHEN (SELECT max(every) FROM q) <= %(all)s THEN 0
                WHEN NOT %(local)s THEN %(all)s + 1
                ELSE (SELECT count(*) FROM (
                    SELECT FROM lexical_postings AS p
                    WHERE p.term = ANY(ARRAY(SELECT term FROM q)){filters}
                    LIMIT %(all)s + 1) AS x)
                END AS n),
        t AS (
            SELECT term, df, max_tf, min_len, idf, rare OR (SELECT n FROM kept) <= %(all)s AS first
            FROM q),
        e AS (
            SELECT p.record_id, sum(t.idf * {weight}) AS partial
            FROM lexical_postings AS p JOIN t ON t.term = p.term
            WHERE p.term = ANY(ARRAY(SELECT term FROM t WHERE first)){filters}
            GROUP BY p.record_id),
        h AS (
            SELECT e.record_id, e.partial + CASE WHEN (SELECT bool_and(first) FROM t) THEN 0
                ELSE coalesce((
                    SELECT sum(t.idf * {weight}) FROM lexical_postings AS p
                    JOIN t ON t.term = p.term
                    WHERE p.record_id = e.record_id
                    AND p.term = ANY(ARRAY(SELECT term FROM t WHERE NOT first))), 0)
                END AS score
            FROM e ORDER BY score DESC, e.record_id LIMIT %(limit)s)
        SELECT 0, NULL::bigint, NULL::float8, NULL::bigint, c.n::bigint, c.total::bigint,
               a.terms, a.dfs, a.max_tfs, a.min_lens, a.firsts
        FROM c, LATERAL (
            SELECT array_agg(term ORDER BY df, term) AS terms,
                   array_agg(df ORDER BY df, term) AS dfs,
                   array_agg(max_tf ORDER BY df, term) AS max_tfs,
                   array_agg(min_len ORDER BY df, term) AS min_lens,
                   array_agg(first ORDER BY df, term) AS firsts FROM t) AS a
        UNION ALL
        SELECT 1, h.record_id, h.score, r.seq, NULL, NULL, NULL, NULL, NULL, NULL, NULL
        FROM h JOIN records AS r ON r.id = h.record_id
        ORDER BY 1, 3 DESC, 2"""


@functools.cache
def _second_round(filters: str, *, others: bool) -> str:
    """The statement of a second round, for `filters`: the best `limit` (id, score, seq) of
    the records having any essential term, scored over every query term; records that
    cannot reach θ are not scored in full.

    The essential terms' postings are read in one range scan per term and summed per
    record; only a record whose sum plus the other terms' bounds reaches θ has its
    postings of the other terms looked up by key (reading every posting of the common
    terms is what MaxScore avoids)."""
    weight = _WEIGHT.format(avg="%(avg)s::float8")
    full = "e.partial"
    if others:
        full = f"""e.partial + coalesce((
            SELECT sum(w.idf * {weight}) FROM lexical_postings AS p
            JOIN unnest(%(others)s::text[], %(oidf)s::float8[]) AS w (term, idf)
            ON w.term = p.term
            WHERE p.record_id = e.record_id AND p.term = ANY(%(others)s::text[])), 0)"""
    return f"""
        WITH e AS (
            SELECT p.record_id, sum(w.idf * {weight}) AS partial
            FROM lexical_postings AS p
            JOIN unnest(%(ess)s::text[], %(eidf)s::float8[]) AS w (term, idf)
            ON w.term = p.term
            WHERE p.term = ANY(%(ess)s::text[]){filters}
            GROUP BY p.record_id),
        h AS (
            SELECT e.record_id, {full} AS score FROM e
            WHERE e.partial + %(rest)s >= %(theta)s
            ORDER BY score DESC, e.record_id LIMIT %(limit)s)
        SELECT h.record_id, h.score, r.seq FROM h JOIN records AS r ON r.id = h.record_id
        ORDER BY h.score DESC, h.record_id"""

"""Reranker (seed 002): dedupe by fingerprint, weighted mean of signals, filter and sort."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from loomctx.errors import ConfigError
from loomctx.retrieval import (
    Candidate,
    QueryOverlapSignal,
    Reranker,
    VectorScoreSignal,
    dedupe,
    default_signals,
    fingerprint,
)

QUERY = "OAuth2 token expiry"  # terms: oauth2 token expiri


def crafted() -> list[Candidate]:
    """Three candidates whose every signal is known by hand (see `test_final_score...`)."""
    return [
        Candidate(id="a", text="OAuth2 token rotation policy", origin="memory", relevance=0.8),
        Candidate(id="b", text="Lunch is at noon", origin="memory", relevance=0.2),
        Candidate(
            id="c",
            text=("token expiry: " + "details " * 40).strip(),  # 333 characters
            origin="knowledge:kb",
            relevance=0.5,
        ),
    ]


def test_fingerprint_ignores_case_and_whitespace() -> None:
    assert fingerprint("Hello  World\n") == fingerprint("hello world")
    assert fingerprint("hello world") != fingerprint("hello, world")
    c = Candidate(id="x", text="Hello World", origin="memory")
    assert c.fingerprint == fingerprint("hello   world")
    assert c.key == ("memory", "x")


# Query terms weighted by rarity among the 3 candidates: oauth2 and expiri are in one,
# token in two; weight ln(1 + (n + 1) / (df + 0.5)).
RARE, COMMON = math.log(1 + 4 / 1.5), math.log(1 + 4 / 2.5)
OVERLAP = (RARE + COMMON) / (2 * RARE + COMMON)  # a and c each hold one rare, one common


def test_final_score_is_the_weighted_mean_of_the_signals() -> None:
    ranked = Reranker().rerank(QUERY, crafted())
    by_id = {c.id: c for c in ranked}
    # a: memory holds 2 of 3 candidates (> 50%: 0.6), 28 characters (28/200).
    assert by_id["a"].signals == pytest.approx(
        {
            "vector_score": 1.0,  # the best relevance of the set
            "query_overlap": OVERLAP,
            "origin_diversity": 0.6,
            "content_length": 0.14,
            "speaker": 1.0,  # the query names no speaker: 1 for all
        }
    )
    # The weights sum to 1.1; the speaker signal adds 0.1 * 1 to every candidate.
    a = 0.4 * 1.0 + 0.35 * OVERLAP + 0.15 * 0.6 + 0.1 * 0.14 + 0.1
    assert by_id["a"].score == pytest.approx(a / 1.1)
    b = 0.4 * 0.25 + 0.35 * 0 + 0.15 * 0.6 + 0.1 * 0.08 + 0.1
    assert by_id["b"].score == pytest.approx(b / 1.1)
    c = 0.4 * 0.625 + 0.35 * OVERLAP + 0.15 * 1 + 0.1 * 1 + 0.1
    assert by_id["c"].score == pytest.approx(c / 1.1)
    assert [c.id for c in ranked] == ["a", "c", "b"]


def test_weights_override_by_name_and_the_mean_divides_by_their_sum() -> None:
    reranker = Reranker(weights={"query_overlap": 0.0, "content_length": 0.45})
    assert reranker.weights == {
        "vector_score": 0.4,
        "query_overlap": 0.0,
        "origin_diversity": 0.15,
        "content_length": 0.45,
        "speaker": 0.1,
    }
    by_id = {c.id: c for c in reranker.rerank(QUERY, crafted())}
    total = 0.4 + 0.15 + 0.45 + 0.1
    assert by_id["a"].score == pytest.approx((0.4 * 1.0 + 0.15 * 0.6 + 0.45 * 0.14 + 0.1) / total)
    assert by_id["c"].score == pytest.approx((0.4 * 0.625 + 0.15 * 1 + 0.45 * 1 + 0.1) / total)
    assert by_id["a"].signals["query_overlap"] == pytest.approx(OVERLAP)  # scored, weighed 0


def test_min_score_drops_weak_candidates() -> None:
    assert [c.id for c in Reranker(min_score=0.6).rerank(QUERY, crafted())] == ["a", "c"]
    assert Reranker(min_score=1.0).rerank(QUERY, crafted()) == []
    assert Reranker().rerank(QUERY, []) == []


def test_ties_keep_recall_order() -> None:
    same = [
        Candidate(id=str(i), text=f"note {i}", origin="memory", relevance=0.5) for i in range(5)
    ]
    assert [c.id for c in Reranker().rerank("q", same)] == ["0", "1", "2", "3", "4"]
    assert [c.id for c in Reranker().rerank("q", same[::-1])] == ["4", "3", "2", "1", "0"]


class Freshness:
    """A custom signal: newer candidates (by `metadata["age"]`, in days) score higher."""

    name = "freshness"

    def __init__(self, weight: float = 1.0) -> None:
        self.weight = weight
        self.prepared: list[tuple[str, int]] = []

    def prepare(self, query: str, candidates: Sequence[Candidate]) -> None:
        self.prepared.append((query, len(candidates)))

    def score(self, candidate: Candidate) -> float:
        return 1.0 / (1.0 + float(candidate.metadata.get("age", 0)))


def test_a_custom_signal_plugs_in() -> None:
    old = Candidate(
        id="old", text="release notes", origin="memory", relevance=0.9, metadata={"age": 9}
    )
    new = Candidate(
        id="new", text="release plan", origin="memory", relevance=0.6, metadata={"age": 0}
    )
    fresh = Freshness()
    only = Reranker([VectorScoreSignal(), fresh]).rerank("release", [old, new, old])
    assert fresh.prepared == [("release", 2)]  # after dedupe
    assert [c.id for c in only] == ["new", "old"]
    assert only[0].score == pytest.approx((0.4 * 0.6 / 0.9 + 1.0 * 1.0) / 1.4)
    assert only[1].signals == pytest.approx({"vector_score": 1.0, "freshness": 0.1})
    # Alongside the default four; a weight of 0 turns it off.
    mixed = Reranker([*default_signals(), Freshness()], weights={"freshness": 0})
    assert [c.id for c in mixed.rerank("release", [old, new])] == ["old", "new"]


def test_dedupe_keeps_the_higher_vector_score_at_the_first_position() -> None:
    first = Candidate(id="m1", text="Deploys run on Tuesday", origin="memory", vector_score=0.3)
    other = Candidate(id="x", text="Something else", origin="memory")
    better = Candidate(
        id="kb1", text="deploys  run on tuesday", origin="knowledge:kb", vector_score=0.7
    )
    assert [c.id for c in dedupe([first, other, better])] == ["kb1", "x"]
    # A tie (or no dense score on either side) keeps the first.
    tie = Candidate(
        id="kb2", text="Deploys run on Tuesday", origin="knowledge:kb", vector_score=0.3
    )
    assert [c.id for c in dedupe([first, tie])] == ["m1"]
    plain = [Candidate(id=i, text="same", origin="memory") for i in ("p", "q")]
    assert [c.id for c in dedupe(plain)] == ["p"]
    # Any dense score beats none.
    unscored = Candidate(id="u", text="Deploys run on Tuesday", origin="memory")
    assert [c.id for c in dedupe([unscored, first])] == ["m1"]
    assert [c.id for c in dedupe([first, unscored])] == ["m1"]


def test_the_reranker_dedupes_before_scoring() -> None:
    copy = Candidate(
        id="a2",
        text="oauth2 TOKEN rotation policy",
        origin="knowledge:kb",
        relevance=0.9,
        vector_score=0.9,
    )
    twice = [*crafted(), copy]
    ranked = Reranker().rerank(QUERY, twice)
    assert sorted(c.id for c in ranked) == ["a2", "b", "c"]
    # Diversity is computed over the deduplicated set: knowledge now holds 2 of 3.
    assert {c.id: c.signals["origin_diversity"] for c in ranked} == {"a2": 0.6, "b": 1.0, "c": 0.6}


def test_dedupe_a_zero_cosine_beats_a_negative_one() -> None:
    zero = Candidate(id="zero", text="Same text", origin="memory", vector_score=0.0)
    negative = Candidate(id="neg", text="same TEXT", origin="knowledge:kb", vector_score=-0.2)
    assert [c.id for c in dedupe([zero, negative])] == ["zero"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"weights": {"recency": 0.5}}, r"no signal named 'recency' to weigh"),
        ({"weights": {"query_overlap": -0.5}}, r"weight of 'query_overlap' must be >= 0"),
        ({"weights": {"query_overlap": True}}, r"weight of 'query_overlap' must be >= 0"),
        ({"weights": {"query_overlap": "0.5"}}, r"weight of 'query_overlap' must be >= 0"),
        ({"signals": []}, "needs at least one signal with a weight above 0"),
        ({"weights": {s.name: 0 for s in default_signals()}}, "at least one signal"),
        ({"signals": [VectorScoreSignal(), VectorScoreSignal()]}, "two signals share a name"),
        ({"min_score": 1.5}, r"`min_score` must be in 0..1"),
        ({"min_score": -0.1}, r"`min_score` must be in 0..1"),
        ({"min_score": math.nan}, r"`min_score` must be in 0..1"),
    ],
)
def test_configuration_errors(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Reranker(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"weights": {"query_overlap": math.nan}},
        {"weights": {"content_length": math.inf}},
        {"min_score": "0.5"},
    ],
)
def test_non_finite_or_non_numeric_settings_are_config_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        Reranker(**kwargs)  # type: ignore[arg-type]


def test_a_signal_of_weight_zero_is_allowed_if_another_counts() -> None:
    reranker = Reranker([VectorScoreSignal(), QueryOverlapSignal(0.0)])
    ranked = reranker.rerank("tokens", crafted())
    assert [c.score for c in ranked] == pytest.approx([1.0, 0.625, 0.25])

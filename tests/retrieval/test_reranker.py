"""Reranker (seed 002): dedupe by fingerprint, weighted mean of signals, filter and sort."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, date, datetime

import numpy as np
import pytest

from loomctx.errors import ConfigError
from loomctx.memory.task import USER_MESSAGE, Task
from loomctx.retrieval import (
    Evidence,
    QueryOverlapSignal,
    RelevanceSignal,
    Reranker,
    dedupe,
    default_signals,
    fingerprint,
)
from loomctx.retrieval.reranker import session_of, spread_sessions
from loomctx.retrieval.settings import RetrievalSettings
from loomctx.retrieval.signals import Scores

QUERY = "OAuth2 token expiry"  # terms: oauth2 token expiri


def crafted() -> list[Evidence]:
    """Three candidates whose every signal is known by hand (see `test_final_score...`)."""
    return [
        Evidence(
            id="a", text="OAuth2 token rotation policy", origin="memory", scores={"relevance": 0.8}
        ),
        Evidence(id="b", text="Lunch is at noon", origin="memory", scores={"relevance": 0.2}),
        Evidence(
            id="c",
            text=("token expiry: " + "details " * 40).strip(),  # 333 characters
            origin="knowledge:kb",
            scores={"relevance": 0.5},
        ),
    ]


def test_fingerprint_ignores_case_and_whitespace() -> None:
    assert fingerprint("Hello  World\n") == fingerprint("hello world")
    assert fingerprint("hello world") != fingerprint("hello, world")
    c = Evidence(id="x", text="Hello World", origin="memory")
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
            "time": 1.0,  # nor a time
            "role": 1.0,  # and is not in the first person
            # no candidate is of a session or a document: each is a session of one, whose
            # relevance is its own (relative to the best, as the first signal's)
            "session": 1.0,
        }
    )
    # The weights sum to 1.35; the speaker, time and role signals add their weights (0.1,
    # 0.1, 0.05) times 1 to every candidate, the session signal 0.1 times the first's.
    a = 0.4 * 1.0 + 0.35 * OVERLAP + 0.15 * 0.6 + 0.1 * 0.14 + 0.25 + 0.1 * 1.0
    assert by_id["a"].score == pytest.approx(a / 1.35)
    b = 0.4 * 0.25 + 0.35 * 0 + 0.15 * 0.6 + 0.1 * 0.08 + 0.25 + 0.1 * 0.25
    assert by_id["b"].score == pytest.approx(b / 1.35)
    c = 0.4 * 0.625 + 0.35 * OVERLAP + 0.15 * 1 + 0.1 * 1 + 0.25 + 0.1 * 0.625
    assert by_id["c"].score == pytest.approx(c / 1.35)
    assert [c.id for c in ranked] == ["a", "c", "b"]


def test_weights_override_by_name_and_the_mean_divides_by_their_sum() -> None:
    reranker = Reranker(weights={"query_overlap": 0.0, "content_length": 0.45})
    assert reranker.weights == {
        "vector_score": 0.4,
        "query_overlap": 0.0,
        "origin_diversity": 0.15,
        "content_length": 0.45,
        "speaker": 0.1,
        "time": 0.1,
        "role": 0.05,
        "session": 0.1,
    }
    by_id = {c.id: c for c in reranker.rerank(QUERY, crafted())}
    total = 0.4 + 0.15 + 0.45 + 0.35
    a = 0.4 * 1.0 + 0.15 * 0.6 + 0.45 * 0.14 + 0.25 + 0.1 * 1.0
    assert by_id["a"].score == pytest.approx(a / total)
    c = 0.4 * 0.625 + 0.15 * 1 + 0.45 * 1 + 0.25 + 0.1 * 0.625
    assert by_id["c"].score == pytest.approx(c / total)
    assert by_id["a"].signals["query_overlap"] == pytest.approx(OVERLAP)  # scored, weighed 0


def test_min_score_drops_weak_candidates() -> None:
    assert [c.id for c in Reranker(min_score=0.6).rerank(QUERY, crafted())] == ["a", "c"]
    assert Reranker(min_score=1.0).rerank(QUERY, crafted()) == []
    assert Reranker().rerank(QUERY, []) == []


def test_ties_keep_recall_order() -> None:
    same = [
        Evidence(id=str(i), text=f"note {i}", origin="memory", scores={"relevance": 0.5})
        for i in range(5)
    ]
    assert [c.id for c in Reranker().rerank("q", same)] == ["0", "1", "2", "3", "4"]
    assert [c.id for c in Reranker().rerank("q", same[::-1])] == ["4", "3", "2", "1", "0"]


class Freshness:
    """A custom signal: newer pieces (by `metadata["age"]`, in days) score higher."""

    name = "freshness"

    def __init__(self, weight: float = 1.0) -> None:
        self.weight = weight
        self.pools: list[tuple[str, int]] = []  # what it was asked to score, for the test

    def score(self, query: str, pool: Sequence[Evidence]) -> Scores:
        self.pools.append((query, len(pool)))
        return np.array([1.0 / (1.0 + float(e.metadata.get("age", 0))) for e in pool])


def test_a_custom_signal_plugs_in() -> None:
    old = Evidence(
        id="old",
        text="release notes",
        origin="memory",
        metadata={"age": 9},
        scores={"relevance": 0.9},
    )
    new = Evidence(
        id="new",
        text="release plan",
        origin="memory",
        metadata={"age": 0},
        scores={"relevance": 0.6},
    )
    fresh = Freshness()
    only = Reranker([RelevanceSignal(), fresh]).rerank("release", [old, new, old])
    assert fresh.pools == [("release", 2)]  # after dedupe
    assert [c.id for c in only] == ["new", "old"]
    assert only[0].score == pytest.approx((0.4 * 0.6 / 0.9 + 1.0 * 1.0) / 1.4)
    assert only[1].signals == pytest.approx({"vector_score": 1.0, "freshness": 0.1})
    # Alongside the default four; a weight of 0 turns it off.
    mixed = Reranker([*default_signals(), Freshness()], weights={"freshness": 0})
    assert [c.id for c in mixed.rerank("release", [old, new])] == ["old", "new"]


class Prepared:
    """A signal of the earlier protocol: `prepare(query, candidates)`, then
    `score(candidate)` one by one."""

    name = "prepared"
    weight = 1.0

    def prepare(self, query: str, candidates: Sequence[Evidence]) -> None:
        """Nothing."""

    def score(self, candidate: Evidence) -> float:
        return 1.0


class Short:
    """A signal that scores fewer pieces than it is given."""

    name = "short"
    weight = 1.0

    def score(self, query: str, pool: Sequence[Evidence]) -> Scores:
        return np.ones(len(pool) - 1)


def test_a_signal_of_the_earlier_protocol_or_the_wrong_shape_is_named() -> None:
    with pytest.raises(ConfigError, match=r"signal 'prepared' has `prepare`.*score\(query, pool\)"):
        Reranker([Prepared()])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match=r"signal 'short' returned scores of shape \(2,\)"):
        Reranker([Short()]).rerank(QUERY, crafted())


def test_reranking_adds_scores_to_new_values_and_keeps_recall_scores() -> None:
    pool = crafted()
    ranked = Reranker().rerank(QUERY, pool)
    assert all(e.score == 0.0 and not e.signals for e in pool)  # the pool is as it was
    a = next(e for e in ranked if e.id == "a")
    assert a.relevance == 0.8
    assert a.scores.keys() == {"relevance", "score"}
    assert a.signals.keys() == {s.name for s in default_signals()}


def test_dedupe_keeps_the_higher_vector_score_at_the_first_position() -> None:
    first = Evidence(
        id="m1", text="Deploys run on Tuesday", origin="memory", scores={"vector_score": 0.3}
    )
    other = Evidence(id="x", text="Something else", origin="memory")
    better = Evidence(
        id="kb1",
        text="deploys  run on tuesday",
        origin="knowledge:kb",
        scores={"vector_score": 0.7},
    )
    assert [c.id for c in dedupe([first, other, better])] == ["kb1", "x"]
    # A tie (or no dense score on either side) keeps the first.
    tie = Evidence(
        id="kb2", text="Deploys run on Tuesday", origin="knowledge:kb", scores={"vector_score": 0.3}
    )
    assert [c.id for c in dedupe([first, tie])] == ["m1"]
    plain = [Evidence(id=i, text="same", origin="memory") for i in ("p", "q")]
    assert [c.id for c in dedupe(plain)] == ["p"]
    # Any dense score beats none.
    unscored = Evidence(id="u", text="Deploys run on Tuesday", origin="memory")
    assert [c.id for c in dedupe([unscored, first])] == ["m1"]
    assert [c.id for c in dedupe([first, unscored])] == ["m1"]


def test_the_reranker_dedupes_before_scoring() -> None:
    copy = Evidence(
        id="a2",
        text="oauth2 TOKEN rotation policy",
        origin="knowledge:kb",
        scores={"relevance": 0.9, "vector_score": 0.9},
    )
    twice = [*crafted(), copy]
    ranked = Reranker().rerank(QUERY, twice)
    assert sorted(c.id for c in ranked) == ["a2", "b", "c"]
    # Diversity is computed over the deduplicated set: knowledge now holds 2 of 3.
    assert {c.id: c.signals["origin_diversity"] for c in ranked} == {"a2": 0.6, "b": 1.0, "c": 0.6}


def test_dedupe_a_zero_cosine_beats_a_negative_one() -> None:
    zero = Evidence(id="zero", text="Same text", origin="memory", scores={"vector_score": 0.0})
    negative = Evidence(
        id="neg", text="same TEXT", origin="knowledge:kb", scores={"vector_score": -0.2}
    )
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
        ({"signals": [RelevanceSignal(), RelevanceSignal()]}, "two signals share a name"),
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
    reranker = Reranker([RelevanceSignal(), QueryOverlapSignal(0.0)])
    ranked = reranker.rerank("tokens", crafted())
    assert [c.score for c in ranked] == pytest.approx([1.0, 0.625, 0.25])


def in_session(session: str | None, score: float, n: int) -> Evidence:
    """A piece of `session` (None: a knowledge chunk, of no session) with final `score`."""
    item = None
    if session is not None:
        item = Task(task_id=f"t{n}", action=USER_MESSAGE, parameters={"session_id": session})
    return Evidence(id=f"t{n}", text=f"text {n}", origin="memory", item=item,
                    scores={"score": score})  # fmt: skip


def test_spread_sessions_holds_a_sessions_second_piece_behind_other_sessions_best() -> None:
    sessions = ["a", "a", "b", None, "a", "c"]
    ranked = [
        in_session(s, score, n)
        for n, (s, score) in enumerate(zip(sessions, (0.9, 0.8, 0.5, 0.45, 0.4, 0.3), strict=True))
    ]

    def ids(out: Sequence[Evidence]) -> list[str]:
        return [e.id for e in out]

    assert ids(spread_sessions(ranked, 0.0)) == ids(ranked)
    # Fully spread: every session's best first (the chunk belongs to none), then the rest.
    assert ids(spread_sessions(ranked, 1.0)) == ["t0", "t2", "t3", "t5", "t1", "t4"]
    # Half: a's second competes at 0.8 * 0.5 = 0.4, its third at 0.4 * 0.25 = 0.1.
    assert ids(spread_sessions(ranked, 0.5)) == ["t0", "t2", "t3", "t1", "t5", "t4"]
    # Nothing is lost or doubled, and no score changes.
    assert sorted(spread_sessions(ranked, 0.5), key=lambda e: e.id) == ranked


def test_a_session_is_the_tasks_session_id_else_the_day_it_was_recorded() -> None:
    tagged = Task(task_id="m", action=USER_MESSAGE, metadata={"session_id": "s1"},
                  created_at=datetime(2024, 5, 1, 9, tzinfo=UTC))  # fmt: skip
    morning = Task(task_id="a", action=USER_MESSAGE, created_at=datetime(2024, 5, 1, 9, tzinfo=UTC))
    evening = Task(
        task_id="b", action=USER_MESSAGE, created_at=datetime(2024, 5, 1, 21, tzinfo=UTC)
    )
    piece = lambda task: Evidence(id=task.task_id, text="x", origin="memory", item=task)  # noqa: E731
    assert session_of(piece(tagged)) == "s1"
    assert session_of(piece(morning)) == session_of(piece(evening)) == date(2024, 5, 1)
    assert session_of(Evidence(id="k", text="x", origin="knowledge:kb")) is None


def test_the_reranker_spreads_sessions_when_told_and_checks_the_setting() -> None:
    pool = [in_session("a", 0.0, 0), in_session("a", 0.0, 1), in_session("b", 0.0, 2)]
    pool = [e.rescored({"relevance": r}) for e, r in zip(pool, (0.9, 0.8, 0.3), strict=True)]
    plain = RetrievalSettings(session_spread=0.0).reranker().rerank("text", pool)
    spread = RetrievalSettings(session_spread=1.0).reranker().rerank("text", pool)
    assert [e.id for e in plain] == ["t0", "t1", "t2"]
    assert [e.id for e in spread] == ["t0", "t2", "t1"]
    with pytest.raises(ConfigError, match=r"`session_spread` must be in 0..1, got 1.5"):
        Reranker(session_spread=1.5)
    with pytest.raises(ConfigError, match=r"`session_spread` must be a number in 0..1"):
        RetrievalSettings(session_spread=-0.1)

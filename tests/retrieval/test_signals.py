"""The reranker's signals (seed 002), each scored on crafted candidates."""

from __future__ import annotations

import math

import pytest

from loomctx.errors import ConfigError
from loomctx.memory.task import USER_MESSAGE, Task
from loomctx.retrieval import (
    Candidate,
    ContentLengthSignal,
    OriginDiversitySignal,
    QueryOverlapSignal,
    Signal,
    SpeakerSignal,
    VectorScoreSignal,
    default_signals,
)
from loomctx.retrieval.settings import RetrievalSettings


def cand(
    text: str = "text", origin: str = "memory", relevance: float = 0.5, n: int = 0
) -> Candidate:
    return Candidate(id=f"c{n}", text=text, origin=origin, relevance=relevance)


def test_default_signals_are_the_seeds_four_with_their_weights() -> None:
    signals = default_signals()
    assert [(s.name, s.weight) for s in signals] == [
        ("vector_score", 0.40),
        ("query_overlap", 0.35),
        ("origin_diversity", 0.15),
        ("content_length", 0.10),
        ("speaker", 0.10),
    ]
    assert all(isinstance(s, Signal) for s in signals)
    assert default_signals()[0] is not signals[0]  # fresh instances: signals keep state
    assert repr(signals[3]) == "ContentLengthSignal(weight=0.1)"


def test_vector_score_is_the_recall_relevance_relative_to_the_best() -> None:
    signal = VectorScoreSignal()
    found = [cand(relevance=r, n=i) for i, r in enumerate([0.6, 0.3, 0.0, -0.2, 0.45])]
    signal.prepare("anything", found)
    assert [signal.score(c) for c in found] == pytest.approx([1.0, 0.5, 0.0, 0.0, 0.75])
    lone = cand(relevance=0.73)
    signal.prepare("anything", [lone])
    assert signal.score(lone) == 1.0
    nothing = cand(relevance=0.0)
    signal.prepare("anything", [nothing])  # no relevance at all: no evidence
    assert signal.score(nothing) == 0.0
    signal.prepare("anything", [])
    assert signal.score(cand(relevance=1.4)) == 1.0  # clamped


def test_query_overlap_is_the_share_of_query_terms_in_the_candidate() -> None:
    signal = QueryOverlapSignal()
    signal.prepare("OAuth2 token expiry for the API", [])  # terms: oauth2 token expiri api
    assert signal.score(cand("The API issues OAuth2 tokens.")) == 0.75
    assert signal.score(cand("Nothing related here.")) == 0.0
    assert signal.score(cand("api oauth2 TOKEN expiry")) == 1.0
    signal.prepare("认证方案", [])  # 认证 证方 方案
    assert signal.score(cand("我们的认证用 OAuth2")) == pytest.approx(1 / 3)
    signal.prepare("the of and", [])  # no terms at all
    assert signal.score(cand("the of and")) == 0.0


def test_query_overlap_weighs_a_term_by_how_rare_it_is_among_the_candidates() -> None:
    """A word every candidate has ("get") says less than one only a few have ("fryer")."""
    signal = QueryOverlapSignal()
    found = [
        cand("getting the air fryer", n=0),
        cand("getting a bike", n=1),
        cand("getting a cake", n=2),
        cand("getting some sleep", n=3),
    ]
    signal.prepare("getting an air fryer", found)  # terms: get air fryer
    common = math.log(1 + 5 / 4.5)  # get: in all four
    rare = math.log(1 + 5 / 1.5)  # air, fryer: in one
    total = common + 2 * rare
    assert signal.score(found[0]) == pytest.approx(1.0)
    assert signal.score(found[1]) == pytest.approx(common / total)
    assert signal.score(found[1]) < 0.21  # unweighted: 1/3
    assert signal.score(cand("an air fryer")) == pytest.approx(2 * rare / total)


@pytest.mark.parametrize(
    ("memory", "knowledge", "memory_score", "knowledge_score"),
    [
        (8, 2, 0.3, 1.0),  # 80% > 70%
        (7, 3, 0.6, 1.0),  # 70% is not above 70%: only above 50%
        (6, 4, 0.6, 1.0),
        (5, 5, 1.0, 1.0),  # 50% is not above 50%
        (10, 0, 0.3, None),
        (1, 2, 1.0, 0.6),
    ],
)
def test_origin_diversity_penalises_an_origin_holding_most_candidates(
    memory: int, knowledge: int, memory_score: float, knowledge_score: float | None
) -> None:
    candidates = [cand(origin="memory", n=i) for i in range(memory)]
    candidates += [cand(origin="knowledge:kb", n=100 + i) for i in range(knowledge)]
    signal = OriginDiversitySignal()
    signal.prepare("q", candidates)
    scores = {c.origin: signal.score(c) for c in candidates}
    assert scores["memory"] == memory_score
    assert scores.get("knowledge:kb") == knowledge_score
    # An origin it has not seen holds no share.
    assert signal.score(cand(origin="knowledge:other")) == 1.0


@pytest.mark.parametrize(
    ("length", "score"),
    [
        (0, 0.0),
        (50, 0.25),
        (100, 0.5),
        (199, 0.995),
        (200, 1.0),
        (500, 1.0),
        (800, 1.0),
        (1000, 0.8),
        (1600, 0.5),
    ],
)
def test_content_length_prefers_200_to_800_characters(length: int, score: float) -> None:
    signal = ContentLengthSignal()
    assert signal.score(cand("x" * length)) == pytest.approx(score)
    # Surrounding whitespace is not content.
    assert signal.score(cand("\n  " + "x" * length + "  \n")) == pytest.approx(score)


def test_content_length_bounds_are_configurable() -> None:
    signal = ContentLengthSignal(0.2, low=10, high=20)
    assert signal.weight == 0.2
    assert [signal.score(cand("y" * n)) for n in (5, 10, 20, 40)] == [0.5, 1.0, 1.0, 0.5]


@pytest.mark.parametrize(("low", "high"), [(0, 800), (-5, 10), (900, 800)])
def test_content_length_bounds_must_be_ordered(low: int, high: int) -> None:
    with pytest.raises(ConfigError, match="need 0 < low <= high"):
        ContentLengthSignal(low=low, high=high)


@pytest.mark.parametrize(
    "make", [VectorScoreSignal, QueryOverlapSignal, OriginDiversitySignal, ContentLengthSignal]
)
@pytest.mark.parametrize("weight", [-0.1, True, "0.4", None])
def test_weights_must_be_numbers_of_at_least_zero(make: type, weight: object) -> None:
    with pytest.raises(ConfigError, match=r"`weight` must be a number >= 0"):
        make(weight)


def test_a_weight_of_zero_is_allowed() -> None:
    assert VectorScoreSignal(0).weight == 0.0


@pytest.mark.parametrize("weight", [math.nan, math.inf])
def test_weights_must_be_finite(weight: float) -> None:
    with pytest.raises(ConfigError, match="`weight`"):
        QueryOverlapSignal(weight)


def said(speaker: str | None, n: int) -> Candidate:
    parameters = {"content": "text"} if speaker is None else {"content": "text", "speaker": speaker}
    task = Task(task_id=f"t{n}", action=USER_MESSAGE, parameters=parameters)
    return Candidate(id=f"t{n}", text="text", origin="memory", item=task)


def test_speaker_prefers_what_the_named_speaker_said() -> None:
    signal = SpeakerSignal()
    assert (signal.name, signal.weight) == ("speaker", 0.10)
    found = [said("Caroline", 0), said("Melanie", 1), said(None, 2), cand(n=3)]
    signal.prepare("What did caroline research after the parade?", found)
    assert [signal.score(c) for c in found] == [1.0, 0.0, 1.0, 1.0]
    # Both named, or neither: no speaker is preferred.
    signal.prepare("What did Caroline and Melanie paint together?", found)
    assert [signal.score(c) for c in found] == [1.0] * 4
    signal.prepare("Where was the parade?", found)
    assert [signal.score(c) for c in found] == [1.0] * 4
    # A whole word only: "Carolines" and "Mel" name nobody here.
    signal.prepare("Did Mel meet the Carolines?", found)
    assert [signal.score(c) for c in found] == [1.0] * 4


def test_speaker_weight_is_the_settings_reranker_weight() -> None:
    assert RetrievalSettings().reranker().weights["speaker"] == 0.10
    assert RetrievalSettings(speaker_weight=0.2).reranker().weights["speaker"] == 0.2
    assert RetrievalSettings(speaker_weight=0).reranker().weights["speaker"] == 0

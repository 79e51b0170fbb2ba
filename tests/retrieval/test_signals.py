"""The reranker's signals (seed 002), each scored over crafted pools."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np
import pytest

from loomctx.errors import ConfigError
from loomctx.memory.task import ASSISTANT_MESSAGE, USER_MESSAGE, Task
from loomctx.retrieval import (
    ContentLengthSignal,
    Evidence,
    OriginDiversitySignal,
    QueryOverlapSignal,
    RelevanceSignal,
    Reranker,
    RoleSignal,
    SessionSignal,
    Signal,
    SpeakerSignal,
    TimeSignal,
    default_signals,
)
from loomctx.retrieval.settings import RetrievalSettings
from loomctx.text import terms


def cand(
    text: str = "text", origin: str = "memory", relevance: float = 0.5, n: int = 0
) -> Evidence:
    return Evidence(id=f"c{n}", text=text, origin=origin, scores={"relevance": relevance})


def scores(signal: Signal, query: str, pool: Sequence[Evidence]) -> list[float]:
    """The signal's scores of `pool`, checked to be one float per piece."""
    got = signal.score(query, pool)
    assert isinstance(got, np.ndarray)
    assert got.shape == (len(pool),)
    return [float(x) for x in got]


def test_default_signals_are_the_seeds_four_and_four_more_with_their_weights() -> None:
    signals = default_signals()
    assert [(s.name, s.weight) for s in signals] == [
        ("vector_score", 0.40),
        ("query_overlap", 0.35),
        ("origin_diversity", 0.15),
        ("content_length", 0.10),
        ("speaker", 0.10),
        ("time", 0.10),
        ("role", 0.05),
        ("session", 0.10),
    ]
    assert all(isinstance(s, Signal) for s in signals)
    assert default_signals()[0] is not signals[0]  # fresh instances
    assert repr(signals[3]) == "ContentLengthSignal(weight=0.1)"


def test_relevance_is_the_recall_relevance_relative_to_the_best() -> None:
    signal = RelevanceSignal()
    found = [cand(relevance=r, n=i) for i, r in enumerate([0.6, 0.3, 0.0, -0.2, 0.45])]
    assert scores(signal, "anything", found) == pytest.approx([1.0, 0.5, 0.0, 0.0, 0.75])
    assert scores(signal, "anything", [cand(relevance=0.73)]) == [1.0]
    # No relevance at all: no evidence.
    assert scores(signal, "anything", [cand(relevance=0.0), cand(relevance=-1.0)]) == [0.0, 0.0]
    assert scores(signal, "anything", []) == []


def test_a_signal_keeps_nothing_between_pools() -> None:
    """Each call sees only its own pool: scoring one pool, then another, then the first
    again gives the first's scores again (a signal may serve concurrent builds)."""
    first = [cand("getting the air fryer", relevance=0.8, n=0), cand("a bike", 0.4, n=1)]
    second = [cand("getting the air fryer", relevance=0.2, n=0), cand("getting air", n=1)]
    for signal in default_signals():
        before = scores(signal, "getting an air fryer", first)
        scores(signal, "the bike Caroline got", second)
        assert scores(signal, "getting an air fryer", first) == before, signal.name


def test_query_overlap_is_the_share_of_query_terms_in_the_piece() -> None:
    signal = QueryOverlapSignal()
    # Every query term held by exactly one piece of four: all weigh the same.
    pool = [
        cand("The API issues OAuth2 tokens.", n=0),  # api oauth2 token
        cand("Nothing related here.", n=1),
        cand("expiry", n=2),
        cand("words", n=3),
    ]
    query = "OAuth2 token expiry for the API"  # terms: oauth2 token expiri api
    assert scores(signal, query, pool) == pytest.approx([0.75, 0.0, 0.25, 0.0])
    assert scores(signal, query, [cand("api oauth2 TOKEN expiry")]) == [1.0]
    bilingual = [cand("我们的认证用 OAuth2", n=0), cand("方案", n=1), cand("x", n=2)]
    # 认证 证方 方案: 认证 and 方案 held once each, 证方 by none (it weighs more).
    rare, unseen = math.log(1 + 4 / 1.5), math.log(1 + 4 / 0.5)
    assert scores(signal, "认证方案", bilingual) == pytest.approx(
        [rare / (2 * rare + unseen), rare / (2 * rare + unseen), 0.0]
    )
    assert scores(signal, "the of and", [cand("the of and")]) == [0.0]  # no terms at all


def test_query_overlap_weighs_a_term_by_how_rare_it_is_in_the_pool() -> None:
    """A word every piece has ("get") says less than one only a few have ("fryer")."""
    signal = QueryOverlapSignal()
    found = [
        cand("getting the air fryer", n=0),
        cand("getting a bike", n=1),
        cand("getting a cake", n=2),
        cand("getting some sleep", n=3),
    ]
    got = scores(signal, "getting an air fryer", found)  # terms: get air fryer
    common = math.log(1 + 5 / 4.5)  # get: in all four
    rare = math.log(1 + 5 / 1.5)  # air, fryer: in one
    total = common + 2 * rare
    assert got[0] == pytest.approx(1.0)
    assert got[1:] == pytest.approx([common / total] * 3)
    assert got[1] < 0.21  # unweighted: 1/3


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
    scored = scores(OriginDiversitySignal(), "q", candidates)
    got = {c.origin: score for c, score in zip(candidates, scored, strict=True)}
    assert got["memory"] == memory_score
    assert got.get("knowledge:kb") == knowledge_score


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
    pool = [cand("x" * length), cand("\n  " + "x" * length + "  \n")]
    # Surrounding whitespace is not content.
    assert scores(ContentLengthSignal(), "q", pool) == pytest.approx([score, score])


def test_content_length_bounds_are_configurable() -> None:
    signal = ContentLengthSignal(0.2, low=10, high=20)
    assert signal.weight == 0.2
    pool = [cand("y" * n, n=n) for n in (5, 10, 20, 40)]
    assert scores(signal, "q", pool) == [0.5, 1.0, 1.0, 0.5]


@pytest.mark.parametrize(("low", "high"), [(0, 800), (-5, 10), (900, 800)])
def test_content_length_bounds_must_be_ordered(low: int, high: int) -> None:
    with pytest.raises(ConfigError, match="need 0 < low <= high"):
        ContentLengthSignal(low=low, high=high)


@pytest.mark.parametrize(
    "make", [RelevanceSignal, QueryOverlapSignal, OriginDiversitySignal, ContentLengthSignal]
)
@pytest.mark.parametrize("weight", [-0.1, True, "0.4", None])
def test_weights_must_be_numbers_of_at_least_zero(make: type, weight: object) -> None:
    with pytest.raises(ConfigError, match=r"`weight` must be a number >= 0"):
        make(weight)


def test_a_weight_of_zero_is_allowed() -> None:
    assert RelevanceSignal(0).weight == 0.0


@pytest.mark.parametrize("weight", [math.nan, math.inf])
def test_weights_must_be_finite(weight: float) -> None:
    with pytest.raises(ConfigError, match="`weight`"):
        QueryOverlapSignal(weight)


def said(speaker: str | None, n: int) -> Evidence:
    parameters = {"content": "text"} if speaker is None else {"content": "text", "speaker": speaker}
    task = Task(task_id=f"t{n}", action=USER_MESSAGE, parameters=parameters)
    return Evidence(id=f"t{n}", text="text", origin="memory", item=task)


def test_speaker_prefers_what_the_named_speaker_said() -> None:
    signal = SpeakerSignal()
    assert (signal.name, signal.weight) == ("speaker", 0.10)
    found = [said("Caroline", 0), said("Melanie", 1), said(None, 2), cand(n=3)]
    assert scores(signal, "What did caroline research after the parade?", found) == [
        1.0, 0.0, 1.0, 1.0,
    ]  # fmt: skip
    # Both named, or neither: no speaker is preferred.
    assert scores(signal, "What did Caroline and Melanie paint together?", found) == [1.0] * 4
    assert scores(signal, "Where was the parade?", found) == [1.0] * 4
    # A whole word only: "Carolines" and "Mel" name nobody here.
    assert scores(signal, "Did Mel meet the Carolines?", found) == [1.0] * 4
    # A speaker the pool does not hold is not named: Melanie is not in this pool.
    assert scores(signal, "What did Melanie say?", [found[0], found[2]]) == [1.0, 1.0]


def test_speaker_weight_is_the_settings_reranker_weight() -> None:
    assert RetrievalSettings().reranker().weights["speaker"] == 0.10
    assert RetrievalSettings(speaker_weight=0.2).reranker().weights["speaker"] == 0.2
    assert RetrievalSettings(speaker_weight=0).reranker().weights["speaker"] == 0


def near(match: float | None, n: int) -> Evidence:
    metadata = {} if match is None else {"time_match": match}
    return Evidence(id=f"t{n}", text="text", origin="memory", metadata=metadata)


def test_time_scores_how_close_a_task_is_to_the_time_the_query_names() -> None:
    signal = TimeSignal()
    assert (signal.name, signal.weight) == ("time", 0.10)
    # Memory search adds `time_match` only when the query names a time; the rest score 1.
    pool = [near(1.0, 0), near(0.25, 1), near(0.0, 2), near(None, 3), cand(n=4)]
    assert scores(signal, "what did I post 5 days ago?", pool) == [1.0, 0.25, 0.0, 1.0, 1.0]
    assert scores(signal, "what did I post?", [near(None, 0), cand(n=1)]) == [1.0, 1.0]


def spoke(action: str, n: int) -> Evidence:
    task = Task(task_id=f"t{n}", action=action, parameters={"content": "text"})
    return Evidence(id=f"t{n}", text="text", origin="memory", item=task)


def test_role_prefers_the_users_words_for_a_question_in_the_first_person() -> None:
    signal = RoleSignal()
    assert (signal.name, signal.weight) == ("role", 0.05)
    pool = [spoke(USER_MESSAGE, 0), spoke(ASSISTANT_MESSAGE, 1), cand(n=2)]
    assert scores(signal, "How many books did I buy this year?", pool) == [1.0, 0.0, 1.0]
    assert scores(signal, "What is my sister's name?", pool) == [1.0, 0.0, 1.0]
    assert scores(signal, "我上周买了什么？", pool) == [1.0, 0.0, 1.0]
    # Addressing the assistant ("you") asks about its words too; no person: about anyone's.
    assert scores(signal, "What did you suggest I cook?", pool) == [1.0] * 3
    assert scores(signal, "Where was the parade?", pool) == [1.0] * 3
    # Whole words only: "Mine" is a word, "mineral" and "Iceland" are not "mine" or "I".
    assert scores(signal, "Which mineral is found in Iceland?", pool) == [1.0] * 3


def test_time_and_role_weights_are_the_settings_reranker_weights() -> None:
    weights = RetrievalSettings(time_weight=0.3, role_weight=0).reranker().weights
    assert (weights["time"], weights["role"]) == (0.3, 0.0)
    assert RetrievalSettings.parse(["role_weight=0.2"]).role_weight == 0.2


def in_session(session: str | None, relevance: float, n: int, *, day: int = 1) -> Evidence:
    """A user turn of `session` (None: a turn recorded on day `day` with no session id)."""
    parameters = {"content": f"turn {n}"} | ({"session_id": session} if session else {})
    task = Task(
        task_id=f"t{n}",
        action=USER_MESSAGE,
        parameters=parameters,
        created_at=datetime(2024, 5, day, 12, n, tzinfo=UTC),
    )
    return Evidence(
        id=f"t{n}", text=f"turn {n}", origin="memory", item=task, scores={"relevance": relevance}
    )


def test_session_scores_the_relevance_of_its_sessions_three_best_pieces() -> None:
    signal = SessionSignal()
    assert (signal.name, signal.weight, signal.top) == ("session", 0.10, 3)
    # s1 holds the best turn alone (0.9); s2 four weaker ones, of which its best three count
    # (0.5 + 0.4 + 0.3 = 1.2); a piece of no session and no document is a session of one.
    pool = [
        in_session("s1", 0.9, 0),
        *(in_session("s2", r, i) for i, r in enumerate([0.5, 0.4, 0.3, 0.2], 1)),
        cand(relevance=0.6, n=9),
    ]
    assert scores(signal, "q", pool) == pytest.approx([0.75, 1, 1, 1, 1, 0.5])
    # Without a session id, a task's session is the day it was recorded.
    days = [
        in_session(None, 0.6, 0, day=1),
        in_session(None, 0.2, 1, day=1),
        in_session(None, 0.4, 2, day=2),
    ]
    assert scores(signal, "q", days) == pytest.approx([1, 1, 0.5])
    # `top=1`: a session counts as its best piece alone.
    assert scores(SessionSignal(top=1), "q", pool) == pytest.approx(
        [1, 5 / 9, 5 / 9, 5 / 9, 5 / 9, 6 / 9]
    )
    # Nothing relevant: no order changes.
    assert scores(signal, "q", [in_session("s1", 0.0, 0), in_session("s2", 0.0, 1)]) == [1.0, 1.0]


def chunk(document: str, relevance: float, n: int, origin: str = "knowledge:kb") -> Evidence:
    return Evidence(
        id=f"k{n}",
        text=f"chunk {n}",
        origin=origin,
        metadata={"chunk_id": f"k{n}", "document_id": document},
        scores={"relevance": relevance},
    )


def test_a_knowledge_chunks_session_is_its_document() -> None:
    """Chunks are judged as turns are, by their document, on the same scale as the memory's
    sessions: a pool holding both does not favour either for what it is."""
    pool = [
        in_session("s1", 0.6, 0),
        in_session("s1", 0.3, 1),
        chunk("guide.md", 0.5, 2),
        chunk("guide.md", 0.4, 3),
        chunk("faq.md", 0.9, 4),
        chunk("guide.md", 0.2, 5, origin="knowledge:other"),  # another base's document
    ]
    assert scores(SessionSignal(), "q", pool) == pytest.approx([1, 1, 1, 1, 1, 2 / 9])


def test_a_session_whose_turns_match_together_passes_a_stray_turn() -> None:
    """The best turn of a session that matches the query in several turns outranks a turn
    that matches a little better alone, once the session signal weighs in."""
    stray = in_session("other", 0.6, 0)
    topic = [in_session("topic", r, i) for i, r in enumerate([0.55, 0.5, 0.45], 1)]
    pool = [stray, *topic]
    plain = Reranker([RelevanceSignal()]).rerank("q", pool)
    assert plain[0].id == "t0"
    with_sessions = Reranker([RelevanceSignal(), SessionSignal(0.5)]).rerank("q", pool)
    assert with_sessions[0].id == "t1"


def test_session_top_must_be_a_positive_int() -> None:
    with pytest.raises(ConfigError, match="SessionSignal: `top`"):
        SessionSignal(top=0)
    reranker = RetrievalSettings(session_weight=0, session_top=2).reranker()
    assert reranker.weights["session"] == 0.0
    assert [s.top for s in reranker.signals if isinstance(s, SessionSignal)] == [2]
    with pytest.raises(ConfigError, match="`session_top`"):
        RetrievalSettings(session_top=0)


def _overlap_reference(query: str, pool: Sequence[Evidence]) -> list[float]:
    """Query overlap written out piece by piece: each piece's weights summed in sorted term
    order (the signal sums each distinct set of held terms once)."""
    wanted = sorted(set(terms(query)))
    n = len(pool)
    df = {t: sum(1 for e in pool if t in e.terms) for t in wanted}
    weights = {t: math.log(1 + (n + 1) / (df[t] + 0.5)) for t in wanted}
    total = sum(weights.values())
    if not total:
        return [0.0] * n
    return [sum(w for t, w in weights.items() if t in e.terms) / total for e in pool]


@pytest.mark.parametrize(
    "query",
    [
        "what new kitchen gadget did I get before the Air Fryer?",
        "Caroline adoption agency support group",
        "nothing in common here",
        "",
    ],
)
def test_query_overlap_equals_the_piece_by_piece_sum_bit_for_bit(query: str) -> None:
    texts = [
        "I got a new Instant Pot, a kitchen gadget, last week",
        "I get a new bike before the trip",
        "The Air Fryer came before the Instant Pot",
        "Caroline went to the adoption agency",
        "The support group met on Tuesday; Caroline spoke",
        "unrelated words only",
        "kitchen kitchen gadget gadget",
    ]
    pool = [cand(text, n=i) for i, text in enumerate(texts * 3)]
    got = QueryOverlapSignal().score(query, pool).tolist()
    assert got == _overlap_reference(query, pool)

"""The retrieval evaluation harness: loaders, metric arithmetic, aggregation, windows."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loomctx.errors import ConfigError
from loomctx.evaluation._vector_cache import CachedEmbedder
from loomctx.evaluation.retrieval import (
    evaluate_locomo,
    evaluate_longmemeval,
    load_locomo,
    load_longmemeval,
    ndcg_at,
    recall_at,
)
from loomctx.retrieval.settings import RetrievalSettings
from loomctx.testing.embedders import HashingEmbedder

LOCOMO_KEYS = {"r@5", "r@10", "r@20", "ndcg@10", "window@2000", "window@4000"}
LME_KEYS = {"recall_any@5", "recall_all@5", "recall_all@10", "ndcg@10"}


def _filler(i: int) -> str:
    return f"Sure thing, item {i}."


def locomo_data() -> list[dict[str, Any]]:
    """60 turns over two sessions; L1 (50 turns) holds D1:11 onwards.

    - q0 (category 1): evidence D1:3 and D1:4, both old and lexically findable (rank 1-2).
    - q1 (category 5): evidence D1:5, which shares no word with the question.
    - q2 (category 2): no evidence (skipped).
    """
    s1 = [
        {"speaker": "Alice" if i % 2 else "Bob", "dia_id": f"D1:{i}", "text": _filler(i)}
        for i in range(1, 31)
    ]
    s1[2]["text"] = "I adopt puppy Biscuit near Denver lakes."
    s1[3]["text"] = "Biscuit the puppy loves Denver."
    s1[3]["blip_caption"] = "a photo of a dog"
    s1[4]["text"] = "It was crimson."
    s2 = [
        {"speaker": "Alice" if i % 2 else "Bob", "dia_id": f"D2:{i}", "text": _filler(100 + i)}
        for i in range(1, 31)
    ]
    conv = {
        "speaker_a": "Alice",
        "speaker_b": "Bob",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": s1,
        "session_2_date_time": "2:00 pm on 9 May, 2023",
        "session_2": s2,
    }
    qa = [
        {"question": "Where did Alice adopt puppy Biscuit?", "evidence": ["D1:3; D1:4"],
         "category": 1, "answer": "Denver"},
        {"question": "What color is the zeppelin?", "evidence": ["D1:5"], "category": 5},
        {"question": "Anything?", "evidence": [], "category": 2},
    ]  # fmt: skip
    return [{"sample_id": "conv-x", "conversation": conv, "qa": qa}]


def lme_data() -> list[dict[str, Any]]:
    def session(words: str, n: int = 2) -> list[dict[str, str]]:
        return [
            {"role": "user", "content": f"{words} turn {i}"}
            if i % 2 == 0
            else {"role": "assistant", "content": f"Noted {i}."}
            for i in range(n)
        ]

    haystack = [session(f"chat about gardening {i}") for i in range(6)]
    haystack[2] = session("my saxophone recital went great")
    haystack[4] = session("the weather was mild")
    ids = [f"s{i}" for i in range(6)]
    ids[2], ids[4] = "ans_sax", "ans_weather"

    def q(qid: str, qtype: str, text: str, answers: list[str]) -> dict[str, Any]:
        return {
            "question_id": qid,
            "question_type": qtype,
            "question": text,
            "answer": "x",
            "haystack_session_ids": ids,
            "haystack_sessions": haystack,
            "answer_session_ids": answers,
        }

    return [
        # two answer sessions; only the saxophone one shares words with the question
        q("q1", "multi-session", "How was my saxophone recital?", ["ans_sax", "ans_weather"]),
        q("q2", "single-session-user", "Tell me about the saxophone recital", ["ans_sax"]),
        q("q3_abs", "single-session-user", "Which violin did I buy?", ["ans_sax"]),
    ]


def write(path: Path, data: object) -> Path:
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            json.dump(data, f)
    else:
        path.write_text(json.dumps(data), encoding="utf-8")
    return path


# --- metric arithmetic -------------------------------------------------------------------------


def test_recall_and_ndcg_arithmetic() -> None:
    ranked = [f"t{i}" for i in range(1, 21)]
    assert recall_at(ranked, ["t1"], 10) == 1.0
    assert recall_at(ranked, ["t12"], 10) == 0.0
    assert recall_at(ranked, ["t12"], 20) == 1.0
    # one question at rank 1, another at rank 12: R@10 = 0.5
    assert (recall_at(ranked, ["t1"], 10) + recall_at(ranked, ["t12"], 10)) / 2 == 0.5
    assert recall_at(ranked, ["t1", "t30"], 5) == 0.5
    assert recall_at(ranked, [], 5) == 0.0
    assert ndcg_at(ranked, ["t1"], 10) == 1.0
    assert ndcg_at(ranked, ["t2"], 10) == pytest.approx(1 / math.log2(3))
    assert ndcg_at(ranked, ["t12"], 10) == 0.0
    # two gold, found at ranks 1 and 3: (1 + 1/log2 4) / (1 + 1/log2 3)
    assert ndcg_at(ranked, ["t1", "t3"], 10) == pytest.approx(1.5 / (1 + 1 / math.log2(3)))
    assert ndcg_at(["a", "a", "b"], ["a"], 10) == 1.0  # a repeated item counts once


# --- LoCoMo ------------------------------------------------------------------------------------


def test_load_locomo(tmp_path: Path) -> None:
    (conv,) = load_locomo(write(tmp_path / "l.json", locomo_data()))
    assert conv.sample_id == "conv-x"
    assert conv.speakers == ("Alice", "Bob")
    assert len(conv.turns) == 60
    t = conv.turns[3]
    assert (t.dia_id, t.speaker, t.session) == ("D1:4", "Bob", 1)
    assert t.text == "Biscuit the puppy loves Denver. and shared a photo of a dog."
    assert t.date == "1:56 pm on 8 May, 2023"
    assert conv.questions[0].evidence == ("D1:3", "D1:4")  # "D1:3; D1:4" split
    assert conv.questions[2].evidence == ()


def test_evaluate_locomo_lexical(tmp_path: Path) -> None:
    r = evaluate_locomo(write(tmp_path / "l.json", locomo_data()), dense=False)
    assert r.keys() >= LOCOMO_KEYS
    assert r["questions"] == 2
    assert r["skipped"] == 1
    # q0 finds both evidence turns at ranks 1-2, q1 none: macro mean 0.5
    assert r["r@5"] == r["r@10"] == r["r@20"] == 0.5
    assert r["ndcg@10"] == 0.5
    # windows are micro over gold turns, in the window an agent sends: the whole 60-turn
    # conversation fits 2,000 tokens, so the window is the conversation and holds all three
    assert r["window@2000"] == r["window@4000"] == 1.0
    assert r["by_category"]["1"]["r@10"] == 1.0
    assert r["by_category"]["5"]["r@10"] == 0.0
    assert r["by_category"]["5"]["window@2000"] == 1.0
    assert set(r["by_category"]) == {"1", "5"}
    ex = r["excluding_category_5"]
    assert ex["questions"] == 1
    assert ex["r@5"] == 1.0
    assert ex["window@4000"] == 1.0
    assert r["conversations"]["conv-x"]["questions"] == 2
    assert r["conversations"]["conv-x"]["window@2000"] == 1.0
    assert r["config"]["window_recipe"]["builder"] == "Agent.preview"
    assert set(r["config"]["figures"]) == {"r@k, ndcg@10", "window@B"}
    assert "stages" not in r
    json.dumps(r)  # JSON-ready


def test_a_window_too_small_for_the_conversation_holds_what_retrieval_finds(
    tmp_path: Path,
) -> None:
    path = write(tmp_path / "l.json", locomo_data())
    r = evaluate_locomo(path, dense=False, budgets=(600, 120))
    # 600 tokens: history holds the newest turns only; retrieval brings q0's two old turns
    # into the tail, and q1's (which search cannot rank) stays out
    assert r["window@600"] == pytest.approx(2 / 3)
    assert r["by_category"]["1"]["window@600"] == 1.0
    assert r["by_category"]["5"]["window@600"] == 0.0
    assert r["window@120"] < r["window@600"]  # too small for both
    assert "window@2000" not in r


def test_window_counts_recent_history(tmp_path: Path) -> None:
    data = locomo_data()
    # q1's evidence becomes the most recent turn: in the window through history
    data[0]["qa"][1]["evidence"] = ["D2:30"]
    r = evaluate_locomo(write(tmp_path / "l.json", data), dense=False, budgets=(300,))
    assert r["r@10"] == 1.0  # the newest turn: the rewritten query (recent words) finds it
    assert r["by_category"]["5"]["window@300"] == 1.0


def test_evaluate_locomo_limit_and_key_options(tmp_path: Path) -> None:
    path = write(tmp_path / "l.json", locomo_data())
    r = evaluate_locomo(path, dense=False, limit=1)
    assert r["questions"] == 1
    assert r["r@5"] == 1.0
    # the date in the searchable text: still found
    r = evaluate_locomo(path, dense=False, limit=1, date_in_text=True)
    assert r["r@20"] == 1.0
    assert r["config"]["date_in_text"] is True
    with pytest.raises(ConfigError, match="limit"):
        evaluate_locomo(path, dense=False, limit=0)


def test_evaluate_locomo_one_conversation_apart(tmp_path: Path) -> None:
    data = locomo_data()
    other = json.loads(json.dumps(data[0]))
    other["sample_id"] = "conv-y"
    other["qa"] = other["qa"][:1]
    path = write(tmp_path / "l.json", [*data, other])
    both = evaluate_locomo(path, dense=False, budgets=(600,))
    assert set(both["conversations"]) == {"conv-x", "conv-y"}
    apart = evaluate_locomo(path, dense=False, budgets=(600,), only=["conv-y"])
    assert set(apart["conversations"]) == {"conv-y"}
    assert apart["questions"] == 1
    assert apart["window@600"] == both["conversations"]["conv-y"]["window@600"]
    with pytest.raises(ConfigError, match=r"no conversation 'conv-z'.*'conv-x', 'conv-y'"):
        evaluate_locomo(path, dense=False, only=["conv-z"])


def test_settings_an_agents_window_does_not_run_with_are_ranking_figures_only(
    tmp_path: Path,
) -> None:
    path = write(tmp_path / "l.json", locomo_data())
    sourced = RetrievalSettings(overlap_weight=0.25)  # read by the retrieval source
    with pytest.raises(ConfigError, match=r"an `Agent`'s windows.*--budgets ''"):
        evaluate_locomo(path, dense=False, settings=sourced)
    ranked = evaluate_locomo(path, dense=False, settings=sourced, budgets=())
    assert ranked["config"]["settings"] == "overlap_weight=0.25"
    assert not [k for k in ranked if k.startswith("window@")]
    # a memory search setting reaches the agent's window: windows are measured with it
    memory_side = evaluate_locomo(
        path, dense=False, settings=RetrievalSettings(neighbour_weight=0.0), budgets=(600,)
    )
    assert "window@600" in memory_side


def test_evaluate_locomo_stages_with_embedder(tmp_path: Path) -> None:
    path = write(tmp_path / "l.json", locomo_data())
    r = evaluate_locomo(path, embedder=HashingEmbedder(dim=256), stages=True)
    assert set(r["stages"]) == {"lexical", "dense", "fused", "+rewriter", "+reranker"}
    for stage in r["stages"].values():
        assert {"r@5", "r@10", "r@20", "ndcg@10", "by_category", "excluding_category_5"} <= set(
            stage
        )
        assert stage["by_category"]["1"]["r@20"] == 1.0
    # vector search ranks every turn, so only lexical search misses q1's evidence for sure
    assert r["stages"]["lexical"]["by_category"]["5"]["r@20"] == 0.0
    assert r["r@10"] == r["stages"]["+reranker"]["r@10"]  # the whole pipeline is the result
    assert r["config"]["embedder"] == "hashing:v1:256"
    assert r["config"]["ranking"] == "+reranker"


def test_json_gz_loads_like_json(tmp_path: Path) -> None:
    a = evaluate_locomo(write(tmp_path / "l.json", locomo_data()), dense=False)
    b = evaluate_locomo(write(tmp_path / "l.json.gz", locomo_data()), dense=False)
    assert {k: a[k] for k in LOCOMO_KEYS} == {k: b[k] for k in LOCOMO_KEYS}
    c = evaluate_longmemeval(write(tmp_path / "m.json.gz", lme_data()), dense=False)
    assert c["questions"] == 2


# --- LongMemEval -------------------------------------------------------------------------------


def test_load_longmemeval(tmp_path: Path) -> None:
    qs = load_longmemeval(write(tmp_path / "m.json", lme_data()))
    assert [q.question_id for q in qs] == ["q1", "q2", "q3_abs"]
    assert [q.abstention for q in qs] == [False, False, True]
    assert qs[0].sessions[2][0] == ("user", "my saxophone recital went great turn 0")
    assert qs[0].answer_session_ids == ("ans_sax", "ans_weather")


def test_evaluate_longmemeval_lexical(tmp_path: Path) -> None:
    r = evaluate_longmemeval(write(tmp_path / "m.json", lme_data()), dense=False)
    assert r.keys() >= LME_KEYS
    assert r["questions"] == 2
    assert r["skipped"] == 1
    assert r["recall_any@5"] == 1.0
    # q1's weather session shares no word with the question; it ranks 6th of 6 (recalled by
    # the rewritten query only): not in the top 5, in the top 10
    assert r["recall_all@5"] == 0.5
    assert r["recall_all@10"] == 1.0
    # q1: gold at ranks 1 and 6 -> (1 + 1/log2 7) / (1 + 1/log2 3); q2: 1
    q1 = (1 + 1 / math.log2(7)) / (1 + 1 / math.log2(3))
    assert r["ndcg@10"] == pytest.approx((q1 + 1) / 2)
    assert r["by_question_type"]["multi-session"]["recall_all@5"] == 0.0
    assert r["by_question_type"]["single-session-user"] == {
        "questions": 1, "recall_any@5": 1.0, "recall_all@5": 1.0, "recall_all@10": 1.0,
        "ndcg@10": 1.0, "turns@10": None, "turn_questions": 0,
    }  # fmt: skip
    json.dumps(r)


def test_turns_at_10_is_the_share_of_marked_turns_among_the_first_ten(tmp_path: Path) -> None:
    data = json.loads(json.dumps(lme_data()))  # each question its own copy of the sessions
    # q1 marks the saxophone and the weather turns (ranked 1st and 6th of the 7 turns its
    # search finds) and a reply no search finds; q2 marks the saxophone turn only.
    for s, t in ((2, 0), (4, 0), (4, 1)):
        data[0]["haystack_sessions"][s][t]["has_answer"] = True
    data[1]["haystack_sessions"][2][0]["has_answer"] = True
    path = write(tmp_path / "m.json", data)
    assert load_longmemeval(path)[0].answer_turns == ((2, 0), (4, 0), (4, 1))
    r = evaluate_longmemeval(path, dense=False)
    assert r["by_question_type"]["multi-session"]["turns@10"] == pytest.approx(2 / 3)
    assert r["by_question_type"]["single-session-user"]["turns@10"] == 1.0
    assert (r["turns@10"], r["turn_questions"]) == (pytest.approx(5 / 6), 2)
    # The marks are read for the figures only: the rankings are those of the unmarked file.
    plain = evaluate_longmemeval(write(tmp_path / "plain.json", lme_data()), dense=False)
    assert r["rankings"] == plain["rankings"]


def test_evaluate_longmemeval_stages_and_limit(tmp_path: Path) -> None:
    path = write(tmp_path / "m.json", lme_data())
    r = evaluate_longmemeval(path, embedder=HashingEmbedder(dim=256), stages=True, limit=1)
    assert r["questions"] == 1
    assert set(r["stages"]) == {"lexical", "dense", "fused", "+rewriter", "+reranker"}
    assert r["stages"]["lexical"]["recall_any@5"] == 1.0
    assert r["recall_any@5"] == r["stages"]["+reranker"]["recall_any@5"]


# --- malformed input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d[0].pop("qa"), "has no `qa`"),
        (lambda d: d[0].pop("conversation"), "has no `conversation`"),
        (lambda d: d[0]["conversation"]["session_1"][0].pop("dia_id"), "turn 0 has no `dia_id`"),
        (lambda d: d[0]["qa"][0].pop("evidence"), "qa 0 has no `evidence`"),
        (lambda d: d[0]["qa"][0].update(category="one"), "`category` must be a int"),
    ],
)
def test_malformed_locomo(tmp_path: Path, mutate: Any, message: str) -> None:
    data = locomo_data()
    mutate(data)
    path = write(tmp_path / "bad.json", data)
    with pytest.raises(ConfigError, match=message) as info:
        evaluate_locomo(path, dense=False)
    assert "bad.json" in str(info.value)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d[0].pop("haystack_sessions"), "has no `haystack_sessions`"),
        (lambda d: d[1].pop("answer_session_ids"), "'q2' has no `answer_session_ids`"),
        (lambda d: d[0].update(haystack_session_ids=["a"]), "6 `haystack_sessions` but 1"),
        (lambda d: d[0]["haystack_sessions"][0][0].pop("role"), "turn 0 has no `role`"),
    ],
)
def test_malformed_longmemeval(tmp_path: Path, mutate: Any, message: str) -> None:
    data = lme_data()
    mutate(data)
    path = write(tmp_path / "bad.json", data)
    with pytest.raises(ConfigError, match=message) as info:
        evaluate_longmemeval(path, dense=False)
    assert "bad.json" in str(info.value)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_locomo(tmp_path / "missing.json")
    (tmp_path / "junk.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"junk\.json.*not readable JSON"):
        load_locomo(tmp_path / "junk.json")
    (tmp_path / "junk.json.gz").write_bytes(b"not gzip")
    with pytest.raises(ConfigError, match="not readable JSON"):
        load_longmemeval(tmp_path / "junk.json.gz")
    write(tmp_path / "dict.json", {"a": 1})
    with pytest.raises(ConfigError, match="non-empty list of conversations"):
        load_locomo(tmp_path / "dict.json")
    with pytest.raises(ConfigError, match="non-empty list of questions"):
        load_longmemeval(tmp_path / "dict.json")


# --- the vector cache --------------------------------------------------------------------------


def test_cached_embedder_persists(tmp_path: Path) -> None:
    inner = HashingEmbedder(dim=32)
    first = CachedEmbedder(inner, tmp_path)
    texts = ["alpha beta", "gamma", "alpha beta"]
    a = first.embed(texts)
    assert first.misses == 2
    assert first.hits == 1
    first.save()
    second = CachedEmbedder(inner, tmp_path)
    b = second.embed(texts)
    q = second.embed(["alpha beta"], kind="query")  # queries are keyed apart from documents
    assert second.hits == 3
    assert second.misses == 1
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(q[0], inner.embed(["alpha beta"], kind="query")[0])
    assert second.name == inner.name
    assert second.dim == 32
    with pytest.raises(ConfigError):
        second.embed("one string")


# --- no leak of the gold session ids ---------------------------------------------------------


def lme_with_answer_ids() -> list[dict[str, Any]]:
    """Questions shaped like LongMemEval_S's, whose gold session ids start with `answer_` (as
    the dataset's do) and whose questions say "answer" and "session": were the ids ever
    indexed or ranked on, these questions would find the gold sessions by them."""
    topics = ["cooking a risotto", "my answer to the riddle", "the gym session schedule",
              "a trip to Lisbon", "answering emails faster", "repotting the fern"]  # fmt: skip
    haystack = [
        [{"role": "user", "content": f"Let's talk about {topic}, part {i}."},
         {"role": "assistant", "content": f"Happy to help with {topic}."}]
        for i, topic in enumerate(topics)
    ]  # fmt: skip
    ids = ["sharegpt_yywfJrx_0", "answer_4be1b6b4_1", "5e1b8a0c_2", "answer_4be1b6b4_2",
           "ultrachat_11200", "e3c1e5b7_1"]  # fmt: skip

    def q(qid: str, qtype: str, text: str, answers: list[str]) -> dict[str, Any]:
        return {"question_id": qid, "question_type": qtype, "question": text, "answer": "x",
                "haystack_session_ids": ids, "haystack_sessions": haystack,
                "answer_session_ids": answers}  # fmt: skip

    return [
        q("a1", "multi-session", "What was my answer, and which session?", [ids[1], ids[3]]),
        q("a2", "single-session-user", "Which city did I plan a trip to?", [ids[3]]),
        q("a3", "single-session-user", "answer_4be1b6b4 session answer", [ids[5]]),
    ]


@pytest.mark.parametrize("dense", [False, True], ids=["lexical", "hashing-dense"])
def test_the_harness_does_not_see_the_answer_prefix_of_gold_session_ids(
    tmp_path: Path, dense: bool
) -> None:
    data = lme_with_answer_ids()
    handles = {sid: f"h{i}" for i, sid in enumerate(data[0]["haystack_session_ids"])}
    neutral = json.loads(json.dumps(data))
    for question in neutral:
        question["haystack_session_ids"] = [handles[s] for s in question["haystack_session_ids"]]
        question["answer_session_ids"] = [handles[s] for s in question["answer_session_ids"]]
    embedder = HashingEmbedder(dim=256) if dense else None
    options: dict[str, Any] = {"dense": dense, "embedder": embedder, "stages": dense}
    real = evaluate_longmemeval(write(tmp_path / "real.json", data), **options)
    blind = evaluate_longmemeval(write(tmp_path / "blind.json", neutral), **options)
    assert set(real["rankings"]) == {"a1", "a2", "a3"}
    for qid, ranked in real["rankings"].items():
        assert len(ranked) == len(handles)
        assert [handles[s] for s in ranked] == blind["rankings"][qid]
    for key in ("by_question_type", "stages", *LME_KEYS):
        assert real.get(key) == blind.get(key)

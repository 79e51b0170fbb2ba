"""The scoring code of `loomctx bench perf` on hand-made windows, and the workload it judges."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loomctx.errors import ConfigError
from loomctx.evaluation.perf._workload import SYSTEM, TOOLS, build_workload, load_source
from loomctx.evaluation.perf.score import DocumentProbe, percentile, score_window, summarize
from loomctx.messages import from_openai, to_openai
from loomctx.tokens import TiktokenCounter
from tests.evaluation.perf_data import write_perf_locomo

COUNTER = TiktokenCounter()
DOCS = [
    "The refund window is thirty days from delivery. Items must be unused and boxed.",
    "Parcels to Norway travel by ferry from Hirtshals twice a week in the winter season.",
]
QUERY = "How long is the refund window?"


def _call(call_id: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": "search_notes", "arguments": '{"query": "refund"}'}}
        ],
    }  # fmt: skip


def _result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "30 days"}


def _score(messages: list[dict[str, Any]], *, available: int = 7000, tools: bool = True) -> Any:
    return score_window(
        {"messages": messages, "tools": list(TOOLS) if tools else []},
        counter=COUNTER,
        available=available,
        system=SYSTEM,
        query=QUERY,
        documents=DocumentProbe(DOCS),
    )


def _good() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Earlier question"},
        _call("c1"),
        _result("c1"),
        {"role": "assistant", "content": "It is 30 days."},
        {"role": "user", "content": f"Reference: {DOCS[0]}\n\n{QUERY}"},
    ]


def test_a_good_window_is_counted_with_its_tools_and_has_no_violation() -> None:
    score = _score(_good())
    expected = COUNTER.count_messages(from_openai(_good()), tools=list(TOOLS))
    assert score.tokens == expected
    assert score.tokens > _score(_good(), tools=False).tokens  # tool schemas are counted
    assert (score.over_budget, score.split_tool_units, score.tool_units) == (False, 0, 1)
    assert score.system_present
    assert score.query_present
    assert score.documents == 1


def test_a_call_without_its_result_and_a_result_without_its_call_are_each_split() -> None:
    no_result = [m for m in _good() if m.get("role") != "tool"]
    assert _score(no_result).split_tool_units == 1
    orphan = [m for m in _good() if not m.get("tool_calls")]
    assert _score(orphan).split_tool_units == 1
    # A call whose result comes later, after another message, is split too (and so is the
    # result, which no longer follows its call).
    late = [*_good()[:3], {"role": "user", "content": "meanwhile"}, _result("c1")]
    assert _score(late).split_tool_units == 2
    # A window ending on a call with no result.
    assert _score([*_good(), _call("c9")]).split_tool_units == 1


def test_an_over_budget_window_is_detected() -> None:
    tokens = _score(_good()).tokens
    assert _score(_good(), available=tokens).over_budget is False
    assert _score(_good(), available=tokens - 1).over_budget is True


def test_a_missing_or_different_system_prompt_is_detected() -> None:
    assert not _score(_good()[1:]).system_present
    other = [{"role": "system", "content": "You are a pirate."}, *_good()[1:]]
    assert not _score(other).system_present
    late = [*_good()[1:], {"role": "system", "content": SYSTEM}]
    assert not _score(late).system_present


def test_the_query_must_be_in_the_last_user_message() -> None:
    assert not _score(_good()[:-1]).query_present
    moved = [_good()[0], {"role": "user", "content": QUERY}, *_good()[2:-1],
             {"role": "user", "content": "something else"}]  # fmt: skip
    assert not _score(moved).query_present


def test_documents_are_found_by_whole_sentences() -> None:
    probe = DocumentProbe(DOCS)
    assert probe.count(DOCS[1][:60]) == 0  # a fragment shorter than a sentence
    assert probe.count("Parcels to Norway travel by ferry from Hirtshals twice a week in") == 0
    assert probe.count(DOCS[1]) == 1
    assert probe.count(DOCS[0] + DOCS[1]) == 2


def test_a_malformed_window_is_refused_with_a_reason() -> None:
    with pytest.raises(ConfigError, match="`messages` must be a list"):
        _score("nope")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="not OpenAI chat messages"):
        _score([{"role": "wizard", "content": "x"}])
    with pytest.raises(ConfigError, match="`tools` must be a list"):
        score_window({"messages": [], "tools": "x"}, counter=COUNTER, available=1, system="",
                     query="", documents=DocumentProbe([]))  # fmt: skip


def test_percentiles_and_the_summary_count_every_window() -> None:
    assert percentile([], 50) == 0.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 95) == 95.0
    good, over = _score(_good()), _score(_good(), available=10)
    summary = summarize([1.0, 2.0, 3.0], [good, over, good], available=7000)
    assert summary["windows"] == 3
    assert summary["builds"] == 3
    assert summary["over_budget"] == 1
    assert summary["split_tool_units"] == 0
    assert summary["system_present"] == summary["query_present"] == 3
    assert summary["p50_ms"] == 2.0
    assert summary["p95_ms"] == 3.0
    assert summary["utilization"] == round(good.tokens / 7000, 4)
    assert summarize([], [], available=7000)["mean_tokens"] == 0.0


def test_the_workload_cycles_turns_with_a_counter_and_keeps_tool_units_whole(
    tmp_path: Path,
) -> None:
    source = load_source(write_perf_locomo(tmp_path / "l.json"), documents=50, questions=4)
    assert len(source.documents) == 50
    assert len(source.questions) == 4
    n = len(source.turns) * 2 + 1  # past the end of the file, odd
    workload = build_workload(source, n, calls=3)
    texts = [m.content for m in workload.history if m.role in ("user", "assistant") and m.content]
    assert len(texts) == n
    assert len(set(texts)) == n
    assert texts[len(source.turns)].endswith("(#2)")
    assert workload.tool_units == n // 10
    assert sum(1 for m in workload.history if m.tool_calls) == workload.tool_units
    assert workload.available == 7000
    assert len(workload.continuation) == 3
    payload = workload.to_json(builds=5, time_limit=1.0)
    assert payload["history"] == to_openai(workload.history)
    assert payload["tools"] == list(TOOLS)
    assert payload["system"] == SYSTEM


def test_workload_inputs_are_checked(tmp_path: Path) -> None:
    path = write_perf_locomo(tmp_path / "l.json", sessions=2)
    with pytest.raises(ConfigError, match="fewer than the 200"):
        load_source(path)
    with pytest.raises(ConfigError, match="must be >= 1"):
        load_source(path, documents=0)
    source = load_source(path, documents=4)
    with pytest.raises(ConfigError, match="at least 2 turns"):
        build_workload(source, 1)
    with pytest.raises(ConfigError, match="`reserve`"):
        build_workload(source, 10, window=1000, reserve=1000)

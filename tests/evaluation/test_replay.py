"""`replay_log`: a recorded log of chat requests grouped into conversations and replayed
through the window recipe, offline, each call billed as `loomctx bench cost` bills it."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from loomctx.errors import ConfigError
from loomctx.evaluation.cost import HEADLINE
from loomctx.evaluation.replay import (
    NoRequestError,
    group_conversations,
    model_window,
    read_log,
    replay_log,
)
from tests.evaluation.replay_data import BAD_LINES, WINDOW, exchanges, requests, write_log

TURNS = 24


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_log(tmp_path_factory.mktemp("replay") / "log.jsonl", turns=TURNS)


@pytest.fixture(scope="module")
def result(log: Path) -> dict[str, object]:
    return replay_log(log, window=WINDOW)


def test_a_client_resending_its_history_in_either_shape_is_one_conversation(log: Path) -> None:
    logged, _ = read_log(log)
    assert len(logged) == TURNS
    (conversation,) = group_conversations(logged)
    assert [r.line for r in conversation] == [r.line for r in logged]
    # The three shapes convert to the same conversation: each extends the one before.
    assert [len(r.conversation) for r in conversation] == [2 * k + 1 for k in range(TURNS)]


def test_interleaved_conversations_are_told_apart(tmp_path: Path) -> None:
    pairs = exchanges(8)
    one = requests(pairs[:4])
    other = requests(pairs[4:])  # another conversation: it starts from another first turn
    path = tmp_path / "two.jsonl"
    path.write_text("\n".join(x for pair in zip(one, other, strict=True) for x in pair) + "\n")
    groups = group_conversations(read_log(path)[0])
    assert [[r.line for r in g] for g in groups] == [[1, 3, 5, 7], [2, 4, 6, 8]]


def test_a_retried_request_stays_in_its_conversation_and_adds_nothing(tmp_path: Path) -> None:
    lines = requests(exchanges(3))
    path = tmp_path / "retry.jsonl"
    system_only = json.dumps({"model": "gpt-4o", "messages": [{"role": "system", "content": "x"}]})
    path.write_text("\n".join([*lines[:2], lines[1], system_only, lines[2]]) + "\n")
    result = replay_log(path)
    assert result["skipped"] == [
        {"line": 4, "reason": "only system messages: no conversation to replay"}
    ]
    assert [(c["conversation"], c["line"]) for c in result["calls"]] == [
        (0, 1),
        (0, 2),
        (0, 3),
        (0, 5),
    ]
    retry, again = result["calls"][1:3]
    # The same prompt again, all of it cached; through Loom the same window (the turn once).
    assert again["client"]["sent"] == again["client"]["cached"] == retry["client"]["sent"]
    assert again["loom"]["sent"] == retry["loom"]["sent"]


def test_bad_lines_are_reported_by_number_and_the_rest_replayed(result: dict) -> None:
    skipped = result["skipped"]
    assert [s["line"] for s in skipped] == sorted(BAD_LINES)
    reasons = {s["line"]: s["reason"] for s in skipped}
    assert reasons[4].startswith("not JSON")
    assert "no `messages` list" in reasons[7]
    assert "expected a JSON object, got list" in reasons[9]
    assert len(result["calls"]) == TURNS
    assert not set(BAD_LINES) & {c["line"] for c in result["calls"]}


def test_the_totals_are_the_calls_summed_and_billed_at_the_cost_bench_prices(
    result: dict,
) -> None:
    calls = result["calls"]
    for side in ("client", "loom"):
        total = result["total"][side]
        assert total["calls"] == len(calls)
        assert total["sent"] == sum(c[side]["sent"] for c in calls)
        assert total["cached"] == sum(c[side]["cached"] for c in calls)
        assert total["over_window"] == sum(c[side]["over_window"] for c in calls)
        for provider, pricing in HEADLINE.items():
            for c in calls:
                # Billed between all of it read and all of it written (`loomctx.context.billing`).
                sent = c[side]["sent"]
                billed = c[side][f"billed_{provider}"]
                assert pricing.read * sent - 0.1 <= billed <= max(pricing.write, 1.0) * sent + 0.1
            billed = sum(c[side][f"billed_{provider}"] for c in calls)
            assert total[f"billed_{provider}"] == pytest.approx(billed, abs=0.1)
    saved = result["total"]["saved"]
    client, loom = result["total"]["client"], result["total"]["loom"]
    assert saved["sent"] == round(1 - loom["sent"] / client["sent"], 4)
    json.dumps(result)


def test_the_client_resending_everything_repeats_its_previous_prompt(result: dict) -> None:
    calls = result["calls"]
    assert calls[0]["client"]["cached"] == 0
    # Each request is the previous one plus the reply and a turn: its prefix is cached.
    assert all(b["client"]["cached"] == a["client"]["sent"] for a, b in itertools.pairwise(calls))


def test_once_history_exceeds_the_window_loom_sends_less_and_never_goes_over(
    result: dict,
) -> None:
    calls = result["calls"]
    # While the conversation fits, Loom's window is the whole conversation.
    assert calls[0]["loom"]["sent"] == calls[0]["client"]["sent"]
    over = [c for c in calls if c["client"]["sent"] > WINDOW]
    assert over, "the log must outgrow the window"
    assert result["total"]["client"]["over_window"] == len(over)
    assert all(c["loom"]["sent"] < c["client"]["sent"] for c in over)
    assert all(c["loom"]["sent"] <= WINDOW for c in calls)
    assert result["total"]["loom"]["over_window"] == 0
    assert result["total"]["loom"]["sent"] < result["total"]["client"]["sent"]


def test_a_tool_round_trip_in_either_shape_is_replayed_with_its_unit(tmp_path: Path) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}
    tool = {"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}}
    openai = {
        "model": "gpt-4o",
        "tools": [tool],
        "messages": [
            {"role": "user", "content": "What is in the box?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "a cat"},
        ],
    }
    anthropic = {
        "model": "claude-sonnet-4",
        "tools": [{"name": "look", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "What is in the box?"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "c1", "name": "look", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "a cat"}],
            },
            {"role": "assistant", "content": "A cat."},
            {"role": "user", "content": "Thanks"},
        ],
    }
    path = tmp_path / "tools.jsonl"
    path.write_text(json.dumps({"body": openai}) + "\n" + json.dumps(anthropic) + "\n")
    result = replay_log(path)
    assert result["skipped"] == []
    assert [c["conversation"] for c in result["calls"]] == [0, 0]
    assert [c["window"] for c in result["calls"]] == [128_000, 200_000]
    first = result["calls"][0]
    assert first["loom"]["sent"] == first["client"]["sent"]  # the tool and its unit, whole


def test_a_log_with_no_request_is_refused_naming_its_lines(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"model": "gpt-4o"}\n\nnot json\n"\xff"\n')
    with pytest.raises(
        NoRequestError, match=r"line 1: no `messages`.*line 3: not JSON.*line 4: not UTF-8"
    ):
        replay_log(path)
    with pytest.raises(ConfigError, match="cannot read the log"):
        replay_log(tmp_path / "missing.jsonl")


def test_a_window_or_reserve_out_of_range_is_refused(log: Path) -> None:
    with pytest.raises(ConfigError, match="`window` must be at least 256 tokens, got 100"):
        replay_log(log, window=100)
    with pytest.raises(ConfigError, match=r"`output_reserve` must be a share .* got 1.5"):
        replay_log(log, output_reserve=1.5)


def test_windows_of_known_models() -> None:
    assert model_window("gpt-4o-mini-2024-07-18") == 128_000
    assert model_window("gpt-4.1-mini") == 1_047_576
    assert model_window("claude-3-5-sonnet-latest") == 200_000
    assert model_window("my-llama") == 128_000


def test_a_responses_tool_round_trip_is_replayed_with_its_unit(tmp_path: Path) -> None:
    responses = {
        "model": "gpt-4.1",
        "instructions": "Look before you answer.",
        "tools": [
            {"type": "function", "name": "look", "parameters": {"type": "object"}},
            {"type": "web_search"},  # built in: no schema the client sends
        ],
        "input": [
            {"role": "user", "content": "What is in the box?"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "call_id": "c1", "name": "look", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "a cat"},
        ],
    }
    chained = {"model": "gpt-4.1", "previous_response_id": "resp_1", "input": "And now?"}
    path = tmp_path / "responses.jsonl"
    path.write_text(json.dumps({"body": responses}) + "\n" + json.dumps(chained) + "\n")
    logged, skipped = read_log(path)
    [request] = logged
    assert request.system == "Look before you answer."
    assert [m["role"] for m in request.conversation] == ["user", "assistant", "tool"]
    assert request.conversation[1]["tool_calls"][0]["function"]["name"] == "look"
    assert request.tools == (
        {"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}},
    )
    [chain] = skipped
    assert chain.line == 2
    assert "`previous_response_id`" in chain.reason
    result = replay_log(path)
    first = result["calls"][0]
    assert first["loom"]["sent"] == first["client"]["sent"]  # the tool and its unit, whole

"""One malformed task cannot take down what renders tasks: `to_dict`, `task_messages`,
`task_line` and `task_text` are total, and `L1RecentSource` keeps showing the good tasks."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from loomctx import (
    ConfigError,
    LoomMemory,
    MemoryTiers,
    Task,
    TaskStatus,
    TiktokenCounter,
    to_anthropic,
    to_openai,
)
from loomctx.context import BuildContext, TokenBudget
from loomctx.context.sources import L1RecentSource
from loomctx.memory.task import USER_MESSAGE, task_line, task_messages, task_text
from loomctx.messages import MAX_ARGUMENT_DEPTH, split_units
from loomctx.stores.sqlite import SQLiteStore

CTX = BuildContext(counter=TiktokenCounter())
WIDE = TokenBudget(tokens=1000, ceiling=100_000)


def _deep(depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for _ in range(depth - 1):
        out = {"a": out}
    return out


def _cycle() -> dict[str, Any]:
    loop: dict[str, Any] = {"name": "loop"}
    loop["self"] = loop
    loop["again"] = [loop, loop]
    return loop


class _BrokenMapping(dict[str, Any]):
    def items(self) -> Any:
        raise RuntimeError("cannot iterate")


def _wide() -> list[Any]:
    """A list that shares itself: 2**20 leaves, 21 levels deep."""
    out: list[Any] = [1]
    for _ in range(20):
        out = [out, out]
    return out


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text")


BAD_PARAMETERS: dict[str, Any] = {
    "a string": "{'n': nan}",  # how parameters holding NaN used to be stored
    "NaN and Infinity": {"n": math.nan, "lo": -math.inf, "hi": [math.inf]},
    "odd types": {"set": {1, 2}, "bytes": b"\xff", "obj": _Unprintable(), 3: None},
    "surrogates": {"text\udc80": "caf\udce9", "pair": "\ud83d\ude00"},
    "100k deep": _deep(100_000),
    "a cycle": _cycle(),
    "a huge int": {"n": 1 << 20_000},
    "a mapping that fails": {"m": _BrokenMapping(a=1)},
    "None": None,
}


def _valid(text: str) -> None:
    text.encode("utf-8")  # raises on a surrogate


@pytest.mark.parametrize("action", ["lookup", USER_MESSAGE])
@pytest.mark.parametrize("parameters", BAD_PARAMETERS.values(), ids=BAD_PARAMETERS.keys())
def test_any_task_renders_to_valid_messages_and_text(parameters: Any, action: str) -> None:
    task = Task(
        action=action,
        parameters=parameters,
        status=TaskStatus.FAILED,
        error="bad\ud800",
        metadata={"tool_call_id": "c\udc80"},
    )
    messages = task_messages(task)
    split_units(list(messages))
    json.dumps(to_openai(messages), allow_nan=False, ensure_ascii=False).encode("utf-8")
    json.dumps(to_anthropic(messages)[1], allow_nan=False, ensure_ascii=False).encode("utf-8")
    _valid(task_line(task))
    _valid(task_text(task))
    stored = json.dumps(task.to_dict(), allow_nan=False, ensure_ascii=False)
    again = Task.from_dict(json.loads(stored))
    assert task_messages(again) == task_messages(Task.from_dict(task.to_dict()))


def test_values_json_cannot_carry_are_replaced_where_they_are() -> None:
    """Before, one NaN turned the whole of `parameters` into a string in the store."""
    task = Task(action="f", parameters={"n": math.nan, "k": 1, "s": "x\udc80", "l": [math.inf]})
    assert task.to_dict()["parameters"] == {"n": "NaN", "k": 1, "s": "x\ufffd", "l": ["Infinity"]}
    (call,) = task_messages(task)[0].tool_calls
    assert call.arguments == {"n": "NaN", "k": 1, "s": "x\ufffd", "l": ["Infinity"]}


def test_a_value_sharing_itself_is_cut_not_expanded_forever() -> None:
    (call,) = task_messages(Task(action="f", parameters={"wide": _wide()}))[0].tool_calls
    text = call.arguments_json()
    assert text.count("1") <= 100_000 < 2**20
    assert "[cut" in text


def test_results_are_rendered_the_same_way() -> None:
    task = Task(action="f", status=TaskStatus.COMPLETED, result={"n": math.nan, "s": "\udc80"})
    assert task_text(task) == 'f({}) -> {"n": "NaN", "s": "\ufffd"}'


def test_deep_arguments_are_cut_at_the_limit() -> None:
    (call,) = task_messages(Task(action="f", parameters=_deep(100_000)))[0].tool_calls
    depth, level = 1, call.arguments
    while isinstance(level.get("a"), dict):
        depth, level = depth + 1, level["a"]
    assert depth == MAX_ARGUMENT_DEPTH
    assert level["a"].startswith("[cut")


def test_stored_tasks_from_before_are_repaired_on_load() -> None:
    data = Task(action="f", parameters={"q": 1}).to_dict()
    legacy = {**data, "parameters": "{'n': nan}", "metadata": "{'x': nan}"}
    task = Task.from_dict(legacy)
    assert task.parameters == {"value": "{'n': nan}"}
    assert task.metadata == {"value": "{'x': nan}"}
    assert task_messages(task)[0].tool_calls[0].arguments == {"value": "{'n': nan}"}


def test_metadata_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError, match="`metadata` must be a mapping, got str"):
        Task(action="f", metadata="x")  # type: ignore[arg-type]


async def test_a_bad_stored_task_does_not_take_the_recent_history_down(tmp_path: Path) -> None:
    """The issue's scenario: a task whose parameters hold NaN (or are a string, or nest 100k
    deep) sits in L1 beside good ones; `L1RecentSource` over the reopened store still
    renders every task, and the good ones reach the window."""
    path = tmp_path / "memory.db"
    with SQLiteStore(path) as store:
        memory = LoomMemory("agent", store=store, embedder=None)
        memory.add_task(
            Task(action=USER_MESSAGE, parameters={"content": "Which port does staging use?"})
        )
        for name, parameters in BAD_PARAMETERS.items():
            memory.add_task(Task(action="lookup", parameters=parameters, metadata={"case": name}))
        memory.add_task(
            Task(
                action="lookup",
                parameters={"host": "staging"},
                status=TaskStatus.COMPLETED,
                result="port 8443",
            )
        )
        memory.close()
    with SQLiteStore(path) as store:
        reopened = LoomMemory("agent", store=store, embedder=None)
        blocks = await L1RecentSource(reopened).collect("port", WIDE, ctx=CTX)
        reopened.close()
    assert len(blocks) == len(BAD_PARAMETERS) + 2
    messages = [m for b in sorted(blocks, key=lambda b: b.sequence) for m in b.messages]
    split_units(messages)
    assert messages[0].content == "Which port does staging use?"
    assert messages[-1].content == "port 8443"
    json.dumps(to_openai(messages), allow_nan=False)


@pytest.mark.parametrize("value", BAD_PARAMETERS.values(), ids=BAD_PARAMETERS.keys())
def test_a_malformed_task_leaving_l1_is_summarized_not_stuck(tmp_path: Path, value: Any) -> None:
    """The issue's scenario: L1 holds one task; the next pushes a task with malformed
    parameters (and result) out, into L3. Before, `_summarize` called `parameters.items()`
    and `json.dumps` on the raw values: `promote_tasks` raised (`AttributeError`,
    `RecursionError`, the store refusing a surrogate) and raised again on every later call,
    as the task stayed pending. Now its summary is valid text, stored and restored."""
    path = tmp_path / "memory.db"
    bad = Task(
        action="lookup",
        parameters=value,
        status=TaskStatus.COMPLETED,
        result=value,
        metadata={"importance": 0.1, "tags": ["dns\udc80"]},  # not important: summarized
    )
    with SQLiteStore(path) as store:
        memory = LoomMemory("agent", store=store, tiers=MemoryTiers(max_l1_size=1), embedder=None)
        memory.add_task(bad)
        memory.add_task(Task(action=USER_MESSAGE, parameters={"content": "and staging?"}))
        memory.promote_tasks()
        memory.promote_tasks()  # nothing is left pending to fail again
        (summary,) = memory.get_l3_summaries()
        memory.close()
    assert summary.task_id == bad.task_id
    assert summary.action == "lookup"
    assert summary.tags == ("dns\ufffd",)
    _valid(summary.text)
    with SQLiteStore(path) as store:
        reopened = LoomMemory("agent", store=store, tiers=MemoryTiers(max_l1_size=1), embedder=None)
        assert reopened.get_l3_summaries() == [summary]
        reopened.promote_tasks()
        reopened.close()


def test_the_summary_of_parameters_that_are_a_string_keeps_the_string() -> None:
    memory = LoomMemory("agent", tiers=MemoryTiers(max_l1_size=1), embedder=None)
    memory.add_task(
        Task(
            action="lookup",
            parameters="{'host': 'staging'}",  # type: ignore[arg-type]
            status=TaskStatus.FAILED,
            error="no such host",
            metadata={"importance": 0.1},
        )
    )
    memory.add_task(Task(action=USER_MESSAGE, parameters={"content": "next"}))
    memory.promote_tasks()
    (summary,) = memory.get_l3_summaries()
    assert "staging" in summary.param_summary
    assert summary.result_summary == "error: no such host"

"""Task values, importance rules, summaries, and the mapping between tasks and messages."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given

from loomctx import ConfigError, Message, ToolCall
from loomctx.memory.task import (
    ASSISTANT_MESSAGE,
    USER_MESSAGE,
    Task,
    TaskStatus,
    TaskSummary,
    importance_of,
    task_body,
    task_line,
    task_messages,
    task_text,
    tasks_from_messages,
)
from loomctx.messages import split_units
from tests.strategies import histories


def test_seed_signature_and_defaults() -> None:
    t = Task(task_id="t1", source_agent="a", target_agent="b", action="search",
             parameters={"q": "x"})  # fmt: skip
    assert t.status is TaskStatus.PENDING
    assert t.result is None
    assert t.error is None
    assert t.parent_task_id is None
    assert t.created_at.tzinfo is UTC
    assert Task(action="x").task_id != Task(action="x").task_id


def test_evolve_returns_a_changed_copy() -> None:
    t = Task(action="search")
    done = t.evolve(status=TaskStatus.COMPLETED, result="ok")
    assert t.status is TaskStatus.PENDING
    assert done.status is TaskStatus.COMPLETED
    assert done.updated_at >= t.updated_at


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"action": ""}, "needs an `action`"),
        ({"action": "x", "task_id": ""}, "`task_id`"),
        ({"action": "x", "status": "done"}, "unknown status 'done'"),
        ({"action": "x", "metadata": {"importance": 1.5}}, "in 0..1"),
        ({"action": "x", "metadata": {"importance": True}}, "in 0..1"),
    ],
)
def test_validation(fields: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        Task(**fields)  # type: ignore[arg-type]


def test_status_given_as_text_is_converted() -> None:
    assert Task(action="x", status="failed").status is TaskStatus.FAILED  # type: ignore[arg-type]


def test_importance_rules_of_seed_004() -> None:
    # A message that says something plain (no cue either way) keeps the seed's prior.
    plain = {"content": "The build runs on the second server in the rack near the window."}
    assert importance_of(Task(action=USER_MESSAGE, source_agent="user", parameters=plain)) >= 0.9
    assert importance_of(Task(action="sql", status=TaskStatus.FAILED)) == 0.8
    assert importance_of(Task(action="sql", status=TaskStatus.COMPLETED)) == 0.7
    assert importance_of(Task(action="sql", parent_task_id="p")) == 0.5
    assert importance_of(Task(action="sql")) == 0.5
    assistant = Task(action=ASSISTANT_MESSAGE, status=TaskStatus.COMPLETED, parameters=plain)
    assert 0.5 <= importance_of(assistant) < 0.6
    assert importance_of(Task(action="sql", metadata={"importance": 0.95})) == 0.95


def test_dict_round_trip() -> None:
    t = Task(
        action="sql",
        parameters={"q": "select"},
        result={"rows": [1, 2]},
        status=TaskStatus.COMPLETED,
        metadata={"tags": ["db"]},
        parent_task_id="p",
    )
    assert Task.from_dict(t.to_dict()) == t
    odd = Task(action="x", result=object())
    assert isinstance(Task.from_dict(odd.to_dict()).result, str)
    s = TaskSummary(task_id="t", action="sql", param_summary="q=1", result_summary="2 rows",
                    tags=("db",), created_at=datetime(2026, 1, 1, tzinfo=UTC))  # fmt: skip
    assert TaskSummary.from_dict(s.to_dict()) == s
    assert s.text == "sql: q=1 -> 2 rows"
    assert TaskSummary(task_id="t", action="a", param_summary="", result_summary="").text == "a"


def test_tasks_render_as_messages_and_text() -> None:
    user = Task(action=USER_MESSAGE, parameters={"content": "hi", "speaker": "Ann"})
    assert task_messages(user) == (Message.user("hi"),)
    assert task_line(user) == "Ann: hi"
    assert task_text(user) == "Ann: hi"
    reply = Task(action=ASSISTANT_MESSAGE, parameters={"content": "hello"})
    assert task_line(reply) == "assistant: hello"
    tool = Task(action="sql", parameters={"q": "1"}, status=TaskStatus.COMPLETED,
                result="one row", metadata={"tool_call_id": "c9"})  # fmt: skip
    call, result = task_messages(tool)
    assert call.tool_calls == (ToolCall(id="c9", name="sql", arguments={"q": "1"}),)
    assert result == Message.tool("one row", tool_call_id="c9", name="sql")
    assert task_text(tool) == 'sql({"q": "1"}) -> one row'
    failed = Task(action="sql", status=TaskStatus.FAILED, error="no such table")
    assert task_messages(failed)[1].is_error
    assert task_text(failed).endswith("-> error: no such table")
    assert task_messages(failed)[0].tool_calls[0].id == f"task_{failed.task_id}"


def test_a_task_s_body_is_what_its_last_message_shows_and_can_be_replaced() -> None:
    user = Task(action=USER_MESSAGE, parameters={"content": "a long paste"})
    tool = Task(action="sql", status=TaskStatus.COMPLETED, result={"rows": 2})
    failed = Task(action="sql", status=TaskStatus.FAILED, error="no such table")
    assert task_body(user) == "a long paste"
    assert task_body(tool) == '{"rows": 2}'
    assert task_body(failed) == "no such table"  # the error itself: what a handle reads
    for task in (user, tool, failed):
        assert task_messages(task, body=None) == task_messages(task)
        shown = task_messages(task, body="[cut]")[-1]
        assert shown.content == ("error: [cut]" if task is failed else "[cut]")
        assert shown.role == task_messages(task)[-1].role
    assert task_messages(user, body="bad \udce9")[0].content == "bad \ufffd"


def test_messages_to_tasks_and_back() -> None:
    call = ToolCall(id="c1", name="sql", arguments={"q": "x"})
    history = [
        Message.system("ignored"),
        Message.user("find it"),
        Message.assistant("looking", tool_calls=[call]),
        Message.tool("boom", tool_call_id="c1", is_error=True),
        Message.assistant("it failed"),
    ]
    tasks = tasks_from_messages(history, agent="bot", session_id="s1")
    assert [t.action for t in tasks] == [USER_MESSAGE, ASSISTANT_MESSAGE, "sql", ASSISTANT_MESSAGE]
    assert tasks[2].status is TaskStatus.FAILED
    assert tasks[2].error == "boom"
    assert all(t.metadata["session_id"] == "s1" for t in tasks)
    assert [t.created_at for t in tasks] == sorted({t.created_at for t in tasks})


@given(histories(system=False, names=False, errors=True, empty_text=False))
def test_tool_units_survive_tasks(history: list[Message]) -> None:
    tasks = tasks_from_messages(history)
    messages = [m for t in tasks for m in task_messages(t)]
    split_units(messages)  # every call with its result
    calls = [c.id for m in history for c in m.tool_calls]
    assert [c.id for m in messages for c in m.tool_calls] == calls

"""`Task`: the unit memory records (seed 004), its summary, and how tasks map to messages.

Everything an agent does is a Task: a user's message, an assistant's reply, a tool call with
its result, a subtask delegated to another agent (`parent_task_id` links the tree). Memory
keeps Tasks in tiers (`MemoryTier`); what leaves a tier is compressed into a `TaskSummary`.

Tasks map to provider messages so recent memory can be shown to a model as real history:

- action ``"user_message"``: a user message (`parameters["content"]`);
- action ``"assistant_message"``: an assistant reply (`parameters["content"]`);
- any other action: a tool call of that name with `parameters` as its arguments, and its
  result (or error) as the tool result, one atomic unit. The call id is
  `metadata["tool_call_id"]` when the task came from a model's tool call, else derived from
  the task id.

A Task records something that happened, so it keeps what it is given; what leaves it is made
valid instead of refused. `to_dict`, `task_messages`, `task_line` and `task_text` are total:
whatever a task holds (parameters that are a string or hold NaN, objects JSON cannot carry,
surrogates, nesting thousands of levels deep, or a stored task written before these rules),
they give valid JSON, valid Unicode and valid messages, and never raise. Strings are repaired
with `valid_text` (a lone surrogate becomes U+FFFD), NaN and Infinity become the strings
``"NaN"``, ``"Infinity"``, ``"-Infinity"``, other objects their text, and nesting deeper than
`MAX_ARGUMENT_DEPTH` is cut. One malformed task therefore cannot take down a source that
renders many.
"""

from __future__ import annotations

import functools
import json
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from loomctx.errors import ConfigError
from loomctx.memory.importance import message_importance
from loomctx.memory.timeref import TIME_REFS, span_text, spans_of, spans_to_data, turn_spans
from loomctx.messages import MAX_ARGUMENT_DEPTH, Message, ToolCall, split_units, valid_text
from loomctx.parts import stand_in

__all__ = [
    "ASSISTANT_MESSAGE",
    "USER_MESSAGE",
    "MemoryTier",
    "Task",
    "TaskStatus",
    "TaskSummary",
    "importance_of",
    "message_task",
    "said_at",
    "task_arguments",
    "task_body",
    "task_label",
    "task_line",
    "task_messages",
    "task_text",
    "tasks_from_messages",
    "with_time_refs",
]

USER_MESSAGE: Final = "user_message"
ASSISTANT_MESSAGE: Final = "assistant_message"

IMPORTANCE_USER: Final = 0.9
IMPORTANCE_FAILED: Final = 0.8
IMPORTANCE_COMPLETED: Final = 0.7
IMPORTANCE_SUBTASK: Final = 0.5
IMPORTANCE_DEFAULT: Final = 0.5


class TaskStatus(StrEnum):
    """Where a task stands."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class MemoryTier(StrEnum):
    """The memory tiers of seed 004: recent, important, summaries, searchable archive."""

    L1 = "L1"
    L2 = "L2"
    L3 = "L3"
    L4 = "L4"


def _now() -> datetime:
    return datetime.now(UTC)


def _new_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """One unit of work, with the fields of seed 004.

    `metadata` holds the standard keys `importance` (0..1, overrides the rule of
    `importance_of`), `summary`, `tags` and `context_strategy`, and anything else you need.
    Tasks are immutable values: `evolve(...)` returns a changed copy (with `updated_at` set).
    """

    task_id: str = field(default_factory=_new_id)
    source_agent: str = "agent"
    target_agent: str = "agent"
    action: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict, hash=False)
    status: TaskStatus = TaskStatus.PENDING
    created_at: datetime = field(default_factory=_now)
    updated_at: datetime = field(default_factory=_now)
    result: Any = field(default=None, hash=False)
    error: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False)
    parent_task_id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.task_id, str) or not self.task_id:
            raise ConfigError(f"`task_id` must be a non-empty string, got {self.task_id!r}")
        if not isinstance(self.action, str) or not self.action:
            raise ConfigError(
                f"task {self.task_id!r} needs an `action` (e.g. 'user_message', a tool name)"
            )
        if not isinstance(self.status, TaskStatus):
            try:
                object.__setattr__(self, "status", TaskStatus(self.status))
            except ValueError:
                allowed = ", ".join(repr(s.value) for s in TaskStatus)
                raise ConfigError(
                    f"task {self.task_id!r}: unknown status {self.status!r}; use one of {allowed}"
                ) from None
        if not isinstance(self.metadata, Mapping):
            raise ConfigError(
                f"task {self.task_id!r}: `metadata` must be a mapping, got "
                f"{type(self.metadata).__name__}"
            )
        imp = self.metadata.get("importance")
        if imp is not None and (
            isinstance(imp, bool) or not isinstance(imp, int | float) or not 0 <= imp <= 1
        ):
            raise ConfigError(
                f"task {self.task_id!r}: `metadata['importance']` must be a number in 0..1, "
                f"got {imp!r}"
            )

    def evolve(self, **changes: Any) -> Task:
        """A copy with `changes` applied and `updated_at` set to now."""
        changes.setdefault("updated_at", _now())
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (datetimes as ISO strings), made valid as the module docstring
        says: a value JSON cannot carry is replaced where it is, not the whole field."""
        return {
            "task_id": self.task_id,
            "source_agent": self.source_agent,
            "target_agent": self.target_agent,
            "action": self.action,
            "parameters": _arguments(self.parameters),
            "status": self.status.value,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "result": _jsonable(self.result),
            "error": self.error,
            "metadata": _jsonable(self.metadata),
            "parent_task_id": self.parent_task_id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Task:
        """The inverse of `to_dict`. Parameters or metadata that are not a mapping (earlier
        versions stored them as one string when they held NaN) are kept under ``"value"``."""
        fields = dict(data)
        for name in ("parameters", "metadata"):
            if not isinstance(fields.get(name, {}), Mapping):
                fields[name] = {"value": fields[name]}
        fields["status"] = TaskStatus(fields["status"])
        fields["created_at"] = datetime.fromisoformat(fields["created_at"])
        fields["updated_at"] = datetime.fromisoformat(fields["updated_at"])
        return cls(**fields)


_CUT: Final = "[cut: nested too deep or too large]"
_MAX_NODES: Final = 100_000  # values, in all, rendered of one field: bounds a shared-subtree DAG
# `str` and `json.dumps` refuse ints of more than 4,300 digits (about 14,000 bits).
_MAX_INT_BITS: Final = 10_000


def _text_of(value: object) -> str:
    """`str(value)` as valid Unicode; the type's name if `str` fails."""
    try:
        text = value if isinstance(value, str) else str(value)
    except Exception:
        return f"<{type(value).__name__}>"
    return valid_text(text)


def _jsonable(value: Any) -> Any:
    """`value` as JSON data that stores and providers accept (see the module docstring);
    never raises."""
    left = _MAX_NODES
    active: set[int] = set()  # containers being walked: a value that contains itself is cut

    def walk(item: Any, depth: int) -> Any:
        nonlocal left
        left -= 1
        if left < 0:
            return _CUT
        if item is None or isinstance(item, bool):
            return item
        if isinstance(item, int):
            bits = item.bit_length()
            return int(item) if bits <= _MAX_INT_BITS else f"<an integer of {bits} bits>"
        if isinstance(item, float):
            if math.isfinite(item):
                return float(item)
            return "NaN" if math.isnan(item) else "Infinity" if item > 0 else "-Infinity"
        if isinstance(item, str):
            return valid_text(item)
        if isinstance(item, Mapping | list | tuple):
            if depth > MAX_ARGUMENT_DEPTH or id(item) in active:
                return _CUT
            active.add(id(item))
            try:
                if isinstance(item, Mapping):
                    return {_text_of(k): walk(v, depth + 1) for k, v in item.items()}
                return [walk(v, depth + 1) for v in item]
            except Exception:  # a mapping whose iteration fails
                return _text_of(item)
            finally:
                active.discard(id(item))
        return _text_of(item)

    return walk(value, 1)


def _arguments(parameters: object) -> dict[str, Any]:
    """A task's parameters as a JSON object: a mapping made valid, anything else (a string,
    say) kept under ``"value"``."""
    if isinstance(parameters, Mapping):
        out: dict[str, Any] = _jsonable(parameters)
        if isinstance(out, dict):
            return out
    return {"value": _jsonable(parameters)}


def _content(task: Task, key: str) -> str:
    """The text of parameter `key` of a message task ("" when absent), whatever the
    parameters are: parameters that are not a mapping are taken as the content."""
    params = task.parameters
    if not isinstance(params, Mapping):
        return _text_of(params) if key == "content" else ""
    value = params.get(key)
    return "" if value is None else _text_of(value)


def importance_of(task: Task) -> float:
    """`metadata['importance']` if set; else seed 004's rule as the prior (a user's task
    0.9, a failed task 0.8, a completed one 0.7, a subtask 0.5, anything else 0.5), moved by
    what a message says (`loomctx.memory.importance`): a fact, a name, a number, a
    preference, a decision or a correction keeps or raises it, small talk ("Sounds great!")
    lowers it below the promotion threshold. Tool calls keep the prior."""
    imp = task.metadata.get("importance")
    if imp is not None:
        return float(imp)
    if task.action in (USER_MESSAGE, ASSISTANT_MESSAGE):
        return message_importance(_seed_importance(task), _content(task, "content"))
    return _seed_importance(task)


def _seed_importance(task: Task) -> float:
    """Seed 004's rule, by who made the task and how it ended."""
    if task.source_agent == "user" or task.action == USER_MESSAGE:
        return IMPORTANCE_USER
    if task.status is TaskStatus.FAILED:
        return IMPORTANCE_FAILED
    if task.status is TaskStatus.COMPLETED and task.action != ASSISTANT_MESSAGE:
        return IMPORTANCE_COMPLETED
    if task.parent_task_id is not None:
        return IMPORTANCE_SUBTASK
    return IMPORTANCE_DEFAULT


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSummary:
    """A compressed Task (seed 004): what was done, with what, and what came of it."""

    task_id: str
    action: str
    param_summary: str
    result_summary: str
    tags: tuple[str, ...] = ()
    importance: float = IMPORTANCE_DEFAULT
    created_at: datetime = field(default_factory=_now)

    @property
    def text(self) -> str:
        """One line: ``action: parameters -> result``."""
        line = f"{self.action}: {self.param_summary}" if self.param_summary else self.action
        return f"{line} -> {self.result_summary}" if self.result_summary else line

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return {
            "task_id": self.task_id,
            "action": self.action,
            "param_summary": self.param_summary,
            "result_summary": self.result_summary,
            "tags": list(self.tags),
            "importance": self.importance,
            "created_at": self.created_at.isoformat(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskSummary:
        """The inverse of `to_dict`."""
        fields = dict(data)
        fields["tags"] = tuple(fields.get("tags", ()))
        fields["created_at"] = datetime.fromisoformat(fields["created_at"])
        return cls(**fields)


def _result_text(task: Task) -> str:
    if task.status is TaskStatus.FAILED:
        return f"error: {_text_of(task.error or 'failed')}"
    if task.result is None:
        return ""
    if isinstance(task.result, str):
        return valid_text(task.result)
    return json.dumps(_jsonable(task.result), ensure_ascii=False)


def task_arguments(task: Task) -> dict[str, Any]:
    """A task's parameters as a JSON object that stores and providers accept, whatever the
    task holds (see the module docstring): the arguments `task_messages` gives its call.
    Never raises."""
    return _arguments(task.parameters)


def task_text(task: Task) -> str:
    """The searchable text of a task: what was said (``"speaker: content"`` when the message
    names its speaker: questions about a person then find what that person said), or
    ``action(arguments) -> result``. Never raises (see the module docstring)."""
    if task.action in (USER_MESSAGE, ASSISTANT_MESSAGE):
        content = _content(task, "content")
        speaker = _content(task, "speaker")
        return f"{speaker}: {content}" if speaker else content
    args = json.dumps(task_arguments(task), ensure_ascii=False, sort_keys=True)
    result = _result_text(task)
    action = valid_text(task.action)
    return f"{action}({args}) -> {result}" if result else f"{action}({args})"


def task_line(task: Task) -> str:
    """One readable line for a task in a prompt: who said what, or what a tool did. Never
    raises (see the module docstring)."""
    if task.action in (USER_MESSAGE, ASSISTANT_MESSAGE):
        who = _content(task, "speaker") or ("user" if task.action == USER_MESSAGE else
                                            "assistant")  # fmt: skip
        return f"{who}: {_content(task, 'content')}"
    return task_text(task)


@functools.lru_cache(maxsize=8192)  # a window labels the same tasks build after build
def said_at(when: datetime, *, time: bool = False) -> str:
    """When something was said, as a memory item's label in a prompt: ``"8 May 2023"``
    (with `time`, ``"8 May 2023 13:56"``; UTC when the time has a zone). A date lets the
    model resolve "yesterday" or "last week" in a remembered turn, for 8 tokens in brackets
    (the time of day adds 4; the 32-character id it replaces cost 21). Relative hints ("2 days
    ago") are the model's job: they would change every day for nothing."""
    if when.tzinfo is not None:
        when = when.astimezone(UTC)
    return f"{when.day} {when:%b %Y %H:%M}" if time else f"{when.day} {when:%b %Y}"


def with_time_refs(task: Task) -> Task:
    """`task` with the times its message names ("yesterday", 上个月) resolved against its
    `created_at`, in its metadata under `TIME_REFS`; as it is when it names none, is not a
    user or assistant message (a tool call's arguments are not speech), or already has them
    (they were resolved when it was first written)."""
    if task.action not in (USER_MESSAGE, ASSISTANT_MESSAGE) or TIME_REFS in task.metadata:
        return task
    spans = turn_spans(task_body(task), task.created_at)
    if not spans:
        return task
    return replace(task, metadata={**task.metadata, TIME_REFS: spans_to_data(spans)})


def task_label(task: Task) -> str:
    """A memory item's label in a prompt: when it was said (`said_at`) and, for a turn that
    names a time memory resolved when it was written (`loomctx.memory.timeref.TIME_REFS`),
    that time as a date, without the year when it is the year it was said:
    ``"8 May 2023; yesterday = 7 May"``. Two at most, and none that is the day it was said
    ("today"): the date is what the model would otherwise have to work out, and get wrong,
    from "yesterday" in a turn said a year ago; each costs about 6 tokens."""
    said = said_at(task.created_at)
    year = f" {said.rsplit(' ', 1)[-1]}"
    parts = [said]
    for span in spans_of(task.metadata):
        text = span_text(span)
        if text != said and len(parts) < 3:
            parts.append(f"{span.phrase} = {text.removesuffix(year)}")
    return "; ".join(parts)


def task_body(task: Task) -> str:
    """What a task said or returned, as stored: a message's content, a tool call's result
    (JSON text for a value that is not a string) or, for a failed call, its error. It is
    the text of the task's last message in `task_messages` (a failed call's behind
    ``error: ``), and what a handle of an excerpt of it reads. Never raises."""
    if task.action in (USER_MESSAGE, ASSISTANT_MESSAGE):
        return _content(task, "content")
    if task.status is TaskStatus.FAILED:
        return _text_of(task.error or "failed")
    return _result_text(task)


def task_messages(task: Task, *, body: str | None = None) -> tuple[Message, ...]:
    """The messages a task stands for: one user or assistant message, or a tool unit (an
    assistant message with the call and the tool result). Never raises (see the module
    docstring): a source that renders many tasks cannot be taken down by one.

    `body`, if given, is shown in place of the task's `task_body` (an excerpt of it, say)."""
    text = task_body(task) if body is None else valid_text(body)
    if task.action == USER_MESSAGE:
        return (Message.user(text),)
    if task.action == ASSISTANT_MESSAGE:
        return (Message.assistant(text),)
    call_id = _text_of(task.metadata.get("tool_call_id") or "") or _text_of(f"task_{task.task_id}")
    name = valid_text(task.action)
    call = ToolCall(id=call_id, name=name, arguments=task_arguments(task))
    failed = task.status is TaskStatus.FAILED
    result = f"error: {text}" if failed else text
    return (
        Message.assistant(tool_calls=[call]),
        Message.tool(result, tool_call_id=call_id, name=name, is_error=failed),
    )


def message_task(
    action: str,
    content: str,
    *,
    agent: str,
    asker: str = "user",
    metadata: Mapping[str, Any] | None = None,
    parent_task_id: str | None = None,
    at: datetime | None = None,
) -> Task:
    """A message of the conversation as a completed Task: the user's (`USER_MESSAGE`, from
    `asker` to `agent`) or the agent's reply (`ASSISTANT_MESSAGE`, from `agent` to `asker`),
    recorded `at` (default: now). An `Agent`, a `Session`, the proxy and the ingest of a
    message history all record messages through it."""
    asked = action == USER_MESSAGE
    stamp = at or _now()
    return Task(
        source_agent=asker if asked else agent,
        target_agent=agent if asked else asker,
        action=action,
        parameters={"content": content},
        status=TaskStatus.COMPLETED,
        created_at=stamp,
        updated_at=stamp,
        metadata=dict(metadata or {}),
        parent_task_id=parent_task_id,
    )


def tasks_from_messages(
    messages: Sequence[Message], *, agent: str = "agent", session_id: str | None = None
) -> list[Task]:
    """Tasks for a message history: user and assistant messages, and each tool call with
    its result (assistant text beside tool calls becomes its own assistant task). The images
    and files of a user message or a tool result are kept as text that stands for them, such as
    ``[image: image/png 800x600]`` (`loomctx.parts.stand_in`): memory is searched as text.

    Timestamps increase by a microsecond per task so the order survives a store round trip.
    """
    base = _now()
    out: list[Task] = []

    scope = {} if session_id is None else {"session_id": session_id}

    def stamp() -> datetime:
        return base + timedelta(microseconds=len(out))

    def add(**fields: Any) -> None:
        at = stamp()
        meta = {**fields.pop("metadata", {}), **scope}
        out.append(Task(created_at=at, updated_at=at, metadata=meta, **fields))

    for unit in split_units(messages):
        first = unit.messages[0]
        if first.role == "system":
            continue
        if first.role == "user":
            text = "\n".join(stand_in(p) for p in first.parts) if first.parts else first.content
            out.append(message_task(USER_MESSAGE, text, agent=agent, metadata=scope, at=stamp()))
            continue
        if first.content:
            said = first.content
            out.append(
                message_task(ASSISTANT_MESSAGE, said, agent=agent, metadata=scope, at=stamp())
            )
        results = {m.tool_call_id: m for m in unit.messages[1:]}
        for call in first.tool_calls:
            res = results[call.id]
            output = "\n".join(stand_in(p) for p in res.parts) if res.parts else res.content
            add(
                source_agent=agent,
                target_agent=call.name,
                action=call.name,
                parameters=dict(call.arguments),
                status=TaskStatus.FAILED if res.is_error else TaskStatus.COMPLETED,
                result=None if res.is_error else output,
                error=output if res.is_error else None,
                metadata={"tool_call_id": call.id},
            )
    return out

"""The message model: `Message`, `ToolCall`, and the `MessageUnit`s a history is cut into.

What each field may hold is checked where a value is built (`loomctx.messages._text`), so that
a bad value fails at the boundary where it entered, naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from loomctx.errors import MessageFormatError
from loomctx.messages._text import check_arguments, check_text
from loomctx.parts import Part, settle_parts

__all__ = [
    "Message",
    "MessageUnit",
    "Role",
    "ToolCall",
    "flatten_units",
    "split_units",
]

Role = Literal["system", "user", "assistant", "tool"]
"""Who a message is from: `tool` marks the result of one tool call."""

_ROLES: tuple[str, ...] = get_args(Role)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """One tool call requested by an assistant message: its id, the tool's name, its arguments."""

    id: str
    name: str
    # Left out of the hash (a dict is unhashable) so that messages stay usable as cache keys;
    # equality still compares the arguments.
    arguments: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise MessageFormatError(
                f"a tool call's `id` must be a non-empty string, got {self.id!r}; "
                "use the id the provider gave the call"
            )
        if not isinstance(self.name, str) or not self.name:
            raise MessageFormatError(
                f"tool call `{self.id}` needs a non-empty string `name`, got {self.name!r}"
            )
        if not isinstance(self.arguments, Mapping):
            raise MessageFormatError(
                f"tool call `{self.id}` has `arguments` of type {type(self.arguments).__name__}; "
                "pass the parsed JSON object as a dict (use `{}` for no arguments)"
            )
        check_text(self.id, "a tool call's `id`")
        check_text(self.name, f"the `name` of tool call `{self.id}`")
        check_arguments(self.arguments, "", 1, f"tool call `{self.id}`")

    def arguments_json(self) -> str:
        """The arguments as compact JSON, keys in insertion order, non-ASCII text kept as is."""
        try:
            # allow_nan=False: NaN and Infinity are not JSON, and providers reject them.
            return json.dumps(
                dict(self.arguments),
                ensure_ascii=False,
                separators=(",", ":"),
                sort_keys=False,
                allow_nan=False,
            )
        except (TypeError, ValueError) as exc:
            raise MessageFormatError(
                f"the arguments of tool call `{self.id}` are not JSON-serializable ({exc}); "
                "use only dicts with string keys, lists, strings, finite numbers, bools and None"
            ) from exc


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """One message of a conversation, in Loom's provider-neutral model.

    `tool_calls` is allowed on `assistant` messages only; `tool_call_id` is required on `tool`
    messages and forbidden elsewhere; `is_error` is only meaningful on `tool` messages. A list
    passed as `tool_calls` is stored as a tuple. `parts` (user messages, and tool results:
    images and files, no audio) holds the whole content in order when it has an image, a file
    or audio: `content` is then the text of its text parts (given alone beside other parts,
    it becomes the first part); parts that are all text are folded into `content`.
    Violations raise `MessageFormatError`.
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False
    parts: tuple[Part, ...] = ()

    def __post_init__(self) -> None:
        if self.role not in _ROLES:
            allowed = ", ".join(f"`{r}`" for r in _ROLES)
            raise MessageFormatError(f"unknown role {self.role!r}; use one of {allowed}")
        if self.parts:
            content, parts = settle_parts(self.role, self.content, self.parts)
            object.__setattr__(self, "content", content)
            object.__setattr__(self, "parts", parts)
        if not isinstance(self.content, str):
            raise MessageFormatError(
                f"`content` of a `{self.role}` message must be a string, got "
                f'{type(self.content).__name__}; use "" for a message without text'
            )
        check_text(self.content, f"the `content` of a `{self.role}` message")
        for what, value in (("name", self.name), ("tool_call_id", self.tool_call_id)):
            if isinstance(value, str):
                check_text(value, f"the `{what}` of a `{self.role}` message")
        if not isinstance(self.tool_calls, tuple):  # a list, say: store it immutably
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        for call in self.tool_calls:
            if not isinstance(call, ToolCall):
                raise MessageFormatError(
                    f"`tool_calls` must hold `ToolCall` values, got {type(call).__name__}; "
                    "build each with `ToolCall(id=..., name=..., arguments=...)`"
                )
        if self.tool_calls and self.role != "assistant":
            raise MessageFormatError(
                f"a `{self.role}` message cannot carry `tool_calls`; only `assistant` messages "
                "request tools"
            )
        if self.role == "tool" and not self.tool_call_id:
            raise MessageFormatError(
                "a `tool` message needs `tool_call_id`: the id of the tool call it answers"
            )
        if self.role != "tool" and self.tool_call_id is not None:
            raise MessageFormatError(
                f"a `{self.role}` message cannot carry `tool_call_id` "
                f"({self.tool_call_id!r}); only `tool` messages answer tool calls"
            )
        if self.is_error and self.role != "tool":
            raise MessageFormatError(
                f"a `{self.role}` message cannot set `is_error`; only a `tool` result can "
                "report that its tool failed"
            )

    @classmethod
    def system(cls, text: str) -> Message:
        """A system message (instructions for the model)."""
        return cls(role="system", content=text)

    @classmethod
    def user(
        cls, text: str = "", *, name: str | None = None, parts: Iterable[Part] = ()
    ) -> Message:
        """A user message, optionally naming the participant; `parts` (images, files) follow
        `text`."""
        return cls(role="user", content=text, name=name, parts=tuple(parts))

    @classmethod
    def assistant(
        cls, text: str = "", *, tool_calls: Iterable[ToolCall] = (), name: str | None = None
    ) -> Message:
        """An assistant message: text, tool calls, or both."""
        return cls(role="assistant", content=text, tool_calls=tuple(tool_calls), name=name)

    @classmethod
    def tool(
        cls,
        content: str,
        *,
        tool_call_id: str,
        name: str | None = None,
        is_error: bool = False,
        parts: Iterable[Part] = (),
    ) -> Message:
        """The result of the tool call `tool_call_id`; `is_error=True` if the tool failed;
        `parts` (images, files) follow `content`."""
        return cls(
            role="tool",
            content=content,
            tool_call_id=tool_call_id,
            name=name,
            is_error=is_error,
            parts=tuple(parts),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageUnit:
    """The smallest piece of history Loom may keep or drop: one plain message, or a tool unit."""

    messages: tuple[Message, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(self.messages))
        if not self.messages:
            raise MessageFormatError("a `MessageUnit` needs at least one message")

    @property
    def is_tool_unit(self) -> bool:
        """True for an assistant message with tool calls followed by all of their results."""
        return bool(self.messages[0].tool_calls)


def _stray_result(index: int, m: Message, answered: set[str]) -> MessageFormatError:
    if m.tool_call_id in answered:
        return MessageFormatError(
            f"message {index} is a second result for tool call `{m.tool_call_id}`; each call "
            "takes exactly one result, so drop the duplicate"
        )
    return MessageFormatError(
        f"tool message {index} answers `{m.tool_call_id}`, which is no open tool call (an "
        "orphan result); a result must directly follow the assistant message whose "
        "`tool_calls` include its `tool_call_id`, with only other results in between"
    )


def split_units(messages: Sequence[Message]) -> list[MessageUnit]:
    """Cut a history into units: each assistant message with tool calls plus its results, and
    every other message on its own.

    The results of an assistant message's calls must follow it directly, in any order among
    themselves. Raises `MessageFormatError`, naming the message index, on an orphan result, a
    call without a result, a second result for a call, or a tool-call id used twice.
    """
    units: list[MessageUnit] = []
    made_at: dict[str, int] = {}  # call id -> index of the message that made the call
    answered: set[str] = set()
    i, n = 0, len(messages)
    while i < n:
        m = messages[i]
        if m.role == "tool":
            raise _stray_result(i, m, answered)
        pending: dict[str, ToolCall] = {}
        for call in m.tool_calls:
            if call.id in made_at:
                raise MessageFormatError(
                    f"tool call id `{call.id}` at message {i} is already used at message "
                    f"{made_at[call.id]}; every tool call needs a unique id"
                )
            made_at[call.id] = i
            pending[call.id] = call
        j = i + 1
        while pending and j < n and messages[j].role == "tool":
            result = messages[j]
            if result.tool_call_id not in pending:
                raise _stray_result(j, result, answered)
            del pending[result.tool_call_id]
            answered.add(result.tool_call_id)
            j += 1
        if pending:
            call = next(iter(pending.values()))
            before = f"before message {j}" if j < n else "at the end of the history"
            raise MessageFormatError(
                f"tool call `{call.id}` (`{call.name}`) at message {i} has no result; add a "
                f"`tool` message with `tool_call_id={call.id!r}` after message {i}'s other "
                f"results ({before}), or remove the call"
            )
        units.append(MessageUnit(messages=tuple(messages[i:j])))
        i = j
    return units


def flatten_units(units: Iterable[MessageUnit]) -> list[Message]:
    """The messages of `units`, in order: the inverse of `split_units`."""
    return [m for unit in units for m in unit.messages]

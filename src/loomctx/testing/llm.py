"""Test doubles for `loomctx.agent.llm.LLM`: a strict `ScriptedLLM` and a callable-backed
`FunctionLLM`. Neither touches the network.

Both answer each call with a *reply*:

- a string: a text reply;
- a list of `ToolCall`s: a reply that only calls tools;
- a ``(text, [ToolCall, ...])`` tuple: text and tool calls;
- a `Completed` chunk: streamed as it is (for what the forms above cannot say, such as a
  finish reason of ``"length"`` or a call in `invalid_tool_calls`);
- an exception instance: raised when the call is made (to test how failures are handled).

A reply streams the way a provider's does: the text in a few `TextDelta`s, each tool call in
`ToolCallDelta` fragments, a `Usage`, then `Completed`. Usage is counted with the real
tokenizer (`TiktokenCounter`, `o200k_base`, unless you pass a `counter`): the input is the
messages and tools the call received, the output the reply's text and tool calls, so a loop's
token accounting sees realistic numbers. Every call is recorded in `.calls` as an `LLMCall`
(the messages, tools and options received), so a test can assert on what the model was shown.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from loomctx.agent.llm import (
    Completed,
    LLMChunk,
    LLMOptions,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from loomctx.errors import ConfigError
from loomctx.messages import Message, ToolCall
from loomctx.tokens import TiktokenCounter, TokenCounter

__all__ = [
    "FunctionLLM",
    "LLMCall",
    "Reply",
    "ScriptExhausted",
    "ScriptedLLM",
    "Step",
]

Reply: TypeAlias = (
    str | Sequence[ToolCall] | tuple[str, Sequence[ToolCall]] | Completed | BaseException
)
"""What a fake answers one call with (see the module docstring)."""

Step: TypeAlias = Reply | Callable[[Sequence[Message]], Reply]
"""One step of a `ScriptedLLM`: a reply, or a function of the received messages to a reply."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMCall:
    """One call a fake received."""

    messages: tuple[Message, ...]
    tools: tuple[Mapping[str, Any], ...]
    options: LLMOptions | None


class ScriptExhausted(AssertionError):
    """A `ScriptedLLM` was called more times than it has steps."""


_Normal: TypeAlias = "tuple[str, tuple[ToolCall, ...]] | Completed | BaseException"

_FORMS = (
    "a string, a list of `ToolCall`s, a `(text, [ToolCall, ...])` tuple, a `Completed` chunk "
    "or an exception instance"
)


def _normalize(reply: object, where: str) -> _Normal:
    if isinstance(reply, BaseException | Completed):
        return reply
    if isinstance(reply, str):
        return reply, ()
    if (
        isinstance(reply, tuple)
        and len(reply) == 2
        and isinstance(reply[0], str)
        and isinstance(reply[1], Sequence)
        and not isinstance(reply[1], str)
    ):
        text, calls = reply
    elif isinstance(reply, Sequence) and reply:
        text, calls = "", reply
    else:
        raise ConfigError(f"{where} is {reply!r}; a reply must be {_FORMS}")
    for call in calls:
        if not isinstance(call, ToolCall):
            raise ConfigError(
                f"{where} holds {call!r}, not a `ToolCall`; build each call with "
                "`ToolCall(id=..., name=..., arguments={...})`"
            )
    return text, tuple(calls)


def _pieces(text: str, parts: int = 3) -> list[str]:
    """`text` cut at word boundaries into at most `parts` pieces that join back to it."""
    words = re.findall(r"\s*\S+\s*|\s+", text)
    size = max(1, -(-len(words) // parts))
    return ["".join(words[i : i + size]) for i in range(0, len(words), size)]


def _chunks(
    reply: _Normal,
    messages: Sequence[Message],
    tools: Sequence[Mapping[str, Any]],
    counter: TokenCounter,
) -> list[LLMChunk]:
    if isinstance(reply, BaseException):
        raise reply
    if isinstance(reply, Completed):
        done = reply
    else:
        text, calls = reply
        output = counter.count(text) + sum(
            counter.count(c.name) + counter.count(c.arguments_json()) for c in calls
        )
        done = Completed(
            message=Message.assistant(text, tool_calls=calls),
            finish_reason="tool_calls" if calls else "stop",
            usage=Usage(
                input_tokens=counter.count_messages(messages, tools=tools), output_tokens=output
            ),
        )
    out: list[LLMChunk] = [TextDelta(text=p) for p in _pieces(done.message.content)]
    raw_arguments = dict(done.invalid_tool_calls)
    for index, call in enumerate(done.message.tool_calls):
        arguments = raw_arguments.get(call.id, call.arguments_json())
        half = len(arguments) // 2
        out.append(ToolCallDelta(index=index, id=call.id, name=call.name, arguments=""))
        out.append(ToolCallDelta(index=index, arguments=arguments[:half]))
        out.append(ToolCallDelta(index=index, arguments=arguments[half:]))
    if done.usage is not None:
        out.append(done.usage)
    out.append(done)
    return out


def _record(
    messages: Sequence[Message],
    tools: Sequence[Mapping[str, Any]],
    options: LLMOptions | None,
) -> LLMCall:
    return LLMCall(messages=tuple(messages), tools=tuple(tools), options=options)


class ScriptedLLM:
    """A strict fake model that answers its calls with scripted steps, in order.

    ``ScriptedLLM([[ToolCall(id="c1", name="list_tables", arguments={})], "done"])`` first
    calls `list_tables`, then replies "done". A step may also be a function of the messages
    the call received, returning a reply. A call beyond the script raises `ScriptExhausted`
    (an `AssertionError`), and `assert_complete()` fails while steps remain, so a test notices
    a loop that calls the model too often or too rarely. `.calls` records every call.
    """

    def __init__(
        self,
        steps: Iterable[Step],
        *,
        name: str = "scripted",
        counter: TokenCounter | None = None,
    ) -> None:
        self.name = name
        """The model's name in events and errors."""
        self.calls: list[LLMCall] = []
        """Every call received, in order (including calls beyond the script)."""
        self._steps: list[Step] = list(steps)
        for i, step in enumerate(self._steps):
            if not callable(step):
                _normalize(step, f"step {i}")
        self._counter = counter or TiktokenCounter()
        self._next = 0
        self._overruns = 0

    def __repr__(self) -> str:
        return f"ScriptedLLM(steps={len(self._steps)}, used={self._next})"

    @property
    def remaining(self) -> int:
        """How many steps have not been used yet."""
        return len(self._steps) - self._next

    def assert_complete(self) -> None:
        """Raise `AssertionError` unless every step was used, and no call went beyond them."""
        if self._overruns:
            raise AssertionError(
                f"`{self.name}` was called {len(self.calls)} times but scripted with "
                f"{len(self._steps)} steps"
            )
        if self.remaining:
            upcoming = self._steps[self._next]
            raise AssertionError(
                f"`{self.name}` has {self.remaining} unused step(s) of {len(self._steps)} "
                f"(next: {upcoming!r}); the code under test called the model "
                f"{len(self.calls)} time(s)"
            )

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        options: LLMOptions | None = None,
    ) -> AsyncIterator[LLMChunk]:
        """Record the call and stream the next step's reply."""
        self.calls.append(_record(messages, tools, options))
        if self._next >= len(self._steps):
            self._overruns += 1
            last = messages[-1].content[:200] if messages else ""
            raise ScriptExhausted(
                f"`{self.name}` got call {len(self.calls)} but was scripted with "
                f"{len(self._steps)} step(s); the last message was {last!r}. Add a step, or "
                "find out why the code under test called the model again"
            )
        step = self._steps[self._next]
        self._next += 1
        where = f"step {self._next - 1}"
        if callable(step):
            reply = _normalize(step(tuple(messages)), f"the reply of {where}")
        else:
            reply = _normalize(step, where)
        for chunk in _chunks(reply, messages, tools, self._counter):
            yield chunk


class FunctionLLM:
    """A fake model backed by a function: ``fn(messages, tools, options) -> reply``.

    `fn` may be sync or async and returns a reply as described in the module docstring; it
    sees everything a real model would, so it can decide from the messages what to answer.
    `.calls` records every call.
    """

    def __init__(
        self,
        fn: Callable[
            [Sequence[Message], Sequence[Mapping[str, Any]], LLMOptions | None],
            Reply | Awaitable[Reply],
        ],
        *,
        name: str | None = None,
        counter: TokenCounter | None = None,
    ) -> None:
        if not callable(fn):
            raise ConfigError(
                f"`FunctionLLM` needs a function (messages, tools, options) -> reply, got {fn!r}"
            )
        self.fn = fn
        self.name = name or f"function:{getattr(fn, '__name__', type(fn).__name__)}"
        """The model's name in events and errors."""
        self.calls: list[LLMCall] = []
        """Every call received, in order."""
        self._counter = counter or TiktokenCounter()

    def __repr__(self) -> str:
        return f"FunctionLLM({self.fn!r})"

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        options: LLMOptions | None = None,
    ) -> AsyncIterator[LLMChunk]:
        """Record the call, ask the function, and stream its reply."""
        self.calls.append(_record(messages, tools, options))
        result = self.fn(tuple(messages), tuple(tools), options)
        if inspect.isawaitable(result):
            result = await result
        reply = _normalize(result, f"the reply of `{self.name}`")
        for chunk in _chunks(reply, messages, tools, self._counter):
            yield chunk

"""Tools: typed Python functions the model can call, their JSON schemas, and running the calls.

`@tool` turns a function, sync or async, into a `Tool`. The function's type hints become the
JSON Schema of its parameters, the first paragraph of its docstring the tool's description, and
the Google-style ``Args:`` section the parameters' descriptions::

    @tool
    def weather(city: str, units: Literal["c", "f"] = "c") -> dict[str, float]:
        '''Current weather for a city.

        Args:
            city: The city's name, e.g. "Lisbon".
            units: Celsius or Fahrenheit.
        '''

A tool may take these annotations: ``str``, ``int``, ``float``, ``bool``, ``None``,
``list[X]``, ``tuple[X, ...]``, ``dict[str, X]``, ``Literal[...]``, an `Enum` whose values are
all strings or all ints, and unions of them (``X | None``). A parameter annotated `ToolContext`
receives the call's context and is not part of the schema. Anything else is refused when the
function is decorated, with a `ToolError` naming the function and the parameter.

`Tool.invoke` never raises for a failed call (only cancellation propagates): invalid arguments,
an exception in the tool and a timeout all become a `ToolResult` with ``is_error=True`` whose
text tells the model what went wrong, so it can fix its call. `run_tool_calls` runs a reply's
calls, independent ones concurrently, and returns the results in the order of the calls.

Sync tools run in a worker thread (`asyncio.to_thread`) so the event loop keeps going. A thread
cannot be stopped: after a timeout or a cancellation the caller moves on with an error result,
but the function runs on until it returns.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import json
import logging
import re
import time
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Union, overload

from loomctx.agent._tool_args import check_object, check_value, describe
from loomctx.agent._tool_schema import (
    SUPPORTED,
    Convert,
    compile_type,
    json_default,
    parse_docstring,
)
from loomctx.errors import ConfigError, ToolError, check_int
from loomctx.messages import Message, ToolCall, valid_text

if TYPE_CHECKING:
    from loomctx.agent.events import AgentEvent
    from loomctx.memory.context_builder import ExecutionContext

__all__ = ["Tool", "ToolContext", "ToolResult", "run_tool_calls", "tool"]

logger = logging.getLogger(__name__)

_NAME: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolContext:
    """What a tool may learn about its call: annotate a parameter with this type to receive it.

    `call_id` is the id the model gave the call, `tool_name` the tool's name, and `metadata`
    whatever the caller (the agent) passes along, read-only: run id, agent name, session, ...

    When an `Agent` makes the call, `execution` is the run's `ExecutionContext` for it:
    `current_task` is the Task the agent will record for this call (its `task_id` is known
    before the tool runs, so work the tool delegates can point at it with `parent_task_id`),
    `memory` the agent's memory (read it, do not write it), `parent_context` what the run was
    handed if it is itself a sub-agent's. `emit` puts an event into the run's stream, in order
    (that is how a sub-agent's events reach its parent's `stream()`). Both are None when the
    tool is invoked outside an agent run. Pass the whole context on as
    ``agent.run(task, parent=ctx)`` to run another agent as this call's sub-agent.
    """

    call_id: str
    tool_name: str
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    execution: ExecutionContext | None = None
    emit: Callable[[AgentEvent], None] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult:
    """The outcome of one tool call, as text for the model.

    `is_error` is True when the call failed (invalid arguments, an exception, a timeout, an
    unknown tool); `content` then says why. `elapsed_ms` is the wall time of the call.
    `content` is made valid Unicode (`valid_text`: a lone surrogate, such as a file read with
    ``errors="surrogateescape"`` leaves, becomes U+FFFD): the tool has run, so its output is
    kept rather than refused.
    """

    call_id: str
    name: str
    content: str
    is_error: bool = False
    elapsed_ms: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.content, str):
            object.__setattr__(self, "content", valid_text(self.content))

    def to_message(self) -> Message:
        """The `tool` message answering the call (needs a non-empty `call_id`)."""
        return Message.tool(
            self.content, tool_call_id=self.call_id, name=self.name, is_error=self.is_error
        )


# ---------------------------------------------------------------------------------------------
# Tool


def _is_context(tp: Any) -> bool:
    """Whether `tp` is `ToolContext` or `ToolContext | None`."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        return set(typing.get_args(tp)) == {ToolContext, type(None)}
    return tp is ToolContext


def _to_text(value: Any) -> str:
    """A tool's return value as text: str as is, None as "", JSON for data, str() for the rest."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, bool | int | float | list | tuple | dict):
        try:
            return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Tool:
    """A function the model can call, with the JSON Schema of its arguments.

    Build one with `@tool`. `parameters` is the JSON Schema of the arguments (an object),
    `timeout` the seconds a call may take (None: no limit), and `concurrent` whether a call may
    run at the same time as other calls (False for tools with side effects that must not
    interleave). `context_parameter` names the parameter that receives the `ToolContext`, and
    `converters` turn validated JSON values into what the function takes (Enum members,
    tuples), by parameter.
    Calling the `Tool` itself calls the function, as if undecorated.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    function: Callable[..., Any]
    timeout: float | None = 30.0
    concurrent: bool = True
    context_parameter: str | None = None
    converters: Mapping[str, Convert] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ToolError(
                f"tool name {self.name!r} is invalid; use 1 to 64 letters, digits, "
                "`_` or `-` (what providers accept)"
            )
        if self.timeout is not None and (
            isinstance(self.timeout, bool)
            or not isinstance(self.timeout, int | float)
            or not self.timeout > 0
        ):
            raise ToolError(
                f"tool `{self.name}`: `timeout` must be a number of seconds > 0 or "
                f"None (no limit), got {self.timeout!r}"
            )
        object.__setattr__(self, "parameters", MappingProxyType(dict(self.parameters)))
        object.__setattr__(self, "converters", MappingProxyType(dict(self.converters)))

    @classmethod
    def from_function(
        cls,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = 30.0,
        concurrent: bool = True,
    ) -> Tool:
        """The tool for `function` (what `@tool` does); raises `ToolError` if a parameter
        cannot be expressed as JSON or the docstring documents a parameter it lacks."""
        fname = getattr(function, "__qualname__", repr(function))
        try:
            hints = typing.get_type_hints(function)
        except Exception as exc:
            raise ToolError(
                f"tool function `{fname}`: its annotations cannot be resolved "
                f"({type(exc).__name__}: {exc}); define the types they name at "
                "module level"
            ) from exc
        summary, described = parse_docstring(inspect.getdoc(function))
        properties: dict[str, Any] = {}
        required: list[str] = []
        converters: dict[str, Convert] = {}
        context_parameter: str | None = None
        parameters = inspect.signature(function).parameters
        for pname, param in parameters.items():
            where = f"tool function `{fname}`: parameter `{pname}`"
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                stars = "*" if param.kind is param.VAR_POSITIONAL else "**"
                raise ToolError(
                    f"tool function `{fname}` takes `{stars}{pname}`, which a tool "
                    "cannot (the model calls it with named JSON arguments); name "
                    "each parameter"
                )
            if param.kind is param.POSITIONAL_ONLY:
                raise ToolError(
                    f"{where} is positional-only; tools are called with keyword "
                    "arguments, so remove the `/`"
                )
            if pname not in hints:
                raise ToolError(f"{where} has no type annotation; annotate it with {SUPPORTED}")
            if _is_context(hints[pname]):
                context_parameter = pname
                continue
            schema, convert = compile_type(hints[pname], where)
            if described.get(pname):
                schema["description"] = described[pname]
            if param.default is param.empty:
                required.append(pname)
            else:
                default = json_default(param.default, where)
                problems: list[str] = []
                check_value(default, schema, pname, problems)
                if problems:
                    raise ToolError(
                        f"{where} has the default {param.default!r}, which does not "
                        f"fit its annotation ({problems[0]}); fix the default or "
                        "annotate it as `X | None`"
                    )
                schema["default"] = default
            properties[pname] = schema
            if convert is not None:
                converters[pname] = convert
        missing = [p for p in described if p not in parameters]
        if missing:
            names = ", ".join(f"`{p}`" for p in missing)
            raise ToolError(
                f"tool function `{fname}`: its docstring documents {names}, which "
                "it does not take; fix the `Args:` section or the signature"
            )
        return cls(
            name=name if name is not None else getattr(function, "__name__", ""),
            description=description if description is not None else summary,
            parameters={
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
            function=function,
            timeout=timeout,
            concurrent=concurrent,
            context_parameter=context_parameter,
            converters=converters,
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly (no validation, timeout or error conversion)."""
        return self.function(*args, **kwargs)

    def schema(self) -> dict[str, Any]:
        """The OpenAI-style definition ``{"type": "function", "function": {...}}``."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": _thaw(self.parameters),
            },
        }

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments checked against `parameters`: required and unknown keys, types, enums,
        nested lists and dicts. Ints become floats where a number is expected; nothing else is
        changed. Raises `ToolError` listing every problem, for the model to fix its call."""
        if not isinstance(arguments, Mapping):
            raise ToolError(
                f"invalid arguments for tool `{self.name}`: expected a JSON object, "
                f"got {describe(arguments)}"
            )
        problems: list[str] = []
        checked = check_object(arguments, self.parameters, "", problems)
        if problems:
            lines = "\n".join(f"- {p}" for p in problems)
            raise ToolError(
                f"invalid arguments for tool `{self.name}`:\n{lines}\n"
                "Fix these and call the tool again."
            )
        return checked

    async def invoke(
        self,
        arguments: Mapping[str, Any],
        *,
        call_id: str = "",
        metadata: Mapping[str, Any] | None = None,
        execution: ExecutionContext | None = None,
        emit: Callable[[AgentEvent], None] | None = None,
    ) -> ToolResult:
        """Validate, run (sync functions in a worker thread) within `timeout`, and return the
        result as text. Never raises except on cancellation: a failure is an error result.
        `metadata`, `execution` and `emit` reach the `ToolContext`."""
        start = time.perf_counter()

        def result(content: str, is_error: bool = False) -> ToolResult:
            elapsed = (time.perf_counter() - start) * 1000
            return ToolResult(
                call_id=call_id,
                name=self.name,
                content=content,
                is_error=is_error,
                elapsed_ms=elapsed,
            )

        try:
            kwargs = self.validate(arguments)
        except ToolError as exc:
            return result(str(exc), is_error=True)
        for pname, convert in self.converters.items():
            if pname in kwargs:
                kwargs[pname] = convert(kwargs[pname])
        if self.context_parameter is not None:
            kwargs[self.context_parameter] = ToolContext(
                call_id=call_id,
                tool_name=self.name,
                metadata=MappingProxyType(dict(metadata or {})),
                execution=execution,
                emit=emit,
            )
        deadline = asyncio.timeout(self.timeout)
        try:
            async with deadline:
                value = await self._run(kwargs)
        except TimeoutError as exc:
            if deadline.expired():
                return result(
                    f"tool `{self.name}` timed out after {self.timeout:g} s; try "
                    "a smaller request, or a different approach",
                    is_error=True,
                )
            return result(self._failure(exc), is_error=True)
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # we are being cancelled: let it through
            return result(self._failure(exc), is_error=True)
        except Exception as exc:
            return result(self._failure(exc), is_error=True)
        try:
            return result(_to_text(value))
        except Exception as exc:  # a __str__ that raises
            return result(self._failure(exc), is_error=True)

    async def _run(self, kwargs: dict[str, Any]) -> Any:
        if inspect.iscoroutinefunction(self.function):
            return await self.function(**kwargs)
        value = await asyncio.to_thread(functools.partial(self.function, **kwargs))
        if inspect.isawaitable(value):
            value = await value
        return value

    def _failure(self, exc: BaseException) -> str:
        logger.debug("tool %r failed", self.name, exc_info=exc)
        detail = str(exc)
        kind = type(exc).__name__
        return (
            f"tool `{self.name}` failed: {kind}: {detail}"
            if detail
            else (f"tool `{self.name}` failed: {kind}")
        )


def _thaw(value: Any) -> Any:
    """A deep, mutable copy of a schema (read-only mappings become dicts)."""
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_thaw(v) for v in value]
    return value


@overload
def tool(function: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = 30.0,
    concurrent: bool = True,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = 30.0,
    concurrent: bool = True,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a typed function, sync or async, into a `Tool`; use it bare (``@tool``) or with
    options (``@tool(name=..., description=..., timeout=30.0, concurrent=True)``).

    `name` defaults to the function's name, `description` to the docstring's first paragraph.
    `timeout` is in seconds (None: no limit); ``concurrent=False`` makes calls to the tool run
    alone, in order. See the module docstring for the annotations a tool may take.
    """

    def decorate(fn: Callable[..., Any]) -> Tool:
        return Tool.from_function(
            fn, name=name, description=description, timeout=timeout, concurrent=concurrent
        )

    return decorate if function is None else decorate(function)


# ---------------------------------------------------------------------------------------------
# Running a reply's calls


async def run_tool_calls(
    calls: Sequence[ToolCall],
    tools: Mapping[str, Tool] | Sequence[Tool],
    *,
    max_concurrency: int = 8,
    metadata: Mapping[str, Any] | None = None,
    executions: Mapping[str, ExecutionContext] | None = None,
    emit: Callable[[AgentEvent], None] | None = None,
) -> list[ToolResult]:
    """Run `calls` and return their results in the order of `calls`.

    Calls to concurrent tools run at the same time (at most `max_concurrency` at once); a call
    to a tool with ``concurrent=False`` waits for the calls before it, runs alone, and the calls
    after it wait for it. A call to an unknown tool gets an error result listing the tools.
    Cancelling this coroutine cancels every running call (sync tools' threads run on).
    `metadata` and `emit` reach each call's `ToolContext`, and so does the `ExecutionContext`
    that `executions` holds for the call's id.
    """
    check_int(max_concurrency, "`max_concurrency`", minimum=1)
    by_name = _by_name(tools)
    executions = executions or {}
    results: list[ToolResult | None] = [None] * len(calls)
    semaphore = asyncio.Semaphore(max_concurrency)

    async def run(index: int, tool_: Tool) -> None:
        call = calls[index]
        async with semaphore:
            results[index] = await tool_.invoke(
                call.arguments,
                call_id=call.id,
                metadata=metadata,
                execution=executions.get(call.id),
                emit=emit,
            )

    batch: list[tuple[int, Tool]] = []

    async def flush() -> None:
        async with asyncio.TaskGroup() as group:
            for index, tool_ in batch:
                group.create_task(run(index, tool_))
        batch.clear()

    for index, call in enumerate(calls):
        found = by_name.get(call.name)
        if found is None:
            available = ", ".join(f"`{n}`" for n in by_name) or "none"
            results[index] = ToolResult(
                call_id=call.id,
                name=call.name,
                content=f"unknown tool `{call.name}`; the available tools are: {available}",
                is_error=True,
            )
        elif found.concurrent:
            batch.append((index, found))
        else:
            await flush()
            await run(index, found)
    await flush()
    return [r for r in results if r is not None]


def _by_name(tools: Mapping[str, Tool] | Sequence[Tool]) -> Mapping[str, Tool]:
    if isinstance(tools, Mapping):
        return tools
    by_name: dict[str, Tool] = {}
    for t in tools:
        if not isinstance(t, Tool):
            raise ConfigError(
                f"`tools` must hold `Tool` values, got {type(t).__name__}; "
                "decorate the function with `@loomctx.tool`"
            )
        if t.name in by_name:
            raise ConfigError(f"two tools are named `{t.name}`; tool names must be unique")
        by_name[t.name] = t
    return by_name

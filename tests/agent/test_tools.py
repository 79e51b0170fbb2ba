"""Tools: schemas from type hints and docstrings, validation, invocation, running the calls."""

from __future__ import annotations

import asyncio
import enum
import json
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal, Optional

import pytest

from loomctx.agent.tools import Tool, ToolContext, ToolResult, run_tool_calls, tool
from loomctx.errors import ConfigError, ToolError
from loomctx.messages import Message, ToolCall


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Mixed(enum.Enum):
    A = "a"
    B = 2


@dataclass
class Point:
    x: int
    y: int


def props(t: Tool) -> dict[str, Any]:
    return dict(t.schema()["function"]["parameters"]["properties"])


# ---------------------------------------------------------------------------------------------
# Schemas


def test_scalar_annotations_and_the_full_schema() -> None:
    @tool
    def f(s: str, i: int, x: float, b: bool, n: None) -> None:
        """Do things."""

    assert f.schema() == {
        "type": "function",
        "function": {
            "name": "f",
            "description": "Do things.",
            "parameters": {
                "type": "object",
                "properties": {
                    "s": {"type": "string"},
                    "i": {"type": "integer"},
                    "x": {"type": "number"},
                    "b": {"type": "boolean"},
                    "n": {"type": "null"},
                },
                "required": ["s", "i", "x", "b", "n"],
                "additionalProperties": False,
            },
        },
    }


def test_container_annotations() -> None:
    @tool
    def f(a: list[str], t: tuple[int, ...], d: dict[str, float], nested: list[dict[str, bool]]):
        pass

    assert props(f) == {
        "a": {"type": "array", "items": {"type": "string"}},
        "t": {"type": "array", "items": {"type": "integer"}},
        "d": {"type": "object", "additionalProperties": {"type": "number"}},
        "nested": {
            "type": "array",
            "items": {"type": "object", "additionalProperties": {"type": "boolean"}},
        },
    }


def test_literal_and_enum_annotations() -> None:
    @tool
    def f(
        mode: Literal["a", "b"], n: Literal[1, 2], mixed: Literal["x", 1], c: Color, lv: Level
    ) -> None:
        pass

    assert props(f) == {
        "mode": {"type": "string", "enum": ["a", "b"]},
        "n": {"type": "integer", "enum": [1, 2]},
        "mixed": {"enum": ["x", 1]},
        "c": {"type": "string", "enum": ["red", "blue"]},
        "lv": {"type": "integer", "enum": [1, 2]},
    }


def test_optional_and_union_annotations_and_defaults() -> None:
    @tool
    def f(
        a: str | None,
        b: Optional[int] = None,  # noqa: UP045 - Optional is supported too
        c: int | str = 3,
        d: Color | None = Color.RED,
        e: list[int] | None = None,
        f: tuple[str, ...] = ("x",),
        g: bool = False,
    ) -> None:
        pass

    assert props(f) == {
        "a": {"type": ["string", "null"]},
        "b": {"type": ["integer", "null"], "default": None},
        "c": {"type": ["integer", "string"], "default": 3},
        "d": {
            "anyOf": [{"type": "string", "enum": ["red", "blue"]}, {"type": "null"}],
            "default": "red",
        },
        "e": {"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "null"}]}
        | {"default": None},
        "f": {"type": "array", "items": {"type": "string"}, "default": ["x"]},
        "g": {"type": "boolean", "default": False},
    }
    assert f.parameters["required"] == ["a"]


def test_docstring_description_and_args() -> None:
    @tool
    def weather(city: str, units: Literal["c", "f"] = "c", ctx: ToolContext | None = None):
        """Current weather
        for a city.

        More detail that is not part of the description.

        Args:
            city: The city's name,
                e.g. "Lisbon".
            units (str): Celsius or Fahrenheit.

        Returns:
            city: not a parameter; this section is ignored.
        """

    assert weather.description == "Current weather for a city."
    assert props(weather)["city"] == {
        "type": "string",
        "description": 'The city\'s name, e.g. "Lisbon".',
    }
    assert props(weather)["units"] == {
        "type": "string",
        "enum": ["c", "f"],
        "description": "Celsius or Fahrenheit.",
        "default": "c",
    }


def test_description_stops_at_a_section_and_options_override() -> None:
    @tool(name="renamed", description="Custom.", timeout=None, concurrent=False)
    def f(x: int) -> int:
        """Summary.
        Args:
            x: The x.
        """
        return x

    assert (f.name, f.description, f.timeout, f.concurrent) == ("renamed", "Custom.", None, False)
    assert Tool.from_function(f.function).description == "Summary."
    assert props(f)["x"]["description"] == "The x."
    assert f(4) == 4  # the Tool still calls like the function


def test_a_summary_line_ending_in_a_colon_is_not_a_section() -> None:
    @tool
    def f() -> None:
        """Lists the following:
        tables and views.
        """

    assert f.description == "Lists the following: tables and views."


def test_no_docstring_and_the_context_parameter_stays_out_of_the_schema() -> None:
    @tool
    def f(ctx: ToolContext, x: int) -> None:
        pass

    assert f.description == ""
    assert f.context_parameter == "ctx"
    assert list(props(f)) == ["x"]


def test_schema_is_a_fresh_mutable_copy() -> None:
    @tool
    def f(x: int) -> None:
        pass

    schema = f.schema()
    schema["function"]["parameters"]["properties"]["x"]["type"] = "string"
    assert f.schema()["function"]["parameters"]["properties"]["x"] == {"type": "integer"}


# ---------------------------------------------------------------------------------------------
# Decoration errors


def _no_annotation(x):  # type: ignore[no-untyped-def]
    pass


def _var_args(*items: int) -> None:
    pass


def _var_kwargs(**options: int) -> None:
    pass


def _positional_only(x: int, /) -> None:
    pass


def _set(tags: set[str]) -> None:
    pass


def _any(x: Any) -> None:
    pass


def _bare_list(x: list) -> None:  # type: ignore[type-arg]
    pass


def _int_keys(x: dict[int, str]) -> None:
    pass


def _fixed_tuple(x: tuple[int, str]) -> None:
    pass


def _mixed_enum(x: Mixed) -> None:
    pass


def _literal_of_enum(x: Literal[Color.RED]) -> None:
    pass


def _bad_default(x: str = None) -> None:  # type: ignore[assignment]  # noqa: RUF013
    pass


def _non_json_default(x: int = object()) -> None:  # type: ignore[assignment]
    pass


def _documents_a_ghost(x: int) -> None:
    """Do.

    Args:
        x: The x.
        ghost: Not a parameter.
    """


def _unresolvable(x: NotDefinedAnywhere) -> None:  # type: ignore[name-defined]  # noqa: F821
    pass


@pytest.mark.parametrize(
    ("function", "fragments"),
    [
        (_no_annotation, ["`_no_annotation`", "`x`", "no type annotation"]),
        (_var_args, ["`_var_args`", "`*items`", "name each parameter"]),
        (_var_kwargs, ["`_var_kwargs`", "`**options`"]),
        (_positional_only, ["`x`", "positional-only", "remove the `/`"]),
        (_set, ["`tags`", "`set[str]`", "cannot take", "list[X]"]),
        (_any, ["`x`", "`Any`", "cannot take"]),
        (_bare_list, ["`x`", "`list`", "list[X]"]),
        (_int_keys, ["`x`", "dict[int, str]"]),
        (_fixed_tuple, ["`x`", "tuple[int, str]", "tuple[X, ...]"]),
        (_mixed_enum, ["`x`", "Enum `Mixed`", "all strings or all ints"]),
        (_literal_of_enum, ["`x`", "Literal may hold only"]),
        (_bad_default, ["`x`", "default None", "does not fit", "`X | None`"]),
        (_non_json_default, ["`x`", "not JSON"]),
        (_documents_a_ghost, ["`_documents_a_ghost`", "`ghost`", "does not take"]),
        (_unresolvable, ["`_unresolvable`", "NameError", "module level"]),
    ],
)
def test_decoration_errors_name_the_function_and_parameter(
    function: Any, fragments: list[str]
) -> None:
    with pytest.raises(ToolError) as info:
        tool(function)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_invalid_name_and_timeout() -> None:
    def f() -> None:
        pass

    with pytest.raises(ToolError, match="tool name 'bad name'"):
        tool(name="bad name")(f)
    with pytest.raises(ToolError, match=r"tool name 'lookup\\n'"):  # names match exactly
        tool(name="lookup\n")(f)
    with pytest.raises(ToolError, match=r"`timeout` must be .* got 0"):
        tool(timeout=0)(f)
    with pytest.raises(ToolError, match="`timeout`"):
        tool(timeout=True)(f)


# ---------------------------------------------------------------------------------------------
# Validation


@tool
def shape(
    name: str,
    count: int,
    ratio: float = 1.0,
    tags: list[str] | None = None,
    weights: dict[str, float] | None = None,
    mode: Literal["fast", "slow"] = "fast",
    color: Color = Color.RED,
    flag: bool = False,
) -> str:
    """Echo the arguments."""
    return f"{name}:{count}:{ratio!r}:{tags}:{weights}:{mode}:{color}:{flag}"


def test_validate_accepts_and_coerces_only_int_to_float() -> None:
    args = {"name": "n", "count": 2, "ratio": 3, "weights": {"a": 1, "b": 0.5}, "tags": ["x"]}
    out = shape.validate(args)
    assert out == {
        "name": "n",
        "count": 2,
        "ratio": 3.0,
        "weights": {"a": 1.0, "b": 0.5},
        "tags": ["x"],
    }
    assert isinstance(out["ratio"], float)
    assert isinstance(out["weights"]["a"], float)


def test_validate_lists_every_problem() -> None:
    with pytest.raises(ToolError) as info:
        shape.validate(
            {
                "count": True,
                "ratio": "1",
                "tags": ["a", 2],
                "weights": {"k": "heavy"},
                "mode": "medium",
                "color": "green",
                "flag": 1,
                "extra": 1,
            }
        )
    message = str(info.value)
    assert message.splitlines() == [
        "invalid arguments for tool `shape`:",
        "- `name`: missing (required; expected a string)",
        "- `count`: expected an integer, got true (a boolean)",
        '- `ratio`: expected a number, got "1" (a string)',
        "- `tags[1]`: expected a string, got 2 (an integer)",
        '- `weights["k"]`: expected a number, got "heavy" (a string)',
        '- `mode`: expected one of "fast", "slow", got "medium" (a string)',
        '- `color`: expected one of "red", "blue", got "green" (a string)',
        "- `flag`: expected a boolean, got 1 (an integer)",
        "- `extra`: unknown parameter (the parameters are: `name`, `count`, `ratio`, `tags`, "
        "`weights`, `mode`, `color`, `flag`)",
        "Fix these and call the tool again.",
    ]


def test_validate_union_mismatch_and_non_object() -> None:
    with pytest.raises(ToolError, match=r"`tags`: expected an array or null, got 3"):
        shape.validate({"name": "n", "count": 1, "tags": 3})
    with pytest.raises(ToolError, match=r"expected a JSON object, got \[1\] \(an array\)"):
        shape.validate([1])  # type: ignore[arg-type]


def test_validate_anyof_reports_every_alternative() -> None:
    @tool
    def f(c: Color | None) -> None:
        pass

    with pytest.raises(ToolError, match=r'`c`: expected one of "red", "blue" or null, got 1'):
        f.validate({"c": 1})
    assert f.validate({"c": None}) == {"c": None}


# ---------------------------------------------------------------------------------------------
# Invocation


async def test_sync_invocation_converts_enums_and_tuples() -> None:
    seen: dict[str, Any] = {}

    @tool
    def f(
        c: Color,
        t: tuple[Level, ...],
        maybe: Color | None = None,
        m: dict[str, Color] | None = None,
    ):
        seen.update(c=c, t=t, maybe=maybe, m=m)
        return "ok"

    result = await f.invoke(
        {"c": "blue", "t": [1, 2], "maybe": "red", "m": {"k": "red"}}, call_id="c1"
    )
    assert result == ToolResult(call_id="c1", name="f", content="ok", elapsed_ms=result.elapsed_ms)
    assert seen == {
        "c": Color.BLUE,
        "t": (Level.LOW, Level.HIGH),
        "maybe": Color.RED,
        "m": {"k": Color.RED},
    }
    assert result.elapsed_ms >= 0


async def test_list_of_enums_is_converted_and_none_passes_through() -> None:
    seen: list[Any] = []

    @tool
    async def f(cs: list[Color], maybe: Color | None = None) -> None:
        seen.extend([cs, maybe])

    assert (await f.invoke({"cs": ["red"], "maybe": None})).content == ""
    assert seen == [[Color.RED], None]


async def test_async_invocation() -> None:
    @tool
    async def add(a: int, b: int) -> int:
        await asyncio.sleep(0)
        return a + b

    result = await add.invoke({"a": 1, "b": 2})
    assert (result.content, result.is_error) == ("3", False)


async def test_sync_tool_runs_in_a_thread_and_does_not_block_the_loop() -> None:
    """The tool blocks until the event loop has ticked five times while it runs: run on the
    loop's own thread, it would wait out its (generous) timeout instead."""
    threads: list[int] = []
    ticked = threading.Event()

    @tool
    def slow() -> str:
        threads.append(threading.get_ident())
        return "done" if ticked.wait(timeout=60) else "the loop never ran"

    async def ticker() -> None:
        for _ in range(5):
            await asyncio.sleep(0)
        ticked.set()

    task = asyncio.create_task(ticker())
    result = await slow.invoke({})
    await task
    assert result.content == "done"
    assert threads != [threading.get_ident()]


async def test_sync_function_returning_an_awaitable_is_awaited() -> None:
    async def inner() -> str:
        return "inner"

    with pytest.raises(ToolError, match="tool name '<lambda>' is invalid"):
        tool(lambda: inner())
    t = tool(name="lam")(lambda: inner())
    assert (await t.invoke({})).content == "inner"


async def test_output_with_surrogates_is_kept_and_made_valid() -> None:
    """A file read with `errors="surrogateescape"` (or an exception message quoting one)
    holds surrogates: the result is kept, with U+FFFD, and is a valid message."""

    @tool
    def read() -> str:
        return b"caf\xe9 \xf0\x9f\x98\x80".decode("utf-8", "surrogateescape")

    @tool
    def fail() -> str:
        raise ValueError("bad byte \udce9")

    result = await read.invoke({}, call_id="c1")
    assert result.content == "caf\ufffd 😀"
    assert result.to_message() == Message.tool("caf\ufffd 😀", tool_call_id="c1", name="read")
    failed = await fail.invoke({}, call_id="c2")
    assert failed.is_error
    assert failed.content.endswith("ValueError: bad byte \ufffd")
    failed.to_message()


async def test_timeout_becomes_an_error_result() -> None:
    @tool(timeout=0.05)
    async def hang() -> None:
        await asyncio.sleep(10)

    result = await hang.invoke({}, call_id="c")
    assert result.is_error
    assert result.content.startswith("tool `hang` timed out after 0.05 s")


async def test_sync_timeout_becomes_an_error_result() -> None:
    @tool(timeout=0.05)
    def hang() -> None:
        time.sleep(0.3)

    result = await hang.invoke({})
    assert result.is_error
    assert "timed out" in result.content


async def test_exceptions_become_error_results() -> None:
    @tool
    def boom(x: int) -> None:
        raise ValueError(f"bad x {x}")

    @tool
    async def quiet() -> None:
        raise KeyError

    @tool
    async def own_timeout() -> None:
        raise TimeoutError("upstream timed out")

    @tool
    async def self_cancel() -> None:
        raise asyncio.CancelledError

    result = await boom.invoke({"x": 1})
    assert (result.is_error, result.content) == (True, "tool `boom` failed: ValueError: bad x 1")
    assert (await quiet.invoke({})).content == "tool `quiet` failed: KeyError"
    assert (await own_timeout.invoke({})).content == (
        "tool `own_timeout` failed: TimeoutError: upstream timed out"
    )
    assert (await self_cancel.invoke({})).content == "tool `self_cancel` failed: CancelledError"


async def test_invalid_arguments_become_an_error_result() -> None:
    result = await shape.invoke({"name": 1, "count": 1}, call_id="c9")
    assert result.is_error
    assert result.call_id == "c9"
    assert "- `name`: expected a string, got 1 (an integer)" in result.content


async def test_tool_context_is_injected() -> None:
    seen: list[ToolContext] = []

    @tool
    async def f(x: int, ctx: ToolContext) -> None:
        seen.append(ctx)

    meta = {"run_id": "r1"}
    await f.invoke({"x": 1}, call_id="c1", metadata=meta)
    meta["run_id"] = "changed"
    await f.invoke({"x": 1})
    assert seen[0].call_id == "c1"
    assert seen[0].tool_name == "f"
    assert dict(seen[0].metadata) == {"run_id": "r1"}
    assert dict(seen[1].metadata) == {}
    with pytest.raises(TypeError):
        seen[0].metadata["x"] = 1  # type: ignore[index]
    assert dict(ToolContext(call_id="c", tool_name="t").metadata) == {}


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str")


class Custom:
    def __str__(self) -> str:
        return "custom!"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("plain", "plain"),
        (None, ""),
        (3, "3"),
        (2.5, "2.5"),
        (True, "true"),
        ({"a": [1, "é"]}, '{"a":[1,"é"]}'),
        ([1, 2], "[1,2]"),
        ((1, 2), "[1,2]"),
        (Point(x=1, y=2), '{"x":1,"y":2}'),
        ({"p": Custom()}, '{"p":"custom!"}'),
        ({1.5: "float key"}, '{"1.5":"float key"}'),
        ({(1, 2): "tuple key"}, "{(1, 2): 'tuple key'}"),
        (Custom(), "custom!"),
        (Color.RED, "Color.RED"),
    ],
)
async def test_return_values_become_text(value: Any, text: str) -> None:
    @tool
    def f() -> Any:
        return value

    result = await f.invoke({})
    assert (result.content, result.is_error) == (text, False)


async def test_a_return_value_that_cannot_become_text_is_an_error() -> None:
    @tool
    def f() -> Any:
        return Unprintable()

    result = await f.invoke({})
    assert (result.is_error, result.content) == (True, "tool `f` failed: RuntimeError: no str")


def test_to_message() -> None:
    result = ToolResult(call_id="c1", name="f", content="oops", is_error=True, elapsed_ms=1.0)
    assert result.to_message() == Message.tool("oops", tool_call_id="c1", name="f", is_error=True)


# ---------------------------------------------------------------------------------------------
# run_tool_calls


async def test_results_come_in_the_order_of_the_calls() -> None:
    @tool
    async def wait(ms: int) -> int:
        await asyncio.sleep(ms / 1000)
        return ms

    calls = [
        ToolCall(id=f"c{i}", name="wait", arguments={"ms": ms}) for i, ms in enumerate([30, 1, 15])
    ]
    results = await run_tool_calls(calls, [wait])
    assert [(r.call_id, r.content) for r in results] == [("c0", "30"), ("c1", "1"), ("c2", "15")]


async def test_concurrent_calls_overlap() -> None:
    first, second = asyncio.Event(), asyncio.Event()

    @tool
    async def ping() -> str:
        first.set()
        await second.wait()
        return "ping"

    @tool
    async def pong() -> str:
        second.set()
        await first.wait()
        return "pong"

    calls = [ToolCall(id="a", name="ping"), ToolCall(id="b", name="pong")]
    async with asyncio.timeout(2):
        results = await run_tool_calls(calls, {"ping": ping, "pong": pong})
    assert [r.content for r in results] == ["ping", "pong"]


async def test_non_concurrent_calls_run_alone_and_in_order() -> None:
    log: list[str] = []
    running = 0
    peak_during_write = 0

    @tool
    async def read(key: str) -> str:
        nonlocal running
        running += 1
        log.append(f"read {key}")
        await asyncio.sleep(0.01)
        running -= 1
        return key

    @tool(concurrent=False)
    async def write(key: str) -> str:
        nonlocal running, peak_during_write
        running += 1
        peak_during_write = max(peak_during_write, running)
        log.append(f"write {key} start")
        await asyncio.sleep(0.01)
        log.append(f"write {key} end")
        running -= 1
        return key

    calls = [
        ToolCall(id="1", name="read", arguments={"key": "a"}),
        ToolCall(id="2", name="write", arguments={"key": "b"}),
        ToolCall(id="3", name="write", arguments={"key": "c"}),
        ToolCall(id="4", name="read", arguments={"key": "d"}),
    ]
    results = await run_tool_calls(calls, [read, write])
    assert [r.content for r in results] == ["a", "b", "c", "d"]
    assert peak_during_write == 1
    assert log == [
        "read a",
        "write b start",
        "write b end",
        "write c start",
        "write c end",
        "read d",
    ]


async def test_max_concurrency_limits_running_calls() -> None:
    running = peak = 0

    @tool
    async def work() -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1

    calls = [ToolCall(id=f"c{i}", name="work") for i in range(6)]
    await run_tool_calls(calls, [work], max_concurrency=2)
    assert peak == 2


async def test_unknown_tool_gets_an_error_result() -> None:
    @tool
    def known() -> str:
        return "ok"

    calls = [ToolCall(id="a", name="nope"), ToolCall(id="b", name="known")]
    results = await run_tool_calls(calls, [known])
    assert results[0] == ToolResult(
        call_id="a",
        name="nope",
        content="unknown tool `nope`; the available tools are: `known`",
        is_error=True,
    )
    assert results[1].content == "ok"
    empty = await run_tool_calls([ToolCall(id="x", name="nope")], [])
    assert empty[0].content.endswith("the available tools are: none")


async def test_metadata_reaches_the_tool_context() -> None:
    @tool
    def who(ctx: ToolContext) -> str:
        return f"{ctx.call_id}:{ctx.tool_name}:{ctx.metadata['agent']}"

    results = await run_tool_calls([ToolCall(id="c1", name="who")], [who], metadata={"agent": "a"})
    assert results[0].content == "c1:who:a"


async def test_cancellation_propagates_and_leaves_no_tasks() -> None:
    started = asyncio.Event()
    cancelled: list[str] = []

    @tool
    async def forever(name: str) -> None:
        started.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(name)
            raise

    calls = [ToolCall(id=n, name="forever", arguments={"name": n}) for n in ("a", "b")]
    before = asyncio.all_tasks()
    task = asyncio.create_task(run_tool_calls(calls, [forever]))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(cancelled) == ["a", "b"]
    assert asyncio.all_tasks() == before


async def test_run_tool_calls_argument_errors() -> None:
    @tool
    def f() -> None:
        pass

    with pytest.raises(ConfigError, match="`max_concurrency` must be an int >= 1, got 0"):
        await run_tool_calls([], [f], max_concurrency=0)
    with pytest.raises(ConfigError, match="two tools are named `f`"):
        await run_tool_calls([], [f, f])
    with pytest.raises(ConfigError, match="must hold `Tool` values, got function"):
        await run_tool_calls([], [f.function])  # type: ignore[list-item]


def test_schemas_are_json() -> None:
    assert json.loads(json.dumps(shape.schema())) == shape.schema()

"""JSON Schemas from a tool function's type hints and docstring (see `loomctx.agent.tools`).

`compile_type` turns one annotation into its JSON Schema and a converter from the validated
JSON value to what the function expects (an `Enum` member, a tuple); `parse_docstring` reads
the description and the Google-style ``Args:`` section; `json_default` a default's JSON form.
Anything a tool cannot take is a `ToolError` naming the function and the parameter.
"""

from __future__ import annotations

import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, TypeAlias, Union

from loomctx.agent._tool_args import check_value, json_type
from loomctx.errors import ToolError

__all__ = ["SUPPORTED", "Convert", "compile_type", "json_default", "parse_docstring"]

_SECTION: Final = re.compile(
    r"^\s*(Args|Arguments|Parameters|Returns?|Yields?|Raises|Examples?|Notes?|Attributes|"
    r"Warnings?|See Also|Todo):\s*$"
)
_ARGS_SECTION: Final = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_ARG_LINE: Final = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
SUPPORTED: Final = (
    "str, int, float, bool, None, list[X], tuple[X, ...], dict[str, X], Literal[...], an Enum "
    "of str or int values, or a union of these (e.g. `str | None`)"
)

Convert: TypeAlias = Callable[[Any], Any]
"""Turns a validated JSON value into what the function expects (an Enum member, a tuple)."""


_SCALARS: Final[Mapping[Any, str]] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
    None: "null",
}


def _map(convert: Convert | None, wrap: Callable[[Convert], Convert]) -> Convert | None:
    return None if convert is None else wrap(convert)


def compile_type(tp: Any, where: str) -> tuple[dict[str, Any], Convert | None]:
    """The JSON Schema for annotation `tp`, and a converter (None: the JSON value as is)."""
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}, None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = [m.value for m in tp]
        kinds = {json_type(v) for v in values}
        if len(kinds) != 1 or not kinds <= {"string", "integer"}:
            raise ToolError(
                f"{where} is the Enum `{tp.__name__}`, whose values are not all "
                "strings or all ints; give it str or int values, or use Literal[...]"
            )
        return {"type": kinds.pop(), "enum": values}, tp
    if origin is Literal:
        kinds = {json_type(v) for v in args}
        if not kinds <= {"string", "integer", "number", "boolean", "null"}:
            raise ToolError(
                f"{where} is `{tp}`; a tool's Literal may hold only str, int, "
                "float, bool and None values"
            )
        schema: dict[str, Any] = {"type": kinds.pop()} if len(kinds) == 1 else {}
        schema["enum"] = list(args)
        return schema, None
    if origin is list and len(args) == 1:
        items, convert = compile_type(args[0], where)
        return {"type": "array", "items": items}, _map(
            convert, lambda c: lambda v: [c(x) for x in v]
        )
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        items, convert = compile_type(args[0], where)
        inner = convert or (lambda x: x)
        return {"type": "array", "items": items}, lambda v: tuple(inner(x) for x in v)
    if origin is dict and len(args) == 2 and args[0] is str:
        value_schema, convert = compile_type(args[1], where)
        return {"type": "object", "additionalProperties": value_schema}, _map(
            convert, lambda c: lambda v: {k: c(x) for k, x in v.items()}
        )
    if origin in (Union, types.UnionType):
        members = [compile_type(a, where) for a in args]
        schemas = [s for s, _ in members]
        if all(len(s) == 1 and isinstance(s.get("type"), str) for s in schemas):
            union: dict[str, Any] = {"type": [s["type"] for s in schemas]}
        else:
            union = {"anyOf": schemas}
        if all(c is None for _, c in members):
            return union, None

        def convert_union(value: Any) -> Any:
            for schema_, convert_ in members:
                problems: list[str] = []
                check_value(value, schema_, "", problems)
                if not problems:
                    return value if convert_ is None else convert_(value)
            return value  # pragma: no cover - validation ran before conversion

        return union, convert_union
    raise ToolError(
        f"{where} has the annotation `{_type_name(tp)}`, which a tool cannot take; use {SUPPORTED}"
    )


def _type_name(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) and not typing.get_args(tp) else str(tp)


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The first paragraph (lines joined by spaces) and the ``Args:`` descriptions."""
    lines = inspect.cleandoc(doc or "").splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line):
            break
        summary.append(line.strip())
    described: dict[str, str] = {}
    start = next((i for i, line in enumerate(lines) if _ARGS_SECTION.match(line)), None)
    if start is not None:
        header_indent = len(lines[start]) - len(lines[start].lstrip())
        entry_indent: int | None = None
        current: str | None = None
        for line in lines[start + 1 :]:
            if not line.strip():
                continue
            indent = len(line) - len(line.lstrip())
            if indent <= header_indent:
                break  # the next section
            if entry_indent is None:
                entry_indent = indent
            match = _ARG_LINE.match(line.strip())
            if indent == entry_indent and match:
                current = match.group(1).lstrip("*")
                described[current] = match.group(2).strip()
            elif current is not None:
                described[current] = f"{described[current]} {line.strip()}".strip()
    return " ".join(summary), described


def json_default(value: Any, where: str) -> Any:
    """A parameter's default as JSON, or a `ToolError` if it has no JSON form."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, tuple):
        value = list(value)
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ToolError(
            f"{where} has the default {value!r}, which is not JSON ({exc}); "
            "use a JSON value (str, number, bool, None, list or dict) or None"
        ) from exc
    return value

"""What a tool's parameters may be, as JSON Schema: the schema of a type hint and the
converter that turns a validated JSON value into what the function expects, the parameter
descriptions of a Google-style docstring, and the check of a model's arguments against a
schema (every mismatch named by its path, so the model can fix its call). Pure functions
behind `loomctx.agent.tools`."""

from __future__ import annotations

import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, TypeAlias, Union

from loomctx.errors import ToolError

__all__ = [
    "SUPPORTED",
    "Convert",
    "check_object",
    "check_value",
    "described_value",
    "json_default",
    "parse_docstring",
    "schema_of",
    "type_name",
]

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

# ---------------------------------------------------------------------------------------------
# Schemas from type hints


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


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


def schema_of(tp: Any, where: str) -> tuple[dict[str, Any], Convert | None]:
    """The JSON Schema for annotation `tp`, and a converter (None: the JSON value as is)."""
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}, None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = [m.value for m in tp]
        kinds = {_json_type(v) for v in values}
        if len(kinds) != 1 or not kinds <= {"string", "integer"}:
            raise ToolError(
                f"{where} is the Enum `{tp.__name__}`, whose values are not all "
                "strings or all ints; give it str or int values, or use Literal[...]"
            )
        return {"type": kinds.pop(), "enum": values}, tp
    if origin is Literal:
        kinds = {_json_type(v) for v in args}
        if not kinds <= {"string", "integer", "number", "boolean", "null"}:
            raise ToolError(
                f"{where} is `{tp}`; a tool's Literal may hold only str, int, "
                "float, bool and None values"
            )
        schema: dict[str, Any] = {"type": kinds.pop()} if len(kinds) == 1 else {}
        schema["enum"] = list(args)
        return schema, None
    if origin is list and len(args) == 1:
        items, convert = schema_of(args[0], where)
        return {"type": "array", "items": items}, _map(
            convert, lambda c: lambda v: [c(x) for x in v]
        )
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        items, convert = schema_of(args[0], where)
        inner = convert or (lambda x: x)
        return {"type": "array", "items": items}, lambda v: tuple(inner(x) for x in v)
    if origin is dict and len(args) == 2 and args[0] is str:
        value_schema, convert = schema_of(args[1], where)
        return {"type": "object", "additionalProperties": value_schema}, _map(
            convert, lambda c: lambda v: {k: c(x) for k, x in v.items()}
        )
    if origin in (Union, types.UnionType):
        members = [schema_of(a, where) for a in args]
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
        f"{where} has the annotation `{type_name(tp)}`, which a tool cannot take; use {SUPPORTED}"
    )


def type_name(tp: Any) -> str:
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


# ---------------------------------------------------------------------------------------------
# Validation against the schemas built above


_ARTICLE: Final = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "null": "null",
    "array": "an array",
    "object": "an object",
}


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _expected(schema: Mapping[str, Any]) -> str:
    if "anyOf" in schema:
        return " or ".join(_expected(s) for s in schema["anyOf"])
    if "enum" in schema:
        return "one of " + ", ".join(_short(v) for v in schema["enum"])
    kinds = schema.get("type", [])
    return " or ".join(_ARTICLE.get(k, k) for k in ([kinds] if isinstance(kinds, str) else kinds))


def described_value(value: Any) -> str:
    kind = _json_type(value)
    return f"{_short(value)} ({_ARTICLE.get(kind, kind)})"


def _same(a: Any, b: Any) -> bool:
    return _json_type(a) == _json_type(b) and a == b


def check_value(value: Any, schema: Mapping[str, Any], path: str, problems: list[str]) -> Any:
    """`value` checked against `schema`, ints made floats where a number is expected; each
    mismatch is appended to `problems` as a line naming `path`."""
    if "anyOf" in schema:
        attempts: list[list[str]] = []
        for sub in schema["anyOf"]:
            attempts.append([])
            checked = check_value(value, sub, path, attempts[-1])
            if not attempts[-1]:
                return checked
        # If one alternative took the value's shape (a list, say) and only its insides were
        # wrong, those are the problems to report: `tags[1]`, rather than all of `tags`.
        here = f"`{path}`:"
        inside = [a for a in attempts if not any(p.startswith(here) for p in a)]
        if len(inside) == 1:
            problems.extend(inside[0])
            return value
        problems.append(f"`{path}`: expected {_expected(schema)}, got {described_value(value)}")
        return value
    if "enum" in schema:
        if not any(_same(value, option) for option in schema["enum"]):
            problems.append(f"`{path}`: expected {_expected(schema)}, got {described_value(value)}")
        return value
    kinds = schema.get("type")
    allowed = [kinds] if isinstance(kinds, str) else list(kinds or ())
    kind = _json_type(value)
    if allowed and kind not in allowed:
        if kind == "integer" and "number" in allowed:
            return float(value)
        problems.append(f"`{path}`: expected {_expected(schema)}, got {described_value(value)}")
        return value
    if kind == "array" and "items" in schema:
        return [
            check_value(x, schema["items"], f"{path}[{i}]", problems) for i, x in enumerate(value)
        ]
    if kind == "object":
        return check_object(value, schema, path, problems)
    return value


def check_object(
    value: Mapping[str, Any], schema: Mapping[str, Any], path: str, problems: list[str]
) -> dict[str, Any]:
    properties: Mapping[str, Any] = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    out: dict[str, Any] = {}
    for name in schema.get("required", ()):
        if name not in value:
            problems.append(
                f"`{path}{name}`: missing (required; expected {_expected(properties[name])})"
            )
    for key, item in value.items():
        where = f"{path}{key}" if not path else f"{path}[{_short(key)}]"
        if key in properties:
            out[key] = check_value(item, properties[key], where, problems)
        elif isinstance(extra, Mapping):
            out[key] = check_value(item, extra, where, problems)
        elif extra is False:
            names = ", ".join(f"`{n}`" for n in properties) or "none"
            problems.append(f"`{where}`: unknown parameter (the parameters are: {names})")
        else:
            out[key] = item
    return out

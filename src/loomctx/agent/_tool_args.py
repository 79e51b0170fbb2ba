"""Checking a model's arguments against a tool's JSON Schema, with messages for the model.

`check_object` checks the arguments of a call against a tool's schema; each
mismatch becomes a line naming where it is and what was expected instead, so the model can
fix its call. (The schema is built by `loomctx.agent._tool_schema`.)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["check_object", "check_value", "describe", "json_type"]


def json_type(value: Any) -> str:
    """The JSON type of a value: "string", "integer", "array", ... (else its class name)."""
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


def describe(value: Any) -> str:
    kind = json_type(value)
    return f"{_short(value)} ({_ARTICLE.get(kind, kind)})"


def _same(a: Any, b: Any) -> bool:
    return json_type(a) == json_type(b) and a == b


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
        problems.append(f"`{path}`: expected {_expected(schema)}, got {describe(value)}")
        return value
    if "enum" in schema:
        if not any(_same(value, option) for option in schema["enum"]):
            problems.append(f"`{path}`: expected {_expected(schema)}, got {describe(value)}")
        return value
    kinds = schema.get("type")
    allowed = [kinds] if isinstance(kinds, str) else list(kinds or ())
    kind = json_type(value)
    if allowed and kind not in allowed:
        if kind == "integer" and "number" in allowed:
            return float(value)
        problems.append(f"`{path}`: expected {_expected(schema)}, got {describe(value)}")
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

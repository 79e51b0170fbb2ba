"""How providers bill a chat request in tokens: message framing and tool definitions.

Following OpenAI's published accounting for chat models (every counter applies it; for
Claude it is part of the estimate): each message costs `TOKENS_PER_MESSAGE` of framing plus
its role and content, a `name` `TOKENS_PER_NAME` plus the name, each tool call
`TOKENS_PER_TOOL_CALL` plus its function name and JSON arguments, the reply is primed with
`TOKENS_REPLY_PRIMING`, and tool definitions are billed as the TypeScript-like text the
provider renders them into (`render_tool_definitions`) plus `TOKENS_TOOL_DEFINITIONS`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from loomctx.messages import tool_spec

__all__ = [
    "TOKENS_PER_MESSAGE",
    "TOKENS_PER_NAME",
    "TOKENS_PER_TOOL_CALL",
    "TOKENS_REPLY_PRIMING",
    "TOKENS_TOOL_DEFINITIONS",
    "render_tool_definitions",
]

TOKENS_PER_MESSAGE: Final = 3
TOKENS_PER_NAME: Final = 1
TOKENS_PER_TOOL_CALL: Final = 4
TOKENS_REPLY_PRIMING: Final = 3
TOKENS_TOOL_DEFINITIONS: Final = 12


def _ts_type(schema: Mapping[str, Any], indent: str) -> str:
    if "enum" in schema:
        return " | ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(_ts_type({**schema, "type": k}, indent) for k in kind)
    if kind == "array":
        return f"{_ts_type(schema.get('items') or {}, indent)}[]"
    if kind == "object" or "properties" in schema:
        return _ts_object(schema, indent)
    return {"integer": "number", "number": "number", "string": "string", "boolean": "boolean",
            "null": "null"}.get(str(kind), "any")  # fmt: skip


def _ts_object(schema: Mapping[str, Any], indent: str) -> str:
    props: Mapping[str, Any] = schema.get("properties") or {}
    if not props:
        return "object"
    required = set(schema.get("required") or ())
    inner = indent + "  "
    lines = ["{"]
    for key, sub in props.items():
        if sub.get("description"):
            lines.append(f"{inner}// {sub['description']}")
        optional = "" if key in required else "?"
        lines.append(f"{inner}{key}{optional}: {_ts_type(sub, inner)},")
    lines.append(indent + "}")
    return "\n".join(lines)


def render_tool_definitions(tools: Sequence[Mapping[str, Any]]) -> str:
    """Tool schemas rendered as the `namespace functions` text that OpenAI-style chat models
    receive; `count_messages` bills this text. Accepts OpenAI and Anthropic tool formats."""
    out = ["# Tools", "", "## functions", "", "namespace functions {", ""]
    for tool in tools:
        name, description, params = tool_spec(tool)
        if description:
            out.append(f"// {description}")
        if params.get("properties"):
            out.append(f"type {name} = (_: {_ts_object(params, '')}) => any;")
        else:
            out.append(f"type {name} = () => any;")
        out.append("")
    out.append("} // namespace functions")
    return "\n".join(out)

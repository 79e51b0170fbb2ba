"""Tool definitions in each provider's shape: OpenAI function tools, Anthropic tools."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from loom.errors import ConfigError


def _spec(tool: Mapping[str, Any]) -> tuple[str, str, Mapping[str, Any]]:
    """(name, description, JSON schema) of an OpenAI function tool or an Anthropic tool."""
    spec = tool["function"] if tool.get("type") == "function" else tool
    name = spec.get("name") if isinstance(spec, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ConfigError(
            f"a tool definition has no `name`: {json.dumps(tool, default=str)[:120]!r}; use "
            'OpenAI\'s {"type": "function", "function": {"name", "description", "parameters"}} '
            'or Anthropic\'s {"name", "description", "input_schema"}'
        )
    schema = spec.get("parameters", spec.get("input_schema")) or {
        "type": "object",
        "properties": {},
    }
    return name, str(spec.get("description") or ""), schema


def openai_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tools as OpenAI function tools; OpenAI-style definitions pass through unchanged."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        kind = tool.get("type")
        if kind == "function":
            _spec(tool)  # checks that it has a name
            out.append(dict(tool))
        elif kind is not None and "input_schema" not in tool:
            out.append(dict(tool))  # another OpenAI tool type: the API decides
        else:
            name, description, schema = _spec(tool)
            function: dict[str, Any] = {"name": name, "parameters": dict(schema)}
            if description:
                function["description"] = description
            out.append({"type": "function", "function": function})
    return out


def anthropic_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tools as Anthropic tools; Anthropic-style definitions (and server tools, which carry
    their own `type`) pass through unchanged."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        name, description, schema = _spec(tool)  # also checks that it has a name
        if tool.get("type") != "function":
            out.append(dict(tool))
            continue
        converted: dict[str, Any] = {"name": name, "input_schema": dict(schema)}
        if description:
            converted["description"] = description
        out.append(converted)
    return out

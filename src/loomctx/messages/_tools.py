"""Tool definitions: reading OpenAI's and Anthropic's formats, and converting between them."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from loomctx.errors import ConfigError

__all__ = ["to_anthropic_tools", "to_openai_tools", "tool_spec"]


def tool_spec(tool: Mapping[str, Any]) -> tuple[str, str, Mapping[str, Any]]:
    """(name, description, JSON schema) of a tool definition in OpenAI's function format
    (chat completions' or the Responses API's flat one) or Anthropic's format; `ConfigError`
    when it has no name."""
    if not isinstance(tool, Mapping):
        raise ConfigError(
            f"a tool definition must be a JSON object, got {type(tool).__name__} {tool!r:.60}; "
            'use OpenAI\'s {"type": "function", "function": {"name", "description", '
            '"parameters"}} or Anthropic\'s {"name", "description", "input_schema"}'
        )
    nested = tool.get("type") == "function" and "function" in tool  # else Responses' flat form
    spec = tool.get("function") if nested else tool
    if not isinstance(spec, Mapping):
        raise ConfigError(
            f"a function tool's `function` must be a JSON object with `name`, `description` and "
            f"`parameters`, got {type(spec).__name__} {spec!r:.60}"
        )
    name = spec.get("name")
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
    if not isinstance(schema, Mapping):
        raise ConfigError(
            f"the tool `{name}`'s parameters must be a JSON schema object, got "
            f"{type(schema).__name__} {schema!r:.60}"
        )
    return name, str(spec.get("description") or ""), schema


def to_openai_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tools as OpenAI chat-completions function tools; chat-style definitions pass through
    unchanged, the Responses API's flat function tools are nested as chat's."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        kind = tool.get("type")
        if kind == "function" and "function" not in tool:
            tool_spec(tool)  # checks that it has a name
            keys = ("name", "description", "parameters", "strict")
            flat = {k: tool[k] for k in keys if tool.get(k) is not None}
            out.append({"type": "function", "function": flat})
        elif kind == "function":
            tool_spec(tool)  # checks that it has a name
            out.append(dict(tool))
        elif kind is not None and "input_schema" not in tool:
            out.append(dict(tool))  # another OpenAI tool type: the API decides
        else:
            name, description, schema = tool_spec(tool)
            function: dict[str, Any] = {"name": name, "parameters": dict(schema)}
            if description:
                function["description"] = description
            out.append({"type": "function", "function": function})
    return out


def to_anthropic_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tools as Anthropic tools; Anthropic-style definitions (and server tools, which carry
    their own `type`) pass through unchanged."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        name, description, schema = tool_spec(tool)  # also checks that it has a name
        if tool.get("type") != "function":
            out.append(dict(tool))
            continue
        converted: dict[str, Any] = {"name": name, "input_schema": dict(schema)}
        if description:
            converted["description"] = description
        out.append(converted)
    return out

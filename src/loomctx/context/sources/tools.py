"""Tool definitions, offered on demand: the tools relevant to the query first.

`ToolSource` takes tool schemas in the OpenAI format
(``{"type": "function", "function": {"name", "description", "parameters"}}``) or the Anthropic
format (``{"name", "description", "input_schema"}``) and offers one `tools` block per tool.
When they do not all fit, the window keeps those most relevant to the query: a block's priority
is 1.0 for a tool named in `always`, else ``0.5 + 0.5 * relevance``, where relevance is the
share of the query's terms found in the tool's name, description and parameter names and
descriptions. The renderer lays the kept tools out in the order they were given (their
`sequence`), so the tool list stays byte-stable for prompt caching while the same tools are
kept.

Everything that does not change between builds (the relevance terms of each tool, its rendered
text and, per token counter, its token count) is computed once, so `collect` costs a term
intersection per tool.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from loomctx.context.block import BuildContext, ContextBlock, TokenBudget
from loomctx.context.sources._common import check_source, fit_ceiling, short
from loomctx.errors import ConfigError
from loomctx.messages import tool_spec
from loomctx.text import coverage, terms
from loomctx.tokens import TokenCounter, render_tool_definitions

__all__ = ["ToolSource"]

_FORMATS: Final = (
    'OpenAI\'s {"type": "function", "function": {"name", "description", "parameters"}} or '
    'Anthropic\'s {"name", "description", "input_schema"}'
)
# `getWeather` -> `get Weather`, so that camel-case identifiers match query words.
_CAMEL: Final = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


@dataclass(frozen=True, slots=True, kw_only=True)
class _Tool:
    index: int
    name: str
    schema: Mapping[str, Any]
    rendered: str
    terms: frozenset[str]


def _schema_words(schema: Mapping[str, Any], out: list[str]) -> None:
    """Collect the property names and descriptions of a JSON schema, nested ones included."""
    props = schema.get("properties")
    if isinstance(props, Mapping):
        for key, sub in props.items():
            out.append(_CAMEL.sub(" ", str(key)))
            if isinstance(sub, Mapping):
                out.append(str(sub.get("description") or ""))
                _schema_words(sub, out)
    items = schema.get("items")
    if isinstance(items, Mapping):
        _schema_words(items, out)


def _parse(index: int, tool: object) -> _Tool:
    if not isinstance(tool, Mapping):
        raise ConfigError(
            f"`tools[{index}]` must be a dict, got {type(tool).__name__} {short(tool)}; use "
            f"{_FORMATS}"
        )
    try:
        name, description, params = tool_spec(tool)
        rendered = render_tool_definitions([tool])
    except ConfigError as exc:
        raise ConfigError(f"`tools[{index}]`: {exc}") from exc
    except (AttributeError, TypeError) as exc:
        raise ConfigError(
            f"`tools[{index}]` is not a valid tool schema ({exc}): {short(tool)}; use {_FORMATS}, "
            "with a JSON Schema object as `parameters` / `input_schema`"
        ) from exc
    words = [_CAMEL.sub(" ", name), description]
    _schema_words(params, words)
    return _Tool(
        index=index,
        name=name,
        schema=tool,
        rendered=rendered,
        terms=frozenset(terms("\n".join(words))),
    )


class ToolSource:
    """Tool schemas as `tools` blocks, the tools relevant to the query first.

    `tools` are OpenAI- or Anthropic-style schemas with unique names; `always` names tools that
    are offered at priority 1.0 whatever the query. Each block carries the schema as given
    (`tool`), the tool's name (`content`), its index in `tools` (`sequence`), the tokens it adds
    to the rendered tool definitions (`token_count`) and ``{"tool": name, "relevance": r}``.
    Blocks come in descending priority (ties in the given order) and are never truncatable;
    those that would exceed `budget.ceiling` are left out.
    """

    __slots__ = ("_always", "_measured", "_tools", "name", "priority")

    def __init__(
        self,
        tools: Sequence[Mapping[str, Any]],
        *,
        name: str = "tools",
        priority: float = 0.9,
        always: Iterable[str] = (),
    ) -> None:
        self.name, self.priority = check_source("ToolSource", name, priority)
        if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Sequence):
            raise ConfigError(
                f"`tools` must be a list of tool schemas, got {type(tools).__name__} "
                f"{short(tools)}; wrap a single tool in a list"
            )
        parsed: list[_Tool] = []
        seen: dict[str, int] = {}
        for index, tool in enumerate(tools):
            entry = _parse(index, tool)
            if entry.name in seen:
                raise ConfigError(
                    f"`tools[{index}]` is named {entry.name!r}, like `tools[{seen[entry.name]}]`; "
                    "tool names must be unique: rename or remove one of them"
                )
            seen[entry.name] = index
            parsed.append(entry)
        if isinstance(always, str):
            raise ConfigError(
                f"`always` must be a list of tool names, got the string {always!r}; "
                f"write `always=[{always!r}]`"
            )
        names = tuple(always)  # may be a one-shot iterator
        for tool_name in names:
            if tool_name not in seen:
                known = ", ".join(f"`{n}`" for n in seen) or "none"
                raise ConfigError(
                    f"`always` names {tool_name!r}, which is not one of the tools ({known}); "
                    "fix the name or add the tool to `tools`"
                )
        self._tools: tuple[_Tool, ...] = tuple(parsed)
        self._always = frozenset(names)
        self._measured: tuple[TokenCounter, tuple[int, ...]] | None = None

    def _token_counts(self, counter: TokenCounter) -> tuple[int, ...]:
        """Each tool's tokens in the rendered definitions, measured once per counter."""
        if self._measured is None or self._measured[0] is not counter:
            base = counter.count(render_tool_definitions([]))
            counts = tuple(counter.count(t.rendered) - base for t in self._tools)
            self._measured = (counter, counts)
        return self._measured[1]

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> list[ContextBlock]:
        """One block per tool, the most relevant to `query` first, within `budget.ceiling`."""
        counts = self._token_counts(ctx.counter)
        wanted = frozenset(terms(query))
        blocks: list[ContextBlock] = []
        for tool in self._tools:
            relevance = coverage(wanted, tool.terms)
            blocks.append(
                ContextBlock(
                    source=self.name,
                    section="tools",
                    content=tool.name,
                    token_count=counts[tool.index],
                    priority=1.0 if tool.name in self._always else 0.5 + 0.5 * relevance,
                    truncatable=False,
                    tool=tool.schema,
                    sequence=tool.index,
                    id=f"{self.name}:{tool.name}",
                    metadata={"tool": tool.name, "relevance": relevance},
                )
            )
        blocks.sort(key=lambda b: -b.priority)  # stable: ties keep the given order
        return fit_ceiling(blocks, budget.ceiling, ctx.counter)

"""What the providers share: tool schema conversion, tool-call assembly, backoff."""

from __future__ import annotations

from typing import Any

import pytest

from loomctx.agent.llm import ToolCallDelta
from loomctx.agent.providers import _base
from loomctx.agent.providers._assembly import ToolCallAssembler
from loomctx.agent.providers._base import _provider_message, backoff
from loomctx.errors import ConfigError, ProviderError
from loomctx.messages import ToolCall
from loomctx.messages import to_anthropic_tools as anthropic_tools
from loomctx.messages import to_openai_tools as openai_tools

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}
OPENAI_STYLE = {
    "type": "function",
    "function": {"name": "search", "description": "Search.", "parameters": SCHEMA},
}
ANTHROPIC_STYLE = {"name": "search", "description": "Search.", "input_schema": SCHEMA}


def test_tools_convert_both_ways_and_pass_their_own_style_through() -> None:
    assert openai_tools([ANTHROPIC_STYLE]) == [OPENAI_STYLE]
    assert openai_tools([OPENAI_STYLE]) == [OPENAI_STYLE]
    assert anthropic_tools([OPENAI_STYLE]) == [ANTHROPIC_STYLE]
    assert anthropic_tools([ANTHROPIC_STYLE]) == [ANTHROPIC_STYLE]


def test_a_tool_without_schema_or_description_gets_an_empty_object_schema() -> None:
    empty = {"type": "object", "properties": {}}
    assert openai_tools([{"name": "now"}]) == [
        {"type": "function", "function": {"name": "now", "parameters": empty}}
    ]
    assert anthropic_tools([{"type": "function", "function": {"name": "now"}}]) == [
        {"name": "now", "input_schema": empty}
    ]


def test_other_tool_types_pass_through_for_the_api_to_judge() -> None:
    server_tool = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
    assert anthropic_tools([server_tool]) == [server_tool]
    custom = {"type": "custom", "custom": {"name": "grammar"}}
    assert openai_tools([custom]) == [custom]


@pytest.mark.parametrize(
    "tool", [{"description": "no name"}, {"type": "function", "function": {"name": ""}}]
)
def test_a_tool_without_a_name_is_a_config_error(tool: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="a tool definition has no `name`"):
        openai_tools([tool])
    with pytest.raises(ConfigError, match="a tool definition has no `name`"):
        anthropic_tools([tool])


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [("", {}), ("  ", {}), ('{"a": 1}', {"a": 1}), ("[1]", None), ('"a"', None), ("{", None)],
)
def test_refused_arguments_make_an_invalid_call_not_an_error(
    raw: str, parsed: dict[str, Any] | None
) -> None:
    tools = ToolCallAssembler()
    tools.add(0, id="c1", name="f", fragment=raw)
    calls, invalid = tools.finish("model")
    assert calls == [ToolCall(id="c1", name="f", arguments=parsed or {})]
    assert invalid == ([] if parsed is not None else [("c1", raw)])


def test_an_invalid_call_keeps_its_text_made_valid_and_the_next_call_is_read() -> None:
    tools = ToolCallAssembler()
    tools.add(0, id="c1", name="f", fragment='{"a": NaN, "b": "\ud800"}')
    tools.add(1, id="c2", name="g", fragment='{"b": 2}')
    calls, invalid = tools.finish("model")
    assert [c.arguments for c in calls] == [{}, {"b": 2}]
    assert invalid == [("c1", '{"a": NaN, "b": "\ufffd"}')]


def test_assembler_keeps_the_first_id_and_name_when_servers_repeat_them() -> None:
    tools = ToolCallAssembler()
    assert not tools
    first = tools.add(0, id="c1", name="f", fragment='{"a"')
    again = tools.add(0, id="c1", name="f", fragment=": 1}")
    assert first == ToolCallDelta(index=0, id="c1", name="f", arguments='{"a"')
    assert again == ToolCallDelta(index=0, arguments=": 1}")
    assert tools
    assert tools.finish("x") == ([ToolCall(id="c1", name="f", arguments={"a": 1})], [])


def test_assembler_orders_calls_by_index_and_needs_names() -> None:
    tools = ToolCallAssembler()
    tools.add(1, id="b", name="g", fragment="")
    tools.add(0, id="a", name="f", fragment="")
    calls, invalid = tools.finish("x")
    assert [c.id for c in calls] == ["a", "b"]
    assert invalid == []
    nameless = ToolCallAssembler()
    nameless.add(0, id="a", name=None, fragment="{}")
    with pytest.raises(ProviderError, match="`x` streamed tool call 0 \\(`a`\\) without"):
        nameless.finish("x")


def test_backoff_grows_with_jitter_and_a_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_base, "INITIAL_BACKOFF", 0.5)
    for retry, full in [(1, 0.5), (2, 1.0), (3, 2.0), (10, 8.0)]:
        delays = {backoff(retry) for _ in range(20)}
        assert all(0.75 * full <= d <= full for d in delays)
        assert len(delays) > 1  # jittered


class _Bare(Exception):
    pass


class _WithBody(Exception):
    def __init__(self, body: object, message: str | None = None) -> None:
        super().__init__("as text")
        self.body = body
        self.message = message


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (_WithBody({"error": {"message": "inner"}}), "inner"),
        (_WithBody({"message": "flat"}), "flat"),
        (_WithBody("not a mapping", message="from .message"), "from .message"),
        (_WithBody({"error": {"code": 1}}), "as text"),
        (_Bare(), "_Bare"),
    ],
)
def test_the_providers_message_is_found_wherever_the_sdk_put_it(exc: Exception, text: str) -> None:
    assert _provider_message(exc) == text

"""`ToolSource`: one block per tool, the tools relevant to the query first, within the ceiling."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomctx import ConfigError, TiktokenCounter
from loomctx.context.block import BuildContext, ContextBlock, TokenBudget
from loomctx.context.sources import ToolSource
from loomctx.tokens import HeuristicCounter, render_tool_definitions

COUNTER = TiktokenCounter()
CTX = BuildContext(counter=COUNTER)
ROOMY = TokenBudget(tokens=1000, ceiling=4000)

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather and the forecast for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SQL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "run_sql",
        "description": "Run a read-only SQL query against the orders database.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "One SELECT statement"},
                "limit": {"type": "integer", "description": "Maximum rows to return"},
            },
            "required": ["query"],
        },
    },
}
EMAIL: dict[str, Any] = {  # Anthropic format
    "name": "sendEmail",
    "description": "Send an email message to a recipient.",
    "input_schema": {
        "type": "object",
        "properties": {
            "to": {"type": "string", "description": "Recipient address"},
            "subject": {"type": "string"},
            "body": {"type": "string", "description": "Plain text"},
        },
        "required": ["to", "body"],
    },
}
TOOLS = [WEATHER, SQL, EMAIL]


def names(blocks: list[ContextBlock]) -> list[str]:
    return [b.content for b in blocks]


async def test_a_sql_query_prefers_the_sql_tool() -> None:
    blocks = await ToolSource(TOOLS).collect(
        "How many orders did we get last week? Query the database.", ROOMY, ctx=CTX
    )
    assert names(blocks) == ["run_sql", "get_weather", "sendEmail"]
    sql = blocks[0]
    assert sql.metadata["tool"] == "run_sql"
    assert sql.metadata["relevance"] > 0
    assert sql.priority == 0.5 + 0.5 * sql.metadata["relevance"]
    assert [b.priority for b in blocks[1:]] == [0.5, 0.5]


async def test_weather_and_email_queries_prefer_their_tools() -> None:
    source = ToolSource(TOOLS)
    weather = await source.collect("Will it rain in Paris tomorrow? forecast", ROOMY, ctx=CTX)
    assert names(weather)[0] == "get_weather"
    email = await source.collect("Send an email to Bob about the invoice", ROOMY, ctx=CTX)
    assert names(email)[0] == "sendEmail"  # camel case splits into "send" and "email"


async def test_block_fields() -> None:
    blocks = await ToolSource(TOOLS).collect("", ROOMY, ctx=CTX)
    base = COUNTER.count(render_tool_definitions([]))
    # No relevant terms: every tool at 0.5, in the given order.
    assert names(blocks) == ["get_weather", "run_sql", "sendEmail"]
    for index, (block, tool) in enumerate(zip(blocks, TOOLS, strict=True)):
        assert block.source == "tools"
        assert block.section == "tools"
        assert block.tool is tool
        assert block.sequence == index
        assert block.id == f"tools:{block.content}"
        assert not block.truncatable
        assert not block.pinned
        assert block.priority == 0.5
        assert block.metadata == {"tool": block.content, "relevance": 0.0}
        assert block.token_count == COUNTER.count(render_tool_definitions([tool])) - base
    # The per-tool counts add up to the rendered definitions of all of them.
    assert (
        sum(b.token_count for b in blocks) == COUNTER.count(render_tool_definitions(TOOLS)) - base
    )


async def test_always_tools_come_first_at_full_priority() -> None:
    source = ToolSource(TOOLS, always=["sendEmail"])
    blocks = await source.collect("SQL for the orders of yesterday", ROOMY, ctx=CTX)
    assert names(blocks) == ["sendEmail", "run_sql", "get_weather"]
    assert 0.5 < blocks[1].priority < 1.0
    assert blocks[0].priority == 1.0
    assert blocks[0].metadata["relevance"] == 0.0


async def test_nested_parameter_descriptions_count_toward_relevance() -> None:
    nested = {
        "name": "book",
        "description": "Make a reservation.",
        "input_schema": {
            "type": "object",
            "properties": {
                "guests": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"dietary": {"description": "Vegetarian or vegan"}},
                    },
                },
            },
        },
    }
    blocks = await ToolSource([WEATHER, nested]).collect("vegan dinner", ROOMY, ctx=CTX)
    assert names(blocks) == ["book", "get_weather"]
    assert blocks[0].metadata["relevance"] == 0.5


async def test_tools_beyond_the_ceiling_are_left_out_first_fit() -> None:
    source = ToolSource(TOOLS)
    whole = await source.collect("sql orders database", ROOMY, ctx=CTX)
    sql, weather, email = whole
    assert weather.token_count > email.token_count
    ceiling = sql.token_count + email.token_count
    blocks = await source.collect(
        "sql orders database", TokenBudget(tokens=0, ceiling=ceiling), ctx=CTX
    )
    # The weather tool does not fit in what is left; the smaller email tool after it does.
    assert names(blocks) == ["run_sql", "sendEmail"]
    assert await source.collect("sql", TokenBudget(tokens=0, ceiling=0), ctx=CTX) == []


async def test_token_counts_follow_the_builds_counter() -> None:
    source = ToolSource(TOOLS)
    exact = await source.collect("", ROOMY, ctx=CTX)
    estimate = HeuristicCounter()
    rough = await source.collect("", ROOMY, ctx=BuildContext(counter=estimate))
    base = estimate.count(render_tool_definitions([]))
    assert [b.token_count for b in rough] == [
        estimate.count(render_tool_definitions([t])) - base for t in TOOLS
    ]
    assert [b.token_count for b in rough] != [b.token_count for b in exact]
    again = await source.collect("", ROOMY, ctx=CTX)
    assert again == exact


async def test_no_tools_no_blocks() -> None:
    assert await ToolSource([]).collect("anything", ROOMY, ctx=CTX) == []


@given(st.integers(min_value=0, max_value=200), st.sampled_from(["", "sql", "weather email"]))
async def test_never_more_than_the_ceiling(ceiling: int, query: str) -> None:
    blocks = await ToolSource(TOOLS).collect(query, TokenBudget(tokens=0, ceiling=ceiling), ctx=CTX)
    assert sum(b.token_count for b in blocks) <= ceiling
    priorities = [b.priority for b in blocks]
    assert priorities == sorted(priorities, reverse=True)


def test_tools_must_be_a_list() -> None:
    for bad in (WEATHER, "get_weather", 3):
        with pytest.raises(ConfigError) as err:
            ToolSource(bad)  # type: ignore[arg-type]
        assert "`tools` must be a list of tool schemas" in str(err.value)
        assert "wrap a single tool in a list" in str(err.value)


def test_each_tool_must_be_a_dict() -> None:
    with pytest.raises(ConfigError) as err:
        ToolSource([WEATHER, "run_sql"])  # type: ignore[list-item]
    message = str(err.value)
    assert "`tools[1]` must be a dict, got str 'run_sql'" in message
    assert "input_schema" in message


def test_a_tool_without_a_name_is_rejected_with_its_index() -> None:
    with pytest.raises(ConfigError) as err:
        ToolSource([WEATHER, {"type": "function", "function": {"description": "x"}}])
    message = str(err.value)
    assert message.startswith("`tools[1]`: a tool definition has no `name`")
    assert '"description": "x"' in message


def test_a_malformed_schema_is_rejected() -> None:
    with pytest.raises(ConfigError) as err:
        ToolSource([{"name": "t", "input_schema": ["not", "a", "schema"]}])
    message = str(err.value)
    assert message.startswith("`tools[0]`: the tool `t`'s parameters must be a JSON schema object")
    assert "got list" in message
    with pytest.raises(ConfigError) as err:
        ToolSource([{"type": "function", "function": "get_weather"}])
    assert str(err.value).startswith("`tools[0]`: a function tool's `function` must be a JSON")


def test_duplicate_tool_names_are_rejected() -> None:
    with pytest.raises(ConfigError) as err:
        ToolSource([WEATHER, SQL, {"name": "get_weather", "description": "again"}])
    message = str(err.value)
    assert "`tools[2]` is named 'get_weather', like `tools[0]`" in message
    assert "must be unique" in message


def test_always_must_name_known_tools() -> None:
    with pytest.raises(ConfigError) as err:
        ToolSource(TOOLS, always=["run_sql", "search_web"])
    message = str(err.value)
    assert "`always` names 'search_web'" in message
    assert "`get_weather`, `run_sql`, `sendEmail`" in message
    with pytest.raises(ConfigError) as err:
        ToolSource([], always=iter(["x"]))
    assert "(none)" in str(err.value)


def test_always_must_not_be_a_single_string() -> None:
    with pytest.raises(ConfigError) as err:
        ToolSource(TOOLS, always="run_sql")
    assert "write `always=['run_sql']`" in str(err.value)


def test_always_may_be_a_one_shot_iterator() -> None:
    source = ToolSource(TOOLS, always=iter(["run_sql"]))
    assert source.name == "tools"


async def test_odd_but_renderable_schemas_are_accepted() -> None:
    # The renderer stops at `enum`; the relevance walk must not trip over what lies below it.
    odd = {
        "name": "pick",
        "description": "Pick a colour.",
        "input_schema": {
            "type": "object",
            "properties": {"colour": {"enum": ["red", "blue"], "properties": {"hue": 7}}},
        },
    }
    (block,) = await ToolSource([odd]).collect("colour hue", ROOMY, ctx=CTX)
    assert block.metadata["relevance"] == 1.0  # `hue` is a property name, however odd

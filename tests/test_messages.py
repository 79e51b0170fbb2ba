"""Tests for `loomctx.messages`: the model, both wire formats, and tool units."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomctx.errors import ConfigError, MessageFormatError
from loomctx.messages import (
    Message,
    MessageUnit,
    ToolCall,
    flatten_units,
    from_anthropic,
    from_openai,
    parse_arguments,
    split_units,
    to_anthropic,
    to_openai,
    valid_text,
)
from tests.strategies import histories, messages, tool_calls

WEATHER = ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris", "days": 2})
TIME = ToolCall(id="call_2", name="get_time", arguments={"tz": "Europe/Paris"})


def raises(match: str) -> pytest.RaisesExc[MessageFormatError]:
    """Expect a `MessageFormatError` whose message contains `match` literally."""
    return pytest.raises(MessageFormatError, match=re.escape(match))


# --- ToolCall -------------------------------------------------------------------------------


def test_tool_call_defaults_to_no_arguments() -> None:
    call = ToolCall(id="c", name="f")
    assert call.arguments == {}
    assert call.arguments_json() == "{}"


def test_arguments_json_is_compact_ordered_and_keeps_non_ascii() -> None:
    call = ToolCall(id="c", name="f", arguments={"b": [1, None, True], "a": "é你😀"})
    assert call.arguments_json() == '{"b":[1,null,true],"a":"é你😀"}'


def test_arguments_json_rejects_what_json_cannot_carry() -> None:
    call = ToolCall(id="call_9", name="f", arguments={"x": {1, 2}})
    with raises("the arguments of tool call `call_9` are not JSON-serializable"):
        call.arguments_json()


def _nested(depth: int) -> dict[str, Any]:
    """An object `depth` levels deep: {"a": {"a": ... {}}}."""
    out: dict[str, Any] = {}
    for _ in range(depth - 1):
        out = {"a": out}
    return out


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ({"x": float("nan")}, "argument `x` of tool call `c9` is nan, which is not JSON"),
        ({"x": [1, {"y": float("-inf")}]}, "argument `x[1].y` of tool call `c9` is -inf"),
        (
            {"x": "ok\udc80"},
            "argument `x` of tool call `c9` holds the surrogate code point '\\udc80' at position 2",
        ),
        ({"k\ud800": 1}, "a key of the arguments of tool call `c9` holds the surrogate"),
        (_nested(65), "the arguments of tool call `c9` nest deeper than 64 levels (at `a.a."),
        (_nested(100_000), "nest deeper than 64 levels"),
    ],
)
def test_tool_calls_refuse_arguments_that_are_not_json(
    arguments: dict[str, Any], match: str
) -> None:
    with raises(match):
        ToolCall(id="c9", name="f", arguments=arguments)


def test_arguments_may_nest_up_to_the_limit() -> None:
    call = ToolCall(id="c", name="f", arguments=_nested(64))
    assert call.arguments_json().count("{") == 64


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", {}),
        ("  ", {}),
        ('{"n": 1.5, "s": "\\ud83d\\ude00"}', {"n": 1.5, "s": "\U0001f600"}),
    ],
)
def test_parse_arguments_reads_json_objects(raw: str, expected: dict[str, Any]) -> None:
    assert parse_arguments(raw) == expected


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        ('{"n": NaN}', "tool call `c1` has `arguments` that are not a valid JSON string (NaN is"),
        ('{"n": -Infinity}', "(-Infinity is not JSON"),
        ('{"n": Infinity}', "(Infinity is not JSON"),
        ("[1]", "tool call `c1` has arguments that are a JSON list, not an object: '[1]'"),
        ('{"s": "\\ud800"}', "argument `s` of tool call `c1` holds the surrogate code point"),
        (json.dumps(_nested(65)), "the arguments of tool call `c1` nest deeper than 64 levels"),
        ("[" * 100_000 + "]" * 100_000, "has `arguments` that nest deeper than 64 levels"),
    ],
)
def test_parse_arguments_refuses_what_providers_would_reject(raw: str, match: str) -> None:
    with raises(match):
        parse_arguments(raw, call_id="c1")


def test_from_openai_refuses_non_finite_arguments() -> None:
    wire = {
        "role": "assistant",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"n": NaN}'}}
        ],
    }
    with raises("OpenAI message 0: tool call `c1` has `arguments` that are not a valid JSON"):
        from_openai([wire])


def test_from_anthropic_refuses_non_finite_arguments() -> None:
    wire = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "c1", "name": "f", "input": {"n": math.inf}}],
    }
    with raises("Anthropic message 0: argument `n` of tool call `c1` is inf"):
        from_anthropic([wire])


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"id": "", "name": "f"}, "a tool call's `id` must be a non-empty string, got ''"),
        ({"id": None, "name": "f"}, "got None"),
        ({"id": "c1", "name": ""}, "tool call `c1` needs a non-empty string `name`, got ''"),
        ({"id": "c1", "name": "f", "arguments": [1]}, "`arguments` of type list"),
    ],
)
def test_tool_call_validation(fields: dict[str, Any], match: str) -> None:
    with raises(match):
        ToolCall(**fields)


def test_messages_with_tool_calls_are_hashable_and_compare_arguments() -> None:
    a = Message.assistant(tool_calls=[WEATHER])
    b = Message.assistant(tool_calls=[dataclasses.replace(WEATHER, arguments={"city": "Rome"})])
    assert hash(a) == hash(b)  # arguments are left out of the hash ...
    assert a != b  # ... but not out of equality
    assert {a: 1}[Message.assistant(tool_calls=[WEATHER])] == 1


# --- Message --------------------------------------------------------------------------------


def test_convenience_constructors() -> None:
    assert Message.system("be brief") == Message(role="system", content="be brief")
    assert Message.user("hi", name="ada") == Message(role="user", content="hi", name="ada")
    assert Message.user("hi").name is None
    assert Message.assistant() == Message(role="assistant", content="")
    assert Message.assistant("ok", tool_calls=[WEATHER], name="bot") == Message(
        role="assistant", content="ok", tool_calls=(WEATHER,), name="bot"
    )
    assert Message.tool("18C", tool_call_id="call_1", name="get_weather", is_error=True) == (
        Message(
            role="tool", content="18C", tool_call_id="call_1", name="get_weather", is_error=True
        )
    )
    assert Message.tool("18C", tool_call_id="call_1").is_error is False


def test_a_list_of_tool_calls_is_stored_as_a_tuple() -> None:
    m = Message(role="assistant", tool_calls=[WEATHER, TIME])  # type: ignore[arg-type]
    assert m.tool_calls == (WEATHER, TIME)
    assert m == Message(role="assistant", tool_calls=(WEATHER, TIME))


def test_messages_are_frozen() -> None:
    m = Message.user("hi")
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.content = "bye"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"role": "bot"}, "unknown role 'bot'; use one of `system`, `user`, `assistant`, `tool`"),
        ({"role": "user", "content": None}, "`content` of a `user` message must be a string"),
        ({"role": "assistant", "tool_calls": [{"id": "c"}]}, "must hold `ToolCall` values"),
        ({"role": "user", "tool_calls": (WEATHER,)}, "a `user` message cannot carry `tool_calls`"),
        ({"role": "tool", "content": "x"}, "a `tool` message needs `tool_call_id`"),
        ({"role": "tool", "tool_call_id": ""}, "a `tool` message needs `tool_call_id`"),
        ({"role": "user", "tool_call_id": "c"}, "a `user` message cannot carry `tool_call_id`"),
        ({"role": "assistant", "is_error": True}, "a `assistant` message cannot set `is_error`"),
    ],
)
def test_message_validation(fields: dict[str, Any], match: str) -> None:
    with raises(match):
        Message(**fields)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (
            lambda: Message.user("caf\udce9!"),
            "the `content` of a `user` message holds the "
            "surrogate code point '\\udce9' at position 3",
        ),
        (lambda: Message.user("hi", name="\ud800"), "the `name` of a `user` message holds"),
        (lambda: Message.tool("ok", tool_call_id="c\udfff"), "the `tool_call_id` of a `tool`"),
        (lambda: ToolCall(id="c\ud800", name="f"), "a tool call's `id` holds the surrogate"),
        (lambda: ToolCall(id="c", name="f\ud800"), "the `name` of tool call `c` holds"),
    ],
)
def test_surrogates_are_refused_where_text_enters(build: Any, match: str) -> None:
    """A surrogate cannot be encoded as UTF-8: refused when the message is built, naming the
    field and the position, instead of a raw `UnicodeEncodeError` in a provider or store."""
    with raises(match):
        build()


def test_valid_text_repairs_surrogates() -> None:
    assert valid_text("plain 文字 😀") == "plain 文字 😀"
    assert valid_text("a\udc80b") == "a\ufffdb"  # a lone surrogate: the replacement char
    assert valid_text("\ud83d\ude00 \ud83d") == "😀 \ufffd"  # a pair: its character
    Message.tool(valid_text("out\udce9"), tool_call_id="c")  # now valid


def test_message_format_error_is_a_config_and_value_error() -> None:
    with pytest.raises(ConfigError) as info:
        Message(role="bot")  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)


# --- OpenAI ---------------------------------------------------------------------------------

HISTORY = [
    Message.system("You are a weather bot."),
    Message.user("Weather and time in Paris?", name="ada"),
    Message.assistant("Let me check.", tool_calls=[WEATHER, TIME]),
    Message.tool("18C, sunny", tool_call_id="call_1", name="get_weather"),
    Message.tool("unknown zone", tool_call_id="call_2", is_error=True),
    Message.assistant("It is 18C and sunny."),
]


def test_to_openai_transcript() -> None:
    assert to_openai(HISTORY) == [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": "Weather and time in Paris?", "name": "ada"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "arguments": '{"city":"Paris","days":2}',
                    },
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": '{"tz":"Europe/Paris"}'},
                },
            ],
        },
        # No `name` on a tool message, no `is_error` anywhere: OpenAI has no such fields.
        {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "unknown zone"},
        {"role": "assistant", "content": "It is 18C and sunny."},
    ]
    json.dumps(to_openai(HISTORY))  # the payload is plain JSON


def test_to_openai_sends_null_content_for_a_tool_call_without_text() -> None:
    [wire] = to_openai([Message.assistant(tool_calls=[WEATHER], name="bot")])
    assert wire["content"] is None
    assert wire["name"] == "bot"
    assert to_openai([Message.assistant()]) == [{"role": "assistant", "content": ""}]


def test_from_openai_real_transcript() -> None:
    # As the API returns it, with fields the model has no place for.
    payload: list[dict[str, Any]] = [
        {"role": "developer", "content": "You are a weather bot."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "annotations": [],
            "tool_calls": [
                {
                    "id": "call_abc",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_abc", "content": '{"temp_c": 18}'},
        {"role": "assistant", "content": "18C.", "refusal": None, "tool_calls": None},
    ]
    assert from_openai(payload) == [
        Message.system("You are a weather bot."),
        Message.user("Weather in Paris?"),
        Message.assistant(
            tool_calls=[ToolCall(id="call_abc", name="get_weather", arguments={"city": "Paris"})]
        ),
        Message.tool('{"temp_c": 18}', tool_call_id="call_abc"),
        Message.assistant("18C."),
    ]


def test_from_openai_content_forms_and_names() -> None:
    parts = [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "世界"}]
    payload: list[dict[str, Any]] = [
        {"role": "user", "content": parts, "name": "ada"},
        {"role": "system", "content": "sys", "name": "ops"},
        {"role": "assistant"},
        {"role": "tool", "tool_call_id": "c", "content": [], "name": "f"},
    ]
    assert from_openai(payload) == [
        Message.user("Hello, 世界", name="ada"),
        Message(role="system", content="sys", name="ops"),
        Message.assistant(""),
        Message.tool("", tool_call_id="c", name="f"),
    ]
    # OpenAI takes `name` on system messages too, so it goes out as it came in.
    assert to_openai([Message(role="system", content="sys", name="ops")]) == [payload[1]]


@pytest.mark.parametrize("arguments", ["", None, "{}"])
def test_from_openai_empty_arguments_mean_no_arguments(arguments: str | None) -> None:
    function: dict[str, Any] = {"name": "f"}
    if arguments is not None:
        function["arguments"] = arguments
    [m] = from_openai(
        [
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "type": "function", "function": function}],
            }
        ]
    )
    assert m.tool_calls == (ToolCall(id="c", name="f", arguments={}),)


def _call(function: Any, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "tool_calls": [{**extra, "function": function}]}


@pytest.mark.parametrize(
    ("message", "match"),
    [
        (
            {"role": "system", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
            "OpenAI message 1: content part 0 has type `image_url`, but this message "
            "carries text only",
        ),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
            "OpenAI message 1: an image's `url` must be an http(s) URL or a base64 data URL",
        ),
        (
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "video"}]},
            "content part 1 has type `video`",
        ),
        ({"role": "user", "content": ["hi"]}, "content part 0 must be a JSON object, got str"),
        ({"role": "user", "content": [{"type": "text"}]}, "text part 0 needs a string `text`"),
        ({"role": "user", "content": 7}, "`content` must be a string or a list of content parts"),
        ({"role": "function", "name": "f", "content": "x"}, "legacy function-calling format"),
        (
            {"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}},
            "send `tool_calls` on the assistant message",
        ),
        ({"content": "x"}, "OpenAI message 1: the message has no `role`"),
        ({"role": "bot", "content": "x"}, "OpenAI message 1: unknown role 'bot'"),
        ({"role": "tool", "content": "x"}, "OpenAI message 1: a `tool` message needs"),
        ({"role": "user", "tool_calls": [{}]}, "a tool call has no `id`"),
        (_call({"name": "f"}, id="c1", type="custom"), "tool call `c1` has type 'custom'"),
        ({"role": "assistant", "tool_calls": [{"id": "c1"}]}, "`function` of tool call `c1` is"),
        (_call([], id="c1"), "`function` of tool call `c1` must be a JSON object, got list"),
        (_call({"arguments": "{}"}, id="c1"), "tool call `c1` needs a non-empty string `name`"),
        (
            _call({"name": "f", "arguments": '{"city": "Par'}, id="c1"),
            "tool call `c1` has `arguments` that are not a valid JSON string",
        ),
        (_call({"name": "f", "arguments": 3}, id="c1"), "tool call `c1` has `arguments`"),
        (
            _call({"name": "f", "arguments": "[1, 2]"}, id="c1"),
            "tool call `c1` has arguments that are a JSON list, not an object: '[1, 2]'",
        ),
        (
            {
                "role": "user",
                "content": "x",
                "tool_calls": [{"id": "c", "function": {"name": "f"}}],
            },
            "OpenAI message 1: a `user` message cannot carry `tool_calls`",
        ),
        ("not a message", "OpenAI message 1: a message must be a JSON object, got str"),
    ],
)
def test_from_openai_errors(message: Any, match: str) -> None:
    with raises(match):
        from_openai([{"role": "user", "content": "first"}, message])


# --- Anthropic ------------------------------------------------------------------------------


def test_to_anthropic_transcript() -> None:
    system, wire = to_anthropic([*HISTORY, Message.user("Thanks!", name="ada")])
    assert system == "You are a weather bot."
    assert wire == [
        {"role": "user", "content": [{"type": "text", "text": "Weather and time in Paris?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {
                    "type": "tool_use",
                    "id": "call_1",
                    "name": "get_weather",
                    "input": {"city": "Paris", "days": 2},
                },
                {
                    "type": "tool_use",
                    "id": "call_2",
                    "name": "get_time",
                    "input": {"tz": "Europe/Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "18C, sunny"},
                {
                    "type": "tool_result",
                    "tool_use_id": "call_2",
                    "content": "unknown zone",
                    "is_error": True,
                },
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "It is 18C and sunny."}],
        },
        {"role": "user", "content": [{"type": "text", "text": "Thanks!"}]},
    ]


def test_to_anthropic_hoists_every_system_message_and_merges_roles() -> None:
    system, wire = to_anthropic(
        [
            Message.system("one"),
            Message.user("a"),
            Message.system(""),  # empty: nothing to hoist
            Message.user(""),  # empty: no block, so skipped
            Message.system("two"),
            Message.user("b"),
            Message.assistant(""),  # neither text nor calls: skipped
            Message.assistant("c"),
            Message.assistant("d", tool_calls=[WEATHER]),
            Message.tool("r", tool_call_id="call_1"),
            Message.user("e"),
        ]
    )
    assert system == "one\n\ntwo"
    assert wire == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "c"},
                {"type": "text", "text": "d"},
                {
                    "type": "tool_use",
                    "id": "call_1",
                    "name": "get_weather",
                    "input": WEATHER.arguments,
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "r"},
                {"type": "text", "text": "e"},
            ],
        },
    ]


def test_to_anthropic_without_system_messages() -> None:
    assert to_anthropic([]) == (None, [])
    assert to_anthropic([Message.system("")]) == (None, [])
    _, [wire] = to_anthropic([Message.assistant(tool_calls=[WEATHER])])
    assert wire["content"] == [
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": WEATHER.arguments}
    ]
    assert wire["content"][0]["input"] is not WEATHER.arguments  # a copy, safe to mutate


def test_from_anthropic_real_transcript() -> None:
    payload: list[dict[str, Any]] = [
        {"role": "user", "content": "Weather in Paris and in Atlantis?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Two lookups.", "signature": "EqQB..."},
                {"type": "text", "text": "Checking ", "citations": None},
                {"type": "text", "text": "both."},
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_02",
                    "name": "get_weather",
                    "input": {"city": "Atlantis"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": [
                        {"type": "text", "text": "18C, "},
                        {"type": "text", "text": "sunny"},
                    ],
                    "cache_control": {"type": "ephemeral"},
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_02",
                    "content": "no such city",
                    "is_error": True,
                },
                {"type": "text", "text": "Be quick."},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "redacted_thinking", "data": "..."},
                {"type": "text", "text": "18C."},
            ],
        },
    ]
    assert from_anthropic(
        payload, system=[{"type": "text", "text": "Be"}, {"type": "text", "text": "nice."}]
    ) == [
        Message.system("Be\n\nnice."),
        Message.user("Weather in Paris and in Atlantis?"),
        Message.assistant(
            "Checking both.",
            tool_calls=[
                ToolCall(id="toolu_01", name="get_weather", arguments={"city": "Paris"}),
                ToolCall(id="toolu_02", name="get_weather", arguments={"city": "Atlantis"}),
            ],
        ),
        Message.tool("18C, sunny", tool_call_id="toolu_01"),
        Message.tool("no such city", tool_call_id="toolu_02", is_error=True),
        Message.user("Be quick."),
        Message.assistant("18C."),
    ]


def test_from_anthropic_system_and_defaults() -> None:
    assert from_anthropic([], system="sys") == [Message.system("sys")]
    assert from_anthropic([], system="") == []
    assert from_anthropic([], system=[]) == []
    assert from_anthropic([{"role": "assistant", "content": "hi"}]) == [Message.assistant("hi")]
    tool_use = {"type": "tool_use", "id": "t1", "name": "f"}  # no `input`: no arguments
    result = {"type": "tool_result", "tool_use_id": "t1"}  # no `content`: empty
    assert from_anthropic(
        [{"role": "assistant", "content": [tool_use]}, {"role": "user", "content": [result]}]
    ) == [
        Message.assistant(tool_calls=[ToolCall(id="t1", name="f")]),
        Message.tool("", tool_call_id="t1"),
    ]


def test_from_anthropic_copies_tool_input() -> None:
    arguments = {"city": "Paris"}
    block = {"type": "tool_use", "id": "t1", "name": "f", "input": arguments}
    [m] = from_anthropic([{"role": "assistant", "content": [block]}])
    arguments["city"] = "Rome"
    assert m.tool_calls[0].arguments == {"city": "Paris"}


@pytest.mark.parametrize(
    ("message", "match"),
    [
        (
            {"role": "user", "content": [{"type": "image", "source": {}}]},
            "Anthropic message 1: image block 0 has a `None` source; Loom carries `base64` and "
            "`url` images",
        ),
        (
            {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "document"}]},
            "Anthropic message 1: content part 1 has type `document`",
        ),
        (
            {"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f"}]},
            "content part 0 has type `tool_use`",
        ),
        (
            {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
            "(here: `text` and `tool_use` parts)",
        ),
        (
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image"}]}
                ],
            },
            "Anthropic message 1: image block 0 needs a `source` object",
        ),
        (
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t",
                        "content": [
                            {"type": "image", "source": {"type": "url", "url": "https://x.io/a"}},
                            {"type": "tool_reference"},
                        ],
                    }
                ],
            },
            "content part 1 has type `tool_reference`",
        ),
        (
            {"role": "user", "content": [{"type": "tool_result", "content": "x"}]},
            "Anthropic message 1: a `tool` message needs `tool_call_id`",
        ),
        (
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t", "content": 5}],
            },
            "`content` of a tool_result must be a string or a list of content parts, got int",
        ),
        (
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "input": {}}]},
            "tool call `t` needs a non-empty string `name`",
        ),
        (
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "x"}],
            },
            "tool call `t` has `arguments` of type str",
        ),
        (
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text"}]},
            "Anthropic message 1: text part 1 needs a string `text`, got None",
        ),
        ({"role": "assistant", "content": [{"type": {}}]}, "content part 0 has type `{}`"),
        ({"role": ["user"], "content": "x"}, "got ['user']"),
        ({"role": "user", "content": None}, "`content` must be a string or a list of blocks"),
        ({"role": "user", "content": ["hi"]}, "content part 0 must be a JSON object, got str"),
        (
            {"role": "system", "content": "x"},
            "Anthropic message 1: `role` must be `user` or `assistant`, got 'system'; "
            "pass the system prompt as `system=`",
        ),
        ({"role": "tool", "content": "x"}, "got 'tool'"),
        (["user", "hi"], "Anthropic message 1: a message must be a JSON object, got list"),
    ],
)
def test_from_anthropic_errors(message: Any, match: str) -> None:
    with raises(match):
        from_anthropic([{"role": "user", "content": "first"}, message])


def test_from_anthropic_rejects_non_text_system_blocks() -> None:
    with raises("Anthropic `system`: content part 1 has type `image`"):
        from_anthropic([], system=({"type": "text", "text": "a"}, {"type": "image"}))
    with raises("Anthropic `system`: `system` must be a string or a list of content parts"):
        from_anthropic([], system=3)  # type: ignore[arg-type]


# --- tool units -----------------------------------------------------------------------------


def test_split_units_groups_calls_with_their_results() -> None:
    units = split_units(HISTORY)
    assert [u.messages for u in units] == [
        (HISTORY[0],),
        (HISTORY[1],),
        (HISTORY[2], HISTORY[3], HISTORY[4]),
        (HISTORY[5],),
    ]
    assert [u.is_tool_unit for u in units] == [False, False, True, False]
    assert flatten_units(units) == HISTORY
    assert split_units([]) == []


def test_message_units_are_never_empty() -> None:
    with raises("a `MessageUnit` needs at least one message"):
        MessageUnit(messages=())
    unit = MessageUnit(messages=[Message.user("hi")])  # type: ignore[arg-type]
    assert unit.messages == (Message.user("hi"),)


def test_results_may_come_in_any_order() -> None:
    h = [HISTORY[2], HISTORY[4], HISTORY[3]]
    assert split_units(h) == [MessageUnit(messages=tuple(h))]


@pytest.mark.parametrize(
    ("history", "match"),
    [
        (
            [Message.user("hi"), Message.tool("r", tool_call_id="call_1")],
            "tool message 1 answers `call_1`, which is no open tool call (an orphan result)",
        ),
        (
            [HISTORY[2], HISTORY[3], Message.tool("r", tool_call_id="call_x"), HISTORY[4]],
            "tool message 2 answers `call_x`, which is no open tool call",
        ),
        (
            [Message.user("hi"), HISTORY[2], HISTORY[3], Message.user("and?"), HISTORY[4]],
            "tool call `call_2` (`get_time`) at message 1 has no result; add a `tool` message with "
            "`tool_call_id='call_2'` after message 1's other results (before message 3)",
        ),
        (
            [HISTORY[2], HISTORY[4]],
            "tool call `call_1` (`get_weather`) at message 0 has no result; add a `tool` message "
            "with `tool_call_id='call_1'` after message 0's other results (at the end of the "
            "history)",
        ),
        (
            [*HISTORY[2:5], Message.assistant(tool_calls=[WEATHER])],
            "tool call id `call_1` at message 3 is already used at message 0",
        ),
        (
            [Message.assistant(tool_calls=[WEATHER, WEATHER])],
            "tool call id `call_1` at message 0 is already used at message 0",
        ),
        (
            [HISTORY[2], HISTORY[3], HISTORY[3], HISTORY[4]],
            "message 2 is a second result for tool call `call_1`",
        ),
        (
            [*HISTORY[2:5], HISTORY[3]],
            "message 3 is a second result for tool call `call_1`",
        ),
        (
            [*HISTORY[2:5], Message.user("x"), HISTORY[4]],
            "message 4 is a second result for tool call `call_2`",
        ),
    ],
)
def test_split_units_errors(history: list[Message], match: str) -> None:
    with raises(match):
        split_units(history)


# --- properties -----------------------------------------------------------------------------


@given(tool_calls())
def test_arguments_json_round_trips(call: ToolCall) -> None:
    assert json.loads(call.arguments_json()) == call.arguments


@given(messages())
def test_every_single_message_converts_to_openai(message: Message) -> None:
    [wire] = to_openai([message])
    assert json.loads(json.dumps(wire)) == wire


@given(histories(names=False, errors=False))
def test_openai_round_trip(history: list[Message]) -> None:
    assert from_openai(to_openai(history)) == history


@given(histories())
def test_openai_round_trip_loses_only_tool_names_and_is_error(history: list[Message]) -> None:
    expected = [
        dataclasses.replace(m, name=None, is_error=False) if m.role == "tool" else m
        for m in history
    ]
    assert from_openai(to_openai(history)) == expected


ANTHROPIC_EXACT = histories(names=False, empty_text=False, adjacent_assistants=False)


@given(ANTHROPIC_EXACT)
def test_anthropic_round_trips(history: list[Message]) -> None:
    system, wire = to_anthropic(history)
    back = from_anthropic(wire, system=system)
    assert back == history
    # ... and the other way: to_anthropic's output is canonical, so it survives the trip too.
    assert to_anthropic(back) == (system, wire)


@given(histories())
def test_any_anthropic_payload_is_canonical_after_one_round_trip(history: list[Message]) -> None:
    # Merged assistant messages come back as one, so only the second trip is exact in general.
    system, wire = to_anthropic(history)
    once = to_anthropic(from_anthropic(wire, system=system))
    assert to_anthropic(from_anthropic(once[1], system=once[0])) == once


@given(histories())
def test_anthropic_output_alternates_with_results_right_after_their_calls(
    history: list[Message],
) -> None:
    _, wire = to_anthropic(history)
    roles = [m["role"] for m in wire]
    assert all(a != b for a, b in itertools.pairwise(roles))
    for k, m in enumerate(wire):
        uses = [b["id"] for b in m["content"] if b["type"] == "tool_use"]
        if uses:
            results = [
                b["tool_use_id"] for b in wire[k + 1]["content"] if b["type"] == "tool_result"
            ]
            assert sorted(results) == sorted(uses)


@given(histories())
def test_units_are_single_messages_or_a_call_with_exactly_its_results(
    history: list[Message],
) -> None:
    units = split_units(history)
    assert flatten_units(units) == history
    for unit in units:
        first, *rest = unit.messages
        if unit.is_tool_unit:
            assert first.role == "assistant"
            assert all(m.role == "tool" for m in rest)
            assert sorted(m.tool_call_id or "" for m in rest) == sorted(
                c.id for c in first.tool_calls
            )
        else:
            assert rest == []
            assert not first.tool_calls
            assert first.role != "tool"


@given(histories(min_tool_units=1), st.data())
def test_dropping_any_result_breaks_the_history(
    history: list[Message], data: st.DataObject
) -> None:
    results = [k for k, m in enumerate(history) if m.role == "tool"]
    k = data.draw(st.sampled_from(results))
    with raises(f"tool call `{history[k].tool_call_id}`"):
        split_units(history[:k] + history[k + 1 :])


def test_cache_marks_are_at_most_four_and_keep_the_longest_prefixes() -> None:
    from loomctx.messages import CACHE_CONTROL, mark_anthropic_cache

    messages = [Message.system("Rules.")] + [
        Message.user(f"q{i}") if i % 2 == 0 else Message.assistant(f"a{i}") for i in range(8)
    ]
    system, converted, tools = mark_anthropic_cache(messages, range(1, 10))
    assert system == [{"type": "text", "text": "Rules.", "cache_control": CACHE_CONTROL}]
    marked = [i for i, m in enumerate(converted) if "cache_control" in m["content"][-1]]
    assert marked == [5, 6, 7]  # three left after the system prompt: the longest prefixes
    assert tools == []
    # Without a system prompt, the last tool carries the first breakpoint.
    _, _, tools = mark_anthropic_cache(messages[1:], [2], tools=[{"name": "t"}, {"name": "u"}])
    assert tools == [{"name": "t"}, {"name": "u", "cache_control": CACHE_CONTROL}]


def test_a_clients_cache_marks_go_first_and_loom_fills_the_rest() -> None:
    from loomctx.messages import CACHE_CONTROL, CacheMarks, mark_anthropic_cache

    hour = {"type": "ephemeral", "ttl": "1h"}
    messages = [Message.system("Rules.")] + [
        Message.user(f"q{i}") if i % 2 == 0 else Message.assistant(f"a{i}") for i in range(8)
    ]
    marks = CacheMarks(tools={"u": hour}, ends={3: hour})
    system, converted, tools = mark_anthropic_cache(
        messages, range(1, 10), tools=[{"name": "t"}, {"name": "u"}], marks=marks
    )
    assert tools == [{"name": "t"}, {"name": "u", "cache_control": hour}]
    # Loom's system breakpoint comes before a one-hour mark: it takes the hour too.
    assert system == [{"type": "text", "text": "Rules.", "cache_control": hour}]
    marked = {
        i: m["content"][-1]["cache_control"]
        for i, m in enumerate(converted)
        if "cache_control" in m["content"][-1]
    }
    assert marked == {1: hour, 7: CACHE_CONTROL}  # the client's, then Loom's longest prefix
    # Four marks of the client's leave none to Loom.
    full = CacheMarks(
        system=CACHE_CONTROL,
        tools={"t": CACHE_CONTROL, "u": CACHE_CONTROL},
        ends={2: CACHE_CONTROL},
    )
    _, converted, _ = mark_anthropic_cache(
        messages, [8], tools=[{"name": "t"}, {"name": "u"}], marks=full
    )
    assert [i for i, m in enumerate(converted) if "cache_control" in m["content"][-1]] == [0]


def test_loom_s_own_marks_ask_for_the_hour_when_told_but_never_after_a_short_one() -> None:
    from loomctx.messages import CACHE_CONTROL, CacheMarks, mark_anthropic_cache

    hour = {"type": "ephemeral", "ttl": "1h"}
    messages = [Message.system("Rules.")] + [
        Message.user(f"q{i}") if i % 2 == 0 else Message.assistant(f"a{i}") for i in range(8)
    ]

    def marked(converted: list[dict[str, Any]]) -> dict[int, Any]:
        return {
            i: m["content"][-1]["cache_control"]
            for i, m in enumerate(converted)
            if "cache_control" in m["content"][-1]
        }

    system, converted, _ = mark_anthropic_cache(messages, [4, 8], ttl="1h")
    assert system == [{"type": "text", "text": "Rules.", "cache_control": hour}]
    assert marked(converted) == {2: hour, 6: hour}
    system, converted, _ = mark_anthropic_cache(messages, [4, 8], ttl="5m")
    assert system[0]["cache_control"] == CACHE_CONTROL
    assert marked(converted) == {2: CACHE_CONTROL, 6: CACHE_CONTROL}
    # A client's five-minute mark: Loom's own before it keep the hour, those after it the
    # default (Anthropic wants every one-hour breakpoint before any five-minute one).
    client = CacheMarks(ends={3: CACHE_CONTROL})
    system, converted, _ = mark_anthropic_cache(messages, [5, 8], ttl="1h", marks=client)
    assert system[0]["cache_control"] == hour
    assert marked(converted) == {1: CACHE_CONTROL, 3: CACHE_CONTROL, 6: CACHE_CONTROL}
    with pytest.raises(ConfigError, match='`ttl` must be "5m", "1h" or None'):
        mark_anthropic_cache(messages, [8], ttl="1d")

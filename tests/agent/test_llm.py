"""The LLM contract: options, chunks, `complete()`, and the switch that forbids real requests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest

from loomctx.agent import llm as llm_module
from loomctx.agent.llm import (
    LLM,
    Completed,
    LLMChunk,
    LLMOptions,
    LLMResponse,
    TextDelta,
    ToolCallDelta,
    Usage,
    allow_model_requests,
    check_model_requests_allowed,
    complete,
)
from loomctx.errors import ConfigError, ProviderError
from loomctx.messages import Message, ToolCall


def test_options_default_to_nothing_set() -> None:
    options = LLMOptions()
    assert (options.model, options.temperature, options.max_tokens) == (None, None, None)
    assert (options.stop, options.tool_choice, options.timeout, dict(options.extra)) == (
        (),
        None,
        None,
        {},
    )


def test_options_keep_a_private_read_only_copy_of_extra() -> None:
    extra = {"seed": 1}
    options = LLMOptions(extra=extra, stop=["a", "b"])  # type: ignore[arg-type]
    extra["seed"] = 2
    assert options.extra == {"seed": 1}
    assert options.stop == ("a", "b")
    with pytest.raises(TypeError):
        options.extra["seed"] = 3  # type: ignore[index]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"model": ""}, "`model` must be a non-empty string"),
        ({"temperature": float("nan")}, "`temperature` must be a finite number"),
        ({"temperature": "hot"}, "`temperature` must be a finite number"),
        ({"temperature": -0.1}, "`temperature` must be >= 0"),
        ({"max_tokens": 0}, "`max_tokens` must be an int >= 1"),
        ({"max_tokens": True}, "`max_tokens` must be an int >= 1"),
        ({"timeout": 0}, "`timeout` must be a number of seconds > 0"),
        ({"tool_choice": ""}, "`tool_choice` must be"),
        ({"stop": "END"}, "must be a sequence of strings"),
    ],
)
def test_options_are_checked(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        LLMOptions(**kwargs)


def test_a_call_overrides_defaults_field_by_field() -> None:
    defaults = LLMOptions(temperature=0.5, max_tokens=100, stop=("X",), extra={"a": 1, "b": 1})
    call = LLMOptions(max_tokens=10, extra={"b": 2, "c": 3})
    merged = defaults.merged(call)
    assert merged == LLMOptions(
        temperature=0.5, max_tokens=10, stop=("X",), extra={"a": 1, "b": 2, "c": 3}
    )
    assert merged.extra == {"a": 1, "b": 2, "c": 3}  # `extra` is not compared by `==`
    assert defaults.merged(None) is defaults
    assert defaults.merged(LLMOptions(stop=("Y",))).stop == ("Y",)


def test_options_from_keyword_arguments_reject_unknown_names() -> None:
    assert LLMOptions.from_kwargs("`X`", {"temperature": 0}) == LLMOptions(temperature=0)
    with pytest.raises(ConfigError, match="`X` got unknown option\\(s\\) `seed`, `temp`"):
        LLMOptions.from_kwargs("`X`", {"temp": 0, "seed": 1})


def test_chunks_carry_their_kind() -> None:
    usage = Usage(input_tokens=1, output_tokens=2)
    done = Completed(message=Message.assistant("x"), finish_reason="stop")
    chunks: list[LLMChunk] = [TextDelta(text="x"), ToolCallDelta(index=0), usage, done]
    assert [c.kind for c in chunks] == ["text", "tool_call_delta", "usage", "completed"]


def test_usage_adds_up_and_rejects_negative_counts() -> None:
    total = Usage(input_tokens=10, output_tokens=2, cached_input_tokens=4) + Usage(
        input_tokens=5, output_tokens=1
    )
    assert total == Usage(input_tokens=15, output_tokens=3, cached_input_tokens=4)
    with pytest.raises(ConfigError, match="`output_tokens` must be an int >= 0"):
        Usage(input_tokens=1, output_tokens=-1)


def test_completed_holds_an_assistant_message_and_known_invalid_calls() -> None:
    call = ToolCall(id="c1", name="f")
    done = Completed(
        message=Message.assistant(tool_calls=[call]),
        finish_reason="tool_calls",
        invalid_tool_calls=[["c1", "{oops"]],  # type: ignore[arg-type]
    )
    assert done.invalid_tool_calls == (("c1", "{oops"),)
    with pytest.raises(ConfigError, match="must be an `assistant` message"):
        Completed(message=Message.user("x"), finish_reason="stop")
    with pytest.raises(ConfigError, match="`c2` is not among the message's tool calls"):
        Completed(
            message=Message.assistant(tool_calls=[call]),
            finish_reason="tool_calls",
            invalid_tool_calls=(("c2", "{"),),
        )


class _Chunks:
    """A minimal hand-written LLM, to test `complete()` and the protocol on their own."""

    name = "hand:written"

    def __init__(self, chunks: Sequence[LLMChunk]) -> None:
        self.chunks = chunks

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        options: LLMOptions | None = None,
    ) -> AsyncIterator[LLMChunk]:
        for chunk in self.chunks:
            yield chunk


async def test_complete_drains_the_stream_into_a_response() -> None:
    call = ToolCall(id="c1", name="f")
    usage = Usage(input_tokens=3, output_tokens=4)
    done = Completed(
        message=Message.assistant("hi", tool_calls=[call]),
        finish_reason="tool_calls",
        usage=usage,
        invalid_tool_calls=(("c1", "{"),),
    )
    llm = _Chunks([TextDelta(text="hi"), usage, done])
    assert isinstance(llm, LLM)

    response = await complete(llm, [Message.user("x")])

    assert response == LLMResponse(
        message=done.message,
        finish_reason="tool_calls",
        usage=usage,
        invalid_tool_calls=(("c1", "{"),),
    )
    assert response.text == "hi"


async def test_complete_needs_a_completed_chunk() -> None:
    with pytest.raises(ProviderError, match="`hand:written` ended its stream without"):
        await complete(_Chunks([TextDelta(text="hi")]), [Message.user("x")])


def test_the_switch_is_restored_after_the_block() -> None:
    assert llm_module.ALLOW_MODEL_REQUESTS is False  # this suite's conftest turns it off
    with pytest.raises(ProviderError, match="`some:model`: real model requests are disabled"):
        check_model_requests_allowed("some:model")
    with allow_model_requests():
        assert llm_module.ALLOW_MODEL_REQUESTS is True
        check_model_requests_allowed("some:model")
        with allow_model_requests(False):
            assert llm_module.ALLOW_MODEL_REQUESTS is False
        assert llm_module.ALLOW_MODEL_REQUESTS is True
    assert llm_module.ALLOW_MODEL_REQUESTS is False


def test_the_switch_is_restored_after_an_error() -> None:
    with pytest.raises(RuntimeError), allow_model_requests():
        raise RuntimeError
    assert llm_module.ALLOW_MODEL_REQUESTS is False

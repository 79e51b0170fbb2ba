"""The provider-neutral LLM contract: one streaming method, typed chunks, and a switch for tests.

An `LLM` has a `name` and one method, `stream(messages, *, tools, options)`, an async iterator
of `LLMChunk`s:

- `TextDelta`: a piece of the reply's text, as it arrives;
- `ToolCallDelta`: a piece of a tool call: its `index` among the reply's calls, its `id` and
  `name` (on the call's first delta; None after), and a raw fragment of its JSON arguments;
- `Usage`: the tokens the call consumed (at most one, just before `Completed`, final totals);
- `Completed`: always last, exactly once: the assembled assistant `Message` (all text, every tool
  call with parsed arguments), the finish reason and the usage.

`complete()` drains a stream into an `LLMResponse`; it is the non-streaming helper.

**Finish reasons** use OpenAI's vocabulary for every provider: ``"stop"`` (a natural end or a
stop sequence), ``"length"`` (the output limit), ``"tool_calls"`` and ``"content_filter"``. A
provider's other reasons pass through unchanged. Decide whether to run tools from
`message.tool_calls`, not from the finish reason: some OpenAI-compatible servers report
``"stop"`` for a reply with tool calls.

**Tool calls whose arguments are not valid JSON** (models do stream broken JSON now and then)
do not fail the stream: such a call is in `Completed.message.tool_calls` with ``arguments={}``,
and its id with the raw text is in `Completed.invalid_tool_calls`. The call stays in the
message so that the history keeps the shape providers require (every call answered by one
result); the agent loop must not run it, but answer it with an error result that quotes the
raw text, so the model can correct itself on the next turn.

**No real model calls in tests.** Every provider calls `check_model_requests_allowed` before it
sends anything; it raises `ProviderError` while `ALLOW_MODEL_REQUESTS` is False. A test suite
sets it to False once (``loomctx.agent.llm.ALLOW_MODEL_REQUESTS = False`` in `conftest.py`), uses
`loomctx.testing.ScriptedLLM` or `FunctionLLM`, and re-enables real requests only where it means
to, with ``with allow_model_requests(): ...``.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from loomctx.errors import ConfigError, ProviderError, check_int
from loomctx.messages import CacheMarks, Message

__all__ = [
    "ALLOW_MODEL_REQUESTS",
    "LLM",
    "Completed",
    "LLMChunk",
    "LLMOptions",
    "LLMResponse",
    "TextDelta",
    "ToolCallDelta",
    "Usage",
    "allow_model_requests",
    "check_model_requests_allowed",
    "complete",
]

ALLOW_MODEL_REQUESTS: bool = True
"""Whether providers may send requests; tests set it to False (see the module docstring)."""


@contextmanager
def allow_model_requests(allowed: bool = True) -> Iterator[None]:
    """Set `ALLOW_MODEL_REQUESTS` to `allowed` inside the block, and restore it after."""
    global ALLOW_MODEL_REQUESTS
    previous = ALLOW_MODEL_REQUESTS
    ALLOW_MODEL_REQUESTS = allowed
    try:
        yield
    finally:
        ALLOW_MODEL_REQUESTS = previous


def check_model_requests_allowed(llm_name: str) -> None:
    """Raise `ProviderError` if real model requests are disabled; every provider calls this
    before it sends a request (a third-party provider should too)."""
    if not ALLOW_MODEL_REQUESTS:
        raise ProviderError(
            f"`{llm_name}`: real model requests are disabled "
            "(`loomctx.agent.llm.ALLOW_MODEL_REQUESTS` is False, as tests set it); use "
            "`loomctx.testing.ScriptedLLM` or `FunctionLLM` in tests, or allow real requests "
            "with `with loomctx.agent.llm.allow_model_requests(): ...`"
        )


_OPTION_NAMES = (
    "model",
    "temperature",
    "max_tokens",
    "stop",
    "tool_choice",
    "timeout",
    "extra",
    "cache_ttl",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMOptions:
    """Per-call options; every field is optional, and a provider's defaults fill the rest.

    - `model`: overrides the provider's model for this call.
    - `temperature`, `max_tokens` (output tokens), `stop` (stop sequences).
    - `tool_choice`: ``"auto"``, ``"none"``, ``"required"`` (some tool must be called), or the
      name of the one tool to call.
    - `timeout`: seconds for the request (connecting, and waiting for each piece of the stream).
    - `extra`: provider-specific fields, merged into the request body as given (they win over
      the fields above), e.g. ``{"top_p": 0.9}`` or ``{"thinking": {...}}``.
    - `cache_key`: a stable id of the conversation (a session id, never a secret), sent as
      OpenAI's ``prompt_cache_key`` so its calls reach the same prompt cache.
    - `cache_breakpoints`: message counts after which the prompt repeats the conversation's
      next call (the end of the history, say); the Anthropic provider marks them, and the
      system prompt, with ``cache_control`` (at most four in all). `Agent` sets both.
    - `cache_marks`: breakpoints a client placed itself (`loomctx.messages.CacheMarks`,
      the proxy's Messages API passes them on), marked before those above.
    - `cache_ttl`: how long the provider keeps what Loom's own breakpoints write: ``"1h"``
      asks Anthropic for its one-hour cache (writes at 2x instead of 1.25x, for a
      conversation whose calls are more than five minutes and less than an hour apart; its
      pricing is `loomctx.context.billing.ANTHROPIC_1H`), ``"5m"`` or None the default.
      ``AnthropicLLM(model, cache_ttl="1h")`` sets it for every call.
    """

    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    tool_choice: Literal["auto", "none", "required"] | str | None = None
    timeout: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)
    cache_key: str | None = None
    cache_breakpoints: tuple[int, ...] = ()
    cache_marks: CacheMarks | None = None
    cache_ttl: Literal["5m", "1h"] | None = None

    def __post_init__(self) -> None:
        if self.cache_ttl not in (None, "5m", "1h"):
            raise ConfigError(f'`cache_ttl` must be "5m", "1h" or None, got {self.cache_ttl!r}')
        if self.cache_marks is not None and not isinstance(self.cache_marks, CacheMarks):
            raise ConfigError(
                f"`cache_marks` must be a CacheMarks, got {type(self.cache_marks).__name__}"
            )
        if isinstance(self.stop, str):
            raise ConfigError(
                f"`stop` must be a sequence of strings, got the string {self.stop!r}; "
                f"write `stop=({self.stop!r},)`"
            )
        object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "cache_breakpoints", tuple(self.cache_breakpoints))
        if any(
            isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in self.cache_breakpoints
        ):
            raise ConfigError(
                f"`cache_breakpoints` must be message counts (ints >= 0), got "
                f"{self.cache_breakpoints!r}"
            )
        if self.cache_key is not None and (
            not isinstance(self.cache_key, str) or not self.cache_key
        ):
            raise ConfigError(f"`cache_key` must be a non-empty string, got {self.cache_key!r}")
        # A private copy, read-only, so that the caller's later edits cannot reach a request.
        object.__setattr__(self, "extra", MappingProxyType(dict(self.extra)))
        if self.model is not None and (not isinstance(self.model, str) or not self.model):
            raise ConfigError(f"`model` must be a non-empty string, got {self.model!r}")
        if self.temperature is not None and not (
            isinstance(self.temperature, int | float) and math.isfinite(self.temperature)
        ):
            raise ConfigError(f"`temperature` must be a finite number, got {self.temperature!r}")
        if self.temperature is not None and self.temperature < 0:
            raise ConfigError(f"`temperature` must be >= 0, got {self.temperature!r}")
        check_int(self.max_tokens, "`max_tokens`", minimum=1, none="the model's own limit")
        if self.timeout is not None and not (
            isinstance(self.timeout, int | float) and self.timeout > 0
        ):
            raise ConfigError(f"`timeout` must be a number of seconds > 0, got {self.timeout!r}")
        if self.tool_choice is not None and (
            not isinstance(self.tool_choice, str) or not self.tool_choice
        ):
            raise ConfigError(
                f'`tool_choice` must be "auto", "none", "required" or a tool name, got '
                f"{self.tool_choice!r}"
            )

    @classmethod
    def from_kwargs(cls, owner: str, kwargs: Mapping[str, Any]) -> LLMOptions:
        """Options from keyword arguments, e.g. a provider's ``**default_options``; an unknown
        name raises `ConfigError` (nothing is swallowed)."""
        unknown = sorted(set(kwargs) - set(_OPTION_NAMES))
        if unknown:
            names = ", ".join(f"`{n}`" for n in unknown)
            accepted = ", ".join(f"`{n}`" for n in _OPTION_NAMES)
            raise ConfigError(
                f"{owner} got unknown option(s) {names}; the options are {accepted}; pass a "
                "provider-specific field in `extra={...}`"
            )
        return cls(**kwargs)

    def merged(self, override: LLMOptions | None) -> LLMOptions:
        """These options with every field that `override` sets taking precedence
        (`extra` is merged key by key, `override`'s keys winning)."""
        if override is None:
            return self
        values: dict[str, Any] = {}
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(override, f.name)
            if f.name == "extra":
                values["extra"] = {**mine, **theirs}
            elif f.name == "stop":
                values["stop"] = theirs or mine
            else:
                values[f.name] = mine if theirs is None else theirs
        return LLMOptions(**values)


# ---------------------------------------------------------------------------------------------
# Stream chunks


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta:
    """A piece of the reply's text, in the order it arrived."""

    kind: Literal["text"] = "text"
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallDelta:
    """A piece of one tool call of the reply.

    `index` numbers the reply's tool calls from 0. The first delta of a call carries its `id`
    and `name`; later ones carry None. `arguments` is a raw fragment of the JSON arguments:
    the fragments of a call, joined in order, are its arguments (`Completed` has them parsed).
    """

    kind: Literal["tool_call_delta"] = "tool_call_delta"
    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Tokens billed for one call.

    `input_tokens` counts every prompt token, including those read from the provider's prompt
    cache; `cached_input_tokens` says how many of them were (billed cheaper), and
    `cache_write_tokens` how many were written to the cache by this call (Anthropic bills them
    at 1.25x; OpenAI's newer models report them too). Anthropic reports cached, written and
    uncached input separately; its provider adds them up to keep this meaning.
    """

    kind: Literal["usage"] = "usage"
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0

    def __post_init__(self) -> None:
        check_int(self.input_tokens, "`input_tokens`", minimum=0)
        check_int(self.output_tokens, "`output_tokens`", minimum=0)
        check_int(self.cached_input_tokens, "`cached_input_tokens`", minimum=0)
        check_int(self.cache_write_tokens, "`cache_write_tokens`", minimum=0)

    def __add__(self, other: Usage) -> Usage:
        """The total of two calls' usage (for a run's accounting)."""
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Completed:
    """The last chunk of every stream: the assembled reply.

    `message` is an assistant message with the whole text and every tool call, arguments
    parsed. `invalid_tool_calls` lists ``(call id, raw arguments)`` for each call whose
    arguments were not a JSON object; such a call is in `message.tool_calls` with
    ``arguments={}`` and must be answered with an error result instead of being run (see the
    module docstring).
    """

    kind: Literal["completed"] = "completed"
    message: Message
    finish_reason: str
    usage: Usage | None = None
    invalid_tool_calls: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.message.role != "assistant":
            raise ConfigError(
                f"`Completed.message` must be an `assistant` message, got `{self.message.role}`"
            )
        object.__setattr__(self, "invalid_tool_calls", tuple(map(tuple, self.invalid_tool_calls)))
        ids = {call.id for call in self.message.tool_calls}
        for call_id, _raw in self.invalid_tool_calls:
            if call_id not in ids:
                raise ConfigError(
                    f"invalid tool call `{call_id}` is not among the message's tool calls; "
                    "keep the call in `message.tool_calls` with `arguments={}`"
                )


LLMChunk: TypeAlias = TextDelta | ToolCallDelta | Usage | Completed
"""What `LLM.stream` yields; `kind` tells them apart."""


@runtime_checkable
class LLM(Protocol):
    """A chat model that streams.

    `tools` are JSON-schema tool definitions, OpenAI-style
    ``{"type": "function", "function": {"name", "description", "parameters"}}`` or
    Anthropic-style ``{"name", "description", "input_schema"}``; providers convert them.
    The stream ends with exactly one `Completed`. Failures raise `ProviderError`.
    """

    name: str
    """Which provider and model, e.g. ``"openai:gpt-4o"``."""

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        options: LLMOptions | None = None,
    ) -> AsyncIterator[LLMChunk]:
        """Send `messages` (and `tools`) and stream the reply."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMResponse:
    """A whole reply, as `complete()` returns it: the fields of the stream's `Completed`."""

    message: Message
    finish_reason: str
    usage: Usage | None = None
    invalid_tool_calls: tuple[tuple[str, str], ...] = ()

    @property
    def text(self) -> str:
        """The reply's text."""
        return self.message.content


async def complete(
    llm: LLM,
    messages: Sequence[Message],
    *,
    tools: Sequence[Mapping[str, Any]] = (),
    options: LLMOptions | None = None,
) -> LLMResponse:
    """Call `llm` and wait for the whole reply: drains `llm.stream(...)`."""
    completed: Completed | None = None
    async for chunk in llm.stream(messages, tools=tools, options=options):
        if chunk.kind == "completed":
            completed = chunk
    if completed is None:
        raise ProviderError(
            f"`{llm.name}` ended its stream without a `Completed` chunk; an `LLM.stream` must "
            "end with exactly one (this is a bug in that LLM implementation)"
        )
    return LLMResponse(
        message=completed.message,
        finish_reason=completed.finish_reason,
        usage=completed.usage,
        invalid_tool_calls=completed.invalid_tool_calls,
    )

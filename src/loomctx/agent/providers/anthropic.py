"""`AnthropicLLM`: Claude through the official `anthropic` SDK's streaming messages API (the
`anthropic` extra)."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast
from urllib.parse import urlsplit

from loomctx.agent.llm import LLMChunk, LLMOptions, Usage
from loomctx.agent.providers._assembly import (
    ToolCallAssembler,
    Truncated,
    completed,
    text_delta,
)
from loomctx.agent.providers._base import SDKProvider, check_settings, import_sdk
from loomctx.errors import ConfigError, check_int
from loomctx.messages import Message, mark_anthropic_cache, to_anthropic, to_anthropic_tools
from loomctx.tokens import TiktokenCounter, TokenCounter, UsageCalibration

if TYPE_CHECKING:
    import anthropic
    from anthropic.types import RawMessageStreamEvent

    from loomctx.agent.providers._base import SDKStream

__all__ = ["AnthropicLLM"]

NO_KEY = "unused"
"""The key sent to a custom `base_url` when none is configured (a local gateway or a test
server that checks none)."""

STOP_REASONS: dict[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
"""Anthropic's stop reasons in Loom's (OpenAI's) vocabulary; others, such as `pause_turn`,
pass through unchanged."""


class _Fresh(Enum):
    """The default of `AnthropicLLM(calibration=...)`: a new `UsageCalibration` (a sentinel,
    since None already means "no calibration")."""

    CALIBRATION = "a new UsageCalibration"


class AnthropicLLM(SDKProvider):
    """Claude through Anthropic's messages API.

    ``AnthropicLLM("claude-sonnet-4-5")`` reads the key from `ANTHROPIC_API_KEY` (or any other
    credential the SDK finds: `ANTHROPIC_AUTH_TOKEN`, a profile). System messages are sent as
    the separate `system` parameter, tool results as `tool_result` blocks of a user message
    (see `loomctx.messages.to_anthropic`). Pass `client=` to use an `anthropic.AsyncAnthropic`
    you configured yourself.

    - `max_tokens`: the output limit Anthropic requires on every request, unless a call's
      options set one.
    - `max_retries`, `timeout`, `**default_options`: as for `OpenAIChatLLM`.

    `Usage.input_tokens` adds up Anthropic's uncached, cache-write and cache-read input
    tokens; `cached_input_tokens` is the cache reads, `cache_write_tokens` the writes. With
    `LLMOptions.cache_breakpoints` (the agent sets them from its window's layout), the system
    prompt and those places are marked with ``cache_control`` (with ``"ttl": "1h"`` when
    `LLMOptions.cache_ttl` asks for the one-hour cache). Stop reasons are mapped to Loom's
    finish reasons by `STOP_REASONS`. Close the provider with ``await llm.aclose()`` (or
    ``async with``) when done.

    Loom's token counts for Claude are an estimate (o200k by default; see `loomctx.tokens`),
    so by default the provider keeps a safety margin: `calibration` is a new
    `UsageCalibration` unless you pass one (to share what it learns between providers, or to
    set its prior) or None (no margin: the window is taken at its word). Each call's request
    is counted with `counter` (default o200k, as the context engine counts) and recorded
    beside the input tokens Anthropic reports, so `calibration.safe_window(model, window)`
    starts at the prior's margin (a fifth below the window) and learns the margin this model
    needs. An `Agent` on this provider builds within that safe window.
    """

    provider: ClassVar[str] = "anthropic"
    key_env: ClassVar[str] = "ANTHROPIC_API_KEY"

    def __init__(
        self,
        model: str,
        *,
        client: anthropic.AsyncAnthropic | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        max_tokens: int = 4096,
        max_retries: int = 3,
        timeout: float = 60.0,
        calibration: UsageCalibration | Literal[_Fresh.CALIBRATION] | None = _Fresh.CALIBRATION,
        counter: TokenCounter | None = None,
        **default_options: Any,
    ) -> None:
        if calibration is _Fresh.CALIBRATION:
            calibration = UsageCalibration()
        if calibration is not None and not isinstance(calibration, UsageCalibration):
            raise ConfigError(
                f"`calibration` must be a UsageCalibration, got {type(calibration).__name__}"
            )
        self.calibration: UsageCalibration | None = calibration
        """Where each call's counted and reported input tokens are recorded (None: nowhere,
        and no margin)."""
        self.counter: TokenCounter = counter or TiktokenCounter()
        sdk = import_sdk("anthropic", feature="`AnthropicLLM`", extra="anthropic")
        check_settings("AnthropicLLM", model, max_retries, timeout)
        check_int(max_tokens, "`max_tokens`", minimum=1)
        defaults = LLMOptions.from_kwargs("`AnthropicLLM`", default_options)
        owns_client = client is None
        if client is not None:
            if base_url is not None or api_key is not None:
                raise ConfigError(
                    "`AnthropicLLM` got `client=` and also `base_url=`/`api_key=`; configure "
                    "the client itself, or leave `client` out"
                )
        else:
            base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
            # A local server needs no key; Anthropic's own does, and the SDK should say so.
            local = base_url is not None and urlsplit(base_url).hostname != "api.anthropic.com"
            if api_key is None and local and not _key_in_env():
                api_key = NO_KEY
            try:
                client = cast(
                    "anthropic.AsyncAnthropic",
                    sdk.AsyncAnthropic(
                        api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout
                    ),
                )
            except sdk.AnthropicError as exc:  # e.g. a credential profile that cannot be read
                raise ConfigError(f"`AnthropicLLM` could not set up its client: {exc}") from exc
            if not _has_credentials(client):
                raise ConfigError(
                    "`AnthropicLLM` needs an API key: set `ANTHROPIC_API_KEY` or pass "
                    "`api_key=`; for a local Anthropic-compatible server that checks none, "
                    "pass its `base_url=` instead"
                )
        super().__init__(
            model,
            sdk=sdk,
            client=client,
            owns_client=owns_client,
            max_retries=max_retries,
            timeout=timeout,
            default_options=defaults,
        )
        self.max_tokens = max_tokens
        """The output limit sent when a call's options set none."""

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        options: LLMOptions | None = None,
    ) -> AsyncIterator[LLMChunk]:
        """As `SDKProvider.stream`; with `calibration`, the reported usage is recorded
        beside Loom's count of the request."""
        calibration = self.calibration
        counted = self.counter.count_messages(messages, tools=tools) if calibration else 0
        async for chunk in super().stream(messages, tools=tools, options=options):
            if calibration is not None and chunk.kind == "usage":
                model = self.default_options.merged(options).model or self.model
                calibration.record(model, counted=counted, reported=chunk.input_tokens)
            yield chunk

    def _request(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        options: LLMOptions,
        model: str,
    ) -> dict[str, Any]:
        anthropic_tools = to_anthropic_tools(tools) if tools else []
        system: Any
        if options.cache_breakpoints or options.cache_marks:
            system, wire, anthropic_tools = mark_anthropic_cache(
                messages,
                options.cache_breakpoints,
                tools=anthropic_tools,
                marks=options.cache_marks,
                ttl=options.cache_ttl,
            )
        else:
            system, wire = to_anthropic(messages)
        request: dict[str, Any] = {
            "model": model,
            "messages": wire,
            "max_tokens": options.max_tokens or self.max_tokens,
            "stream": True,
        }
        if system is not None:
            request["system"] = system
        if anthropic_tools:
            request["tools"] = anthropic_tools
        if options.tool_choice is not None:
            request["tool_choice"] = {
                "auto": {"type": "auto"},
                "none": {"type": "none"},
                "required": {"type": "any"},
            }.get(options.tool_choice, {"type": "tool", "name": options.tool_choice})
        if options.stop:
            request["stop_sequences"] = list(options.stop)
        if options.timeout is not None:
            request["timeout"] = options.timeout
        # `temperature` goes in the body directly: recent SDKs dropped the keyword argument
        # (it is still a field of the API), and older ones accept it either way.
        body = {} if options.temperature is None else {"temperature": options.temperature}
        body.update(options.extra)
        if body:
            request["extra_body"] = body
        return request

    def _open(self, request: dict[str, Any]) -> Awaitable[SDKStream]:
        return cast("Awaitable[SDKStream]", self._client.messages.create(**request))

    def _assembler(self, model: str) -> _AnthropicAssembler:
        return _AnthropicAssembler(f"{self.provider}:{model}")


def _key_in_env() -> bool:
    return bool(os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN"))


def _has_credentials(client: Any) -> bool:
    # `credentials` (profiles, workload identity) exists in newer SDKs only.
    return bool(client.api_key or client.auth_token or getattr(client, "credentials", None))


def _count(usage: object, field: str, default: int = 0) -> int:
    """A token count that older SDKs' usage models may lack, or carry as None."""
    value = getattr(usage, field, None)
    return value if isinstance(value, int) else default


def _input_json(value: object) -> str:
    """A `tool_use` block's input as the JSON text its arguments are parsed from. What JSON
    cannot carry (NaN, which the SDK's parser accepts) is written as is, so that parsing
    refuses it and the model is told; input too deep to write gives text that is not JSON."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return "<tool input that cannot be written as JSON>"


class _AnthropicAssembler:
    """Message stream events -> `LLMChunk`s.

    Tool calls are numbered in the order their `tool_use` blocks start, so that
    `ToolCallDelta.index` means the same as with OpenAI (not Anthropic's block index, which
    counts text blocks too). Thinking and server-tool blocks are not part of Loom's message
    model and are skipped.
    """

    def __init__(self, llm_name: str) -> None:
        self._name = llm_name
        self._texts: list[str] = []
        self._tools = ToolCallAssembler()
        self._tool_index: dict[int, int] = {}  # content block index -> tool call index
        self._stop_reason: str | None = None
        self._stopped = False
        self._input = self._cache_read = self._cache_write = self._output = 0
        self._has_usage = False

    def feed(self, event: RawMessageStreamEvent) -> list[LLMChunk]:
        if event.type == "message_start":
            usage = event.message.usage
            self._has_usage = True
            self._input = usage.input_tokens
            self._output = usage.output_tokens
            self._cache_read = _count(usage, "cache_read_input_tokens")
            self._cache_write = _count(usage, "cache_creation_input_tokens")
        elif event.type == "content_block_start":
            block = event.content_block
            if block.type == "text" and block.text:
                return [text_delta(self._texts, block.text)]
            if block.type == "tool_use":
                index = self._tool_index[event.index] = len(self._tool_index)
                # The input normally streams as `input_json_delta`s; a start that already
                # carries it is sent on as the call's first fragment.
                first = _input_json(block.input) if block.input else ""
                return [self._tools.add(index, id=block.id, name=block.name, fragment=first)]
        elif event.type == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta" and delta.text:
                return [text_delta(self._texts, delta.text)]
            if delta.type == "input_json_delta" and event.index in self._tool_index:
                index = self._tool_index[event.index]
                return [self._tools.add(index, id=None, name=None, fragment=delta.partial_json)]
        elif event.type == "message_delta":
            if event.delta.stop_reason is not None:
                self._stop_reason = event.delta.stop_reason
            totals = event.usage
            self._has_usage = True
            self._output = totals.output_tokens
            # Counts in `message_delta` are cumulative and win over `message_start`'s.
            self._input = _count(totals, "input_tokens", self._input)
            self._cache_read = _count(totals, "cache_read_input_tokens", self._cache_read)
            self._cache_write = _count(totals, "cache_creation_input_tokens", self._cache_write)
        elif event.type == "message_stop":
            self._stopped = True
        return []

    def finish(self) -> list[LLMChunk]:
        if not self._stopped:
            raise Truncated("the stream ended before `message_stop`, so the reply is incomplete")
        reason = self._stop_reason or "stop"
        usage = (
            Usage(
                input_tokens=self._input + self._cache_read + self._cache_write,
                output_tokens=self._output,
                cached_input_tokens=self._cache_read,
                cache_write_tokens=self._cache_write,
            )
            if self._has_usage
            else None
        )
        done = completed(
            self._name, self._texts, self._tools, STOP_REASONS.get(reason, reason), usage
        )
        return [done] if usage is None else [usage, done]

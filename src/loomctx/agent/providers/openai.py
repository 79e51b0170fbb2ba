"""`OpenAIChatLLM`: OpenAI's chat completions, and every server that speaks them, through the
official `openai` SDK (the `openai` extra)."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, cast
from urllib.parse import urlsplit

from loomctx.agent.llm import LLMChunk, LLMOptions, Usage
from loomctx.agent.providers._assembly import (
    ToolCallAssembler,
    Truncated,
    completed,
    text_delta,
)
from loomctx.agent.providers._base import SDKProvider, check_settings, import_sdk
from loomctx.errors import ConfigError
from loomctx.messages import Message, to_openai, to_openai_tools

if TYPE_CHECKING:
    import openai
    from openai.types.chat import ChatCompletionChunk

    from loomctx.agent.providers._base import SDKStream

__all__ = ["OpenAIChatLLM"]

NO_KEY = "unused"
"""The key sent to a custom `base_url` when none is configured: servers such as vLLM, Ollama
and llama.cpp ignore it, and the SDK refuses to start without one."""


class OpenAIChatLLM(SDKProvider):
    """A chat model behind the OpenAI chat-completions API: OpenAI itself, or any compatible
    server given by `base_url` (vLLM, Ollama, llama.cpp server, LiteLLM proxy, ...).

    ``OpenAIChatLLM("gpt-4o-mini")`` reads the key from `OPENAI_API_KEY`;
    ``OpenAIChatLLM("qwen2.5", base_url="http://localhost:11434/v1")`` talks to a local server
    (no key needed). Pass `client=` to use an `openai.AsyncOpenAI` you configured yourself
    (then `base_url`, `api_key`, `timeout` and the HTTP-level retries are the client's).

    - `max_retries`: how often a failed request is retried (429, 5xx, connection errors,
      timeouts), with exponential backoff and jitter; never once the reply has begun streaming.
    - `timeout`: seconds to connect, and to wait for each piece of the stream.
    - `**default_options`: `LLMOptions` fields applied to every call (``temperature=0``,
      ``max_tokens=1024``, ``extra={"seed": 7}``, ...).

    The output limit is sent as `max_completion_tokens` to api.openai.com (its reasoning
    models refuse `max_tokens`) and as `max_tokens` elsewhere, which every compatible server
    understands; ``extra={...}`` can set either explicitly. Close the provider with
    ``await llm.aclose()`` (or ``async with``) when done.
    """

    provider: ClassVar[str] = "openai"
    key_env: ClassVar[str] = "OPENAI_API_KEY"

    def __init__(
        self,
        model: str,
        *,
        client: openai.AsyncOpenAI | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        max_retries: int = 3,
        timeout: float = 60.0,
        **default_options: Any,
    ) -> None:
        sdk = import_sdk("openai", feature="`OpenAIChatLLM`", extra="openai")
        check_settings("OpenAIChatLLM", model, max_retries, timeout)
        defaults = LLMOptions.from_kwargs("`OpenAIChatLLM`", default_options)
        owns_client = client is None
        if client is not None:
            if base_url is not None or api_key is not None:
                raise ConfigError(
                    "`OpenAIChatLLM` got `client=` and also `base_url=`/`api_key=`; configure "
                    "the client itself, or leave `client` out"
                )
        else:
            base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
            key = api_key or os.environ.get("OPENAI_API_KEY")
            if not key:
                if base_url is None or urlsplit(base_url).hostname == "api.openai.com":
                    raise ConfigError(
                        "`OpenAIChatLLM` needs an API key for api.openai.com: set "
                        "`OPENAI_API_KEY` or pass `api_key=`; for a local OpenAI-compatible "
                        "server that needs no key (vLLM, Ollama, llama.cpp), pass its "
                        "`base_url=` instead"
                    )
                key = NO_KEY
            try:
                client = cast(
                    "openai.AsyncOpenAI",
                    sdk.AsyncOpenAI(
                        api_key=key, base_url=base_url, max_retries=max_retries, timeout=timeout
                    ),
                )
            except sdk.OpenAIError as exc:
                raise ConfigError(f"`OpenAIChatLLM` could not set up its client: {exc}") from exc
        super().__init__(
            model,
            sdk=sdk,
            client=client,
            owns_client=owns_client,
            max_retries=max_retries,
            timeout=timeout,
            default_options=defaults,
        )
        host = urlsplit(str(client.base_url)).hostname or ""
        self._max_tokens_field = (
            "max_completion_tokens" if host == "api.openai.com" else "max_tokens"
        )

    def _request(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        options: LLMOptions,
        model: str,
    ) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": model,
            "messages": to_openai(messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            request["tools"] = to_openai_tools(tools)
        if options.tool_choice is not None:
            request["tool_choice"] = (
                options.tool_choice
                if options.tool_choice in ("auto", "none", "required")
                else {"type": "function", "function": {"name": options.tool_choice}}
            )
        if options.temperature is not None:
            request["temperature"] = options.temperature
        if options.max_tokens is not None:
            request[self._max_tokens_field] = options.max_tokens
        if options.stop:
            request["stop"] = list(options.stop)
        if options.timeout is not None:
            request["timeout"] = options.timeout
        if options.cache_key is not None:
            request["prompt_cache_key"] = options.cache_key
        if options.extra:
            request["extra_body"] = dict(options.extra)
        return request

    def _open(self, request: dict[str, Any]) -> Awaitable[SDKStream]:
        return cast("Awaitable[SDKStream]", self._client.chat.completions.create(**request))

    def _assembler(self, model: str) -> _OpenAIAssembler:
        return _OpenAIAssembler(f"{self.provider}:{model}")


class _OpenAIAssembler:
    """Chat-completion chunks -> `LLMChunk`s. Only choice 0 is read (Loom never asks for more)."""

    def __init__(self, llm_name: str) -> None:
        self._name = llm_name
        self._texts: list[str] = []
        self._tools = ToolCallAssembler()
        self._finish_reason: str | None = None
        self._usage: Usage | None = None

    def feed(self, event: ChatCompletionChunk) -> list[LLMChunk]:
        out: list[LLMChunk] = []
        if event.usage is not None:
            details = event.usage.prompt_tokens_details
            self._usage = Usage(
                input_tokens=event.usage.prompt_tokens,
                output_tokens=event.usage.completion_tokens,
                cached_input_tokens=(details.cached_tokens or 0) if details else 0,
                cache_write_tokens=(getattr(details, "cache_write_tokens", None) or 0)
                if details
                else 0,
            )
        for choice in event.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            # A refusal is the model's reply too: without it the message would be empty.
            for text in (delta.content, delta.refusal):
                if text:
                    out.append(text_delta(self._texts, text))
            for call in delta.tool_calls or ():
                function = call.function
                out.append(
                    self._tools.add(
                        call.index,
                        id=call.id,
                        name=function.name if function else None,
                        fragment=(function.arguments or "") if function else "",
                    )
                )
            if choice.finish_reason is not None:
                self._finish_reason = choice.finish_reason
        return out

    def finish(self) -> list[LLMChunk]:
        if self._finish_reason is None:
            raise Truncated(
                "the stream ended without a `finish_reason`, so the reply may be incomplete"
            )
        done = completed(self._name, self._texts, self._tools, self._finish_reason, self._usage)
        return [done] if self._usage is None else [self._usage, done]

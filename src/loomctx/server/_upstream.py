"""Forwarding to the model behind a configured name, and back in OpenAI's wire format.

Both upstreams stream (a client that did not ask to stream gets the assembled completion) and
yield OpenAI ``chat.completion.chunk`` dicts:

- `OpenAIUpstream` posts the request as the official `openai` SDK does, over the SDK's own
  HTTP client, and passes the upstream's chunks through as they come: the client's other
  fields (`temperature`, `tool_choice`, `response_format`...) are sent as given, and tool
  calls come back exactly as the model streamed them.
- `AnthropicUpstream` sends through Loom's `AnthropicLLM` (the official `anthropic` SDK, with
  the window's prompt-cache breakpoints) and turns its chunks into OpenAI's: text deltas,
  tool-call deltas (id and name first, then argument fragments), the finish reason, usage
  (the cache's reads as ``prompt_tokens_details.cached_tokens`` and its writes as
  ``prompt_tokens_details.cache_write_tokens``, as OpenAI's newer models report them).

Every chunk carries the model name the client asked for (the configured alias, never the
upstream's id). Each call is bounded by the model's timeouts (`ModelConfig`): an upstream that
sends no chunk within `first_byte_timeout`, or has not finished within `timeout`, is a 504;
a stream without a chunk, or a chunk whose fields have the wrong types, is a 502. Both in
OpenAI's error shape, as any `UpstreamError`.

Neither retries (``max_retries=0`` for the SDK): the client has a retry policy of its own,
and a proxy that retried too would multiply it. An upstream's refusal (a 4xx/5xx) is an
`UpstreamError` carrying its status and an OpenAI error body, passed on as the upstream sent
it but for the upstream key, which is scrubbed from it (an upstream may echo the key in a
401); the key is read from the environment variable the config names, and appears in no log
line and no response.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import time
import uuid
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import replace
from typing import Any

from loomctx.agent.llm import LLMOptions, Usage, check_model_requests_allowed
from loomctx.errors import LoomError, ProviderError
from loomctx.messages import CacheMarks, Message
from loomctx.server._config import ModelConfig
from loomctx.server._errors import error_body
from loomctx.server._sse import drain, json_or_none, malformed, sse_data

__all__ = [
    "AnthropicUpstream",
    "OpenAIUpstream",
    "Reply",
    "UpstreamError",
    "preload_sdks",
    "scrub",
    "upstream_for",
]

_NO_KEY = "no-key-needed"
_OPENAI_URL = "https://api.openai.com/v1"


class UpstreamError(LoomError):
    """The upstream refused or failed a request: `status` and an OpenAI error `body`, with
    every `secrets` (the upstream key) replaced by ``[redacted]``: an upstream may echo the
    key it was sent (a 401 body), and this error's body goes back to the client."""

    def __init__(
        self, status: int, body: Mapping[str, Any], *, secrets: Sequence[str] = ()
    ) -> None:
        clean = scrub(dict(body), secrets)
        super().__init__(f"upstream answered {status}: {clean}")
        self.status = status
        self.body: dict[str, Any] = clean


def scrub(value: Any, secrets: Sequence[str]) -> Any:
    """`value` (JSON: strings, lists, mappings) with each of `secrets` in its strings (keys
    included) replaced by ``[redacted]``."""
    live = [s for s in secrets if s and s != _NO_KEY]
    if not live:
        return value

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            for secret in live:
                v = v.replace(secret, "[redacted]")
            return v
        if isinstance(v, Mapping):
            return {walk(k): walk(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [walk(x) for x in v]
        return v

    return walk(value)


def _key(config: ModelConfig) -> str:
    if config.api_key_env:
        value = os.environ.get(config.api_key_env, "")
        if value:
            return value
    return _NO_KEY


class Reply:
    """The completion assembled from chunks: what is recorded, and what a non-streaming
    client gets."""

    def __init__(self, model: str) -> None:
        self.id = ""
        self.model = model
        self.created = int(time.time())
        self.content: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: Mapping[str, Any] | None = None

    def add(self, chunk: Mapping[str, Any]) -> None:
        """Fold one chunk in."""
        self.id = self.id or str(chunk.get("id") or "")
        self.model = str(chunk.get("model") or self.model)
        self.created = int(chunk.get("created") or self.created)
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.content.append(str(delta["content"]))
            for call in delta.get("tool_calls") or ():
                slot = self.calls.setdefault(
                    int(call.get("index", 0)),
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                if call.get("id"):
                    slot["id"] = call["id"]
                function = call.get("function") or {}
                if function.get("name"):
                    slot["function"]["name"] += function["name"]
                if function.get("arguments"):
                    slot["function"]["arguments"] += function["arguments"]
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    @property
    def text(self) -> str:
        """The reply's text."""
        return "".join(self.content)

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The reply's tool calls, in OpenAI's shape, in order."""
        return [self.calls[i] for i in sorted(self.calls)]

    def message(self) -> dict[str, Any]:
        """The assistant message, in OpenAI's shape."""
        out: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.calls:
            out["tool_calls"] = self.tool_calls
        return out

    def completion(self) -> dict[str, Any]:
        """A ``chat.completion`` body."""
        out: dict[str, Any] = {
            "id": self.id or "chatcmpl-" + uuid.uuid4().hex,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": self.message(),
                    "finish_reason": self.finish_reason or "stop",
                    "logprobs": None,
                }
            ],
        }
        if self.usage is not None:
            out["usage"] = dict(self.usage)
        return out


class OpenAIUpstream:
    """An OpenAI-compatible server, over HTTP with `httpx2` (the client the `openai` SDK is
    built on), its server-sent events read here.

    The SDK itself is not in the way of the chunks: it validated each one into a pydantic
    model that the proxy then dumped back to a dict, which took as long as the rest of the
    forwarding (`bench/proxy_bench.py` measures it). The
    request is the SDK's: ``POST {base_url}/chat/completions`` with a bearer key, the
    client's fields as given; the default base URL is OpenAI's (or ``OPENAI_BASE_URL``)."""

    def __init__(self, config: ModelConfig) -> None:
        import httpx2

        self.config = config
        self._httpx = httpx2
        self._secrets = (_key(config),)
        base = config.base_url or os.environ.get("OPENAI_BASE_URL") or _OPENAI_URL
        self.url = base.rstrip("/") + "/chat/completions"
        self.client = httpx2.AsyncClient(
            timeout=httpx2.Timeout(config.timeout, connect=config.connect_timeout),
            headers={
                "Authorization": f"Bearer {self._secrets[0]}",
                "Accept": "text/event-stream",
                "User-Agent": "loomctx-serve",
            },
        )

    def safe_window(self, window: int) -> int:
        """`window`: Loom counts OpenAI's models with their own tokenizer, exactly."""
        return window

    def stream(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        fields: Mapping[str, Any],
        breakpoints: Sequence[int] = (),
    ) -> AsyncIterator[dict[str, Any]]:
        """The upstream's chunks for `messages` and the client's other `fields`, within the
        model's timeouts."""
        return _bounded(self._stream(messages, fields=fields), self.config, self._secrets)

    async def _stream(
        self, messages: Sequence[Mapping[str, Any]], *, fields: Mapping[str, Any]
    ) -> AsyncGenerator[dict[str, Any]]:
        check_model_requests_allowed(f"proxy upstream `{self.config.name}`")
        body = {
            **fields,
            "model": self.config.upstream_model,
            "messages": list(messages),
            "stream": True,
        }
        try:
            async with self.client.stream("POST", self.url, json=body) as response:
                if response.status_code >= 400:
                    raw = (await response.aread()).decode("utf-8", "replace")
                    raise UpstreamError(
                        response.status_code,
                        _error_of(json_or_none(raw), raw or response.reason_phrase),
                        secrets=self._secrets,
                    )
                events = sse_data(response.aiter_lines())
                async for data in events:
                    if data == "[DONE]":
                        await drain(events)
                        break
                    chunk = json_or_none(data)
                    if not isinstance(chunk, dict):
                        raise UpstreamError(
                            502,
                            error_body(
                                f"the upstream of model `{self.config.name}` sent an event "
                                f"that is not a JSON object: {data[:80]!r}",
                                type="upstream_error",
                            ),
                            secrets=self._secrets,
                        )
                    if "error" in chunk:  # an error in the middle of the stream
                        raise UpstreamError(502, _error_of(chunk, data), secrets=self._secrets)
                    wrong = malformed(chunk)
                    if wrong is not None:
                        raise UpstreamError(
                            502,
                            error_body(
                                f"the upstream of model `{self.config.name}` sent a chunk "
                                f"Loom cannot read: {wrong}",
                                type="upstream_error",
                            ),
                            secrets=self._secrets,
                        )
                    chunk["model"] = self.config.name  # the client's name, not the upstream's
                    yield chunk
        except self._httpx.TimeoutException as exc:
            connect = isinstance(exc, self._httpx.ConnectTimeout)
            setting = "connect_timeout" if connect else "timeout"
            raise _timed_out(self.config, setting, type(exc).__name__) from None
        except self._httpx.TransportError as exc:
            raise UpstreamError(
                502,
                error_body(
                    f"the upstream of model `{self.config.name}` could not be reached: "
                    f"{type(exc).__name__}",
                    type="upstream_error",
                ),
            ) from None

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self.client.aclose()


async def _bounded(
    chunks: AsyncGenerator[dict[str, Any]], config: ModelConfig, secrets: Sequence[str]
) -> AsyncGenerator[dict[str, Any]]:
    """`chunks` within `config`'s `first_byte_timeout` and `timeout` (a 504 past either), and
    at least one of them (a 502 for a stream that ends without any). Closing this closes
    `chunks`, and with them the upstream's connection: the call is cancelled."""
    loop = asyncio.get_running_loop()
    sent = loop.time()
    count = 0
    try:
        while True:
            setting = "first_byte_timeout" if count == 0 else "timeout"
            deadline = asyncio.timeout_at(sent + getattr(config, setting))
            try:
                async with deadline:
                    chunk = await anext(chunks)
            except StopAsyncIteration:
                break
            except TimeoutError:
                if not deadline.expired():
                    raise
                raise _timed_out(config, setting) from None
            count += 1
            yield chunk
    finally:
        await chunks.aclose()
    if count == 0:
        raise UpstreamError(
            502,
            error_body(
                f"the upstream of model `{config.name}` ended its stream without a reply",
                type="upstream_error",
            ),
            secrets=secrets,
        )


def _timed_out(config: ModelConfig, setting: str, detail: str = "") -> UpstreamError:
    """A 504: the upstream of `config` took longer than its `setting`."""
    what = {
        "connect_timeout": "could not be connected to",
        "first_byte_timeout": "sent no reply",
        "timeout": "did not finish its reply",
    }[setting]
    return UpstreamError(
        504,
        error_body(
            f"the upstream of model `{config.name}` {what} within {getattr(config, setting):g} s"
            f"{f' ({detail})' if detail else ''}; `{setting}` in `[serve.models.{config.name}]` "
            "sets this limit",
            type="upstream_error",
            code="upstream_timeout",
        ),
    )


class AnthropicUpstream:
    """Anthropic's messages API, through Loom's `AnthropicLLM`."""

    def __init__(self, config: ModelConfig) -> None:
        from loomctx.agent.providers import AnthropicLLM

        self.config = config
        self._secrets = (_key(config),)
        self.llm = AnthropicLLM(
            config.upstream_model,
            base_url=config.base_url,
            api_key=self._secrets[0],
            max_retries=0,
            timeout=config.timeout,
        )

    def safe_window(self, window: int) -> int:
        """The part of `window` that Loom's count (o200k: an estimate for Claude) may fill so
        that Anthropic's count still fits: the calibration's margin, learnt from the usage
        this upstream's replies reported."""
        calibration = self.llm.calibration
        if calibration is None:
            return window
        return calibration.safe_window(self.config.upstream_model, window)

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]],
        fields: Mapping[str, Any],
        breakpoints: Sequence[int] = (),
        marks: CacheMarks | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """OpenAI chunks for Anthropic's stream of `messages`, within the model's timeouts;
        the client's own cache `marks` go before Loom's `breakpoints`."""
        chunks = self._stream(
            messages, tools=tools, fields=fields, breakpoints=breakpoints, marks=marks
        )
        return _bounded(chunks, self.config, self._secrets)

    async def _stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]],
        fields: Mapping[str, Any],
        breakpoints: Sequence[int],
        marks: CacheMarks | None,
    ) -> AsyncGenerator[dict[str, Any]]:
        options = replace(
            _anthropic_options(fields, breakpoints),
            cache_marks=marks,
            cache_ttl="1h" if self.config.cache_ttl == "1h" else None,
        )
        cid = "chatcmpl-" + uuid.uuid4().hex
        created = int(time.time())
        model = self.config.name

        def chunk(delta: Mapping[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": dict(delta), "finish_reason": finish}],
            }

        started = False
        try:
            async for part in self.llm.stream(list(messages), tools=list(tools), options=options):
                if not started:  # after the upstream answered: a refusal keeps its status
                    started = True
                    yield chunk({"role": "assistant", "content": ""})
                if part.kind == "text":
                    yield chunk({"content": part.text})
                elif part.kind == "tool_call_delta":
                    call: dict[str, Any] = {
                        "index": part.index,
                        "function": {"arguments": part.arguments},
                    }
                    if part.id is not None:
                        call["id"], call["type"] = part.id, "function"
                    if part.name is not None:
                        call["function"]["name"] = part.name
                    yield chunk({"tool_calls": [call]})
                elif part.kind == "completed":
                    yield chunk({}, part.finish_reason)
                    if part.usage is not None:
                        u = part.usage
                        yield {
                            "id": cid,
                            "object": "chat.completion.chunk",
                            "created": created,
                            "model": model,
                            "choices": [],
                            "usage": {
                                "prompt_tokens": u.input_tokens,
                                "completion_tokens": u.output_tokens,
                                "total_tokens": u.input_tokens + u.output_tokens,
                                "prompt_tokens_details": _details(u),
                            },
                        }
        except ProviderError as exc:
            # The SDK's error (the cause) has the upstream's status: a 401 or a 429 stays one.
            status = int(getattr(exc.__cause__, "status_code", None) or 502)
            raise UpstreamError(
                status, error_body(str(exc), type="upstream_error"), secrets=self._secrets
            ) from None

    async def aclose(self) -> None:
        """Close the provider's client."""
        close = getattr(self.llm, "aclose", None)
        if close is not None:
            await close()


def _details(usage: Usage) -> dict[str, int]:
    """OpenAI's ``prompt_tokens_details`` of a usage: the cached tokens, and the tokens
    written to the cache when there are (Anthropic's ``cache_creation_input_tokens``, which
    OpenAI's shape has no field for)."""
    out = {"cached_tokens": usage.cached_input_tokens}
    if usage.cache_write_tokens:
        out["cache_write_tokens"] = usage.cache_write_tokens
    return out


def _anthropic_options(fields: Mapping[str, Any], breakpoints: Sequence[int]) -> LLMOptions:
    """The client's OpenAI fields that Anthropic has a counterpart for."""
    max_tokens = fields.get("max_completion_tokens") or fields.get("max_tokens")
    stop = fields.get("stop")
    choice = fields.get("tool_choice")
    if isinstance(choice, Mapping):
        choice = (choice.get("function") or {}).get("name")
    return LLMOptions(
        temperature=fields.get("temperature"),
        max_tokens=int(max_tokens) if max_tokens else None,
        stop=(stop,) if isinstance(stop, str) else tuple(stop or ()),
        tool_choice=choice if isinstance(choice, str) else None,
        cache_breakpoints=tuple(breakpoints),
    )


def _error_of(body: object, message: str) -> dict[str, Any]:
    """An upstream's error body in OpenAI's shape (wrapped if it is not)."""
    if isinstance(body, Mapping):
        if isinstance(body.get("error"), Mapping):
            return dict(body)
        if "message" in body:
            return {"error": dict(body)}
    return error_body(message, type="upstream_error")


def preload_sdks(models: Iterable[ModelConfig]) -> None:
    """Import the SDKs the upstreams of `models` use (each upstream imports its own when
    made: a server calls this at startup, so its first request does not pay for it)."""
    for provider in {m.provider for m in models}:
        # Not installed: the first request through that upstream says which extra to add.
        with contextlib.suppress(ImportError):
            importlib.import_module("anthropic" if provider == "anthropic" else "httpx2")


def upstream_for(config: ModelConfig) -> OpenAIUpstream | AnthropicUpstream:
    """The upstream of a configured model."""
    if config.provider == "anthropic":
        return AnthropicUpstream(config)
    return OpenAIUpstream(config)

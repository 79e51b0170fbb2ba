"""OpenTelemetry spans for the proxy's model calls and MCP's window builds (the `otel` extra),
with the GenAI semantic conventions and Loom's own attributes.

One span per chat completion, ``chat <model>`` (kind CLIENT), ended when the answer has been
streamed back (or the request failed):

- GenAI: ``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.model``,
  ``gen_ai.response.id``, ``gen_ai.response.finish_reasons``, ``gen_ai.usage.input_tokens``,
  ``gen_ai.usage.output_tokens``, ``gen_ai.usage.cache_read.input_tokens``,
  ``gen_ai.usage.cache_creation.input_tokens`` (what the provider reported writing to its
  cache, where it reports writes), ``error.type``;
- Loom: ``loom.tenant``, ``loom.session``, ``loom.report_id``, ``loom.passthrough``,
  ``loom.window.size`` / ``.available`` / ``.tokens``, ``loom.cached_prefix_tokens`` (what
  repeats the previous call's prompt), ``loom.dropped_blocks``, ``loom.compactions``,
  ``loom.source.<name>.tokens`` for each source, and the bill the window predicts beside the
  usage reported (`loomctx.context.billing`): ``loom.cache.pricing`` (the cache it is
  predicted under), ``loom.cache.predicted.cached`` / ``.written`` / ``.plain`` and
  ``loom.cache.cold`` (the session idle past the cache's lifetime), so that a trace shows a
  cache that missed against the prediction.

One span per MCP `build_context` call, ``build_context <model>`` (kind INTERNAL: no model is
called), with ``gen_ai.request.model`` when a model is named and the same Loom attributes.

Message content is off by default (prompts are users' data): set
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` to add ``gen_ai.input.messages``
(the window sent) and ``gen_ai.output.messages`` (the reply) as JSON. Without
`opentelemetry-api` installed, or without a configured tracer provider, spans cost nothing.
"""

from __future__ import annotations

import json
import os
from typing import Any

from loomctx.context.report import ContextReport
from loomctx.messages import Message, to_openai

__all__ = ["BuildSpan", "ChatSpan"]

try:  # the `otel` extra (also a dependency of the `mcp` SDK)
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # pragma: no cover - the serve extra brings it
    trace = None  # type: ignore[assignment]


def _capture() -> bool:
    return (
        os.environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").lower() == "true"
    )


def report_attributes(report: ContextReport) -> dict[str, Any]:
    """Loom's attributes for a window's report."""
    out: dict[str, Any] = {
        "loom.window.size": report.window,
        "loom.window.available": report.available,
        "loom.window.tokens": report.token_count,
        "loom.cached_prefix_tokens": report.reused_prefix_tokens,
        "loom.dropped_blocks": len(report.dropped),
        "loom.compactions": len(report.compactions),
    }
    for source in report.sources:
        out[f"loom.source.{source.name}.tokens"] = source.used
    if report.pricing:  # reports saved before predictions were made have none
        out |= {
            "loom.cache.pricing": report.pricing,
            "loom.cache.predicted.cached": report.predicted_cached,
            "loom.cache.predicted.written": report.predicted_written,
            "loom.cache.predicted.plain": report.predicted_plain,
            "loom.cache.cold": report.cache_cold,
        }
    return out


class _Span:
    """A span that may not exist (no OpenTelemetry): what every span of the server ends with."""

    _span: Any = None

    def fail(self, exc: BaseException) -> None:
        """The request or build failed with `exc`."""
        if self._span is not None:
            self._span.set_attribute("error.type", type(exc).__name__)
            self._span.set_status(Status(StatusCode.ERROR, str(exc)[:200]))

    def end(self) -> None:
        """End the span (once)."""
        if self._span is not None:
            self._span.end()
            self._span = None


class ChatSpan(_Span):
    """The span of one proxied chat completion (a no-op without OpenTelemetry)."""

    def __init__(self, *, model: str, provider: str, tenant: str, session: str) -> None:
        self._span: Any = None
        if trace is None:  # pragma: no cover
            return
        tracer = trace.get_tracer("loomctx.server")
        self._span = tracer.start_span(
            f"chat {model}",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": provider,
                "gen_ai.request.model": model,
                "loom.tenant": tenant,
                "loom.session": session,
            },
        )

    def window(
        self, report: ContextReport | None, report_id: str | None, messages: tuple[Message, ...]
    ) -> None:
        """What Loom built (None: the request passed through)."""
        if self._span is None:
            return
        self._span.set_attribute("loom.passthrough", report is None)
        if report is not None:
            self._span.set_attributes(report_attributes(report))
        if report_id is not None:
            self._span.set_attribute("loom.report_id", report_id)
        if _capture() and messages:
            self._span.set_attribute("gen_ai.input.messages", json.dumps(to_openai(messages)))

    def reply(self, completion: dict[str, Any]) -> None:
        """The answer: its id, finish reason and usage."""
        if self._span is None:
            return
        choice = completion["choices"][0]
        self._span.set_attribute("gen_ai.response.id", completion["id"])
        self._span.set_attribute("gen_ai.response.finish_reasons", [choice["finish_reason"]])
        usage = completion.get("usage") or {}
        if "prompt_tokens" in usage:
            self._span.set_attribute("gen_ai.usage.input_tokens", usage["prompt_tokens"])
            self._span.set_attribute("gen_ai.usage.output_tokens", usage["completion_tokens"])
        details = usage.get("prompt_tokens_details") or {}
        if details.get("cached_tokens") is not None:
            self._span.set_attribute(
                "gen_ai.usage.cache_read.input_tokens", details["cached_tokens"]
            )
        if details.get("cache_write_tokens") is not None:
            self._span.set_attribute(
                "gen_ai.usage.cache_creation.input_tokens", details["cache_write_tokens"]
            )
        if _capture():
            self._span.set_attribute("gen_ai.output.messages", json.dumps([choice["message"]]))


class BuildSpan(_Span):
    """The span of one MCP `build_context` call (a no-op without OpenTelemetry)."""

    def __init__(self, *, model: str | None, tenant: str, session: str) -> None:
        self._span: Any = None
        if trace is None:  # pragma: no cover
            return
        attributes: dict[str, Any] = {"loom.tenant": tenant, "loom.session": session}
        if model is not None:
            attributes["gen_ai.request.model"] = model
        self._span = trace.get_tracer("loomctx.server").start_span(
            f"build_context {model or 'window'}", kind=SpanKind.INTERNAL, attributes=attributes
        )

    def built(self, report: ContextReport, report_id: str, messages: tuple[Message, ...]) -> None:
        """What Loom built."""
        if self._span is None:
            return
        self._span.set_attributes(report_attributes(report))
        self._span.set_attribute("loom.report_id", report_id)
        if _capture():
            self._span.set_attribute("gen_ai.input.messages", json.dumps(to_openai(messages)))

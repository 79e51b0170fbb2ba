"""OpenTelemetry spans of proxied calls: GenAI semantic conventions, Loom's attributes, and
no message content unless asked for."""

from __future__ import annotations

import json

import httpx2
import openai
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from tests.agent._servers import (
    anthropic_end,
    anthropic_message_start,
    anthropic_sse,
    anthropic_text_block,
    openai_error,
    openai_text,
)
from tests.server.conftest import ACME_KEY

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def _provider() -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(provider)


def _spans(loom) -> list:
    loom.service  # noqa: B018 - waits until every reply is recorded and its span ended
    return [s for s in EXPORTER.get_finished_spans() if s.name.startswith("chat ")]


def test_a_span_per_call(loom, monkeypatch: pytest.MonkeyPatch) -> None:
    EXPORTER.clear()
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    loom.wire.script(openai_text("Fine.", usage=(40, 2), cached=16))
    raw = loom.openai(ACME_KEY).chat.completions.with_raw_response.create(
        model="gpt-test", messages=[{"role": "user", "content": "How are you?"}], user="otel"
    )
    (span,) = _spans(loom)
    attrs = dict(span.attributes)
    assert span.name == "chat gpt-upstream"
    assert span.kind == trace.SpanKind.CLIENT
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.request.model"] == "gpt-upstream"
    assert attrs["gen_ai.usage.input_tokens"] == 40
    assert attrs["gen_ai.usage.output_tokens"] == 2
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == 16
    assert attrs["gen_ai.response.finish_reasons"] == ("stop",)
    assert attrs["loom.report_id"] == raw.headers["x-loom-report"]
    assert attrs["loom.session"] == "otel"
    assert attrs["loom.tenant"] == "acme"
    assert attrs["loom.passthrough"] is False
    assert attrs["loom.window.size"] == 2000
    assert attrs["loom.source.user_input.tokens"] > 0
    assert attrs["loom.dropped_blocks"] == 0
    assert "loom.cached_prefix_tokens" in attrs
    assert attrs["loom.cache.pricing"] == "openai"
    assert attrs["gen_ai.usage.cache_creation.input_tokens"] == 0  # as the upstream said
    assert "gen_ai.input.messages" not in attrs  # content is off by default
    assert "How are you?" not in json.dumps(attrs)


def test_a_span_sets_the_predicted_bill_beside_the_reported_reads_and_writes(
    loom_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    EXPORTER.clear()
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    loom = loom_factory(window=8000)
    policy = "\n".join(f"Policy {i}: cite order number {i}." for i in range(200))
    loom.wire.script(
        anthropic_sse(
            anthropic_message_start(input_tokens=40, cache_read=0, cache_creation=1500),
            anthropic_text_block(0, "Hello."),
            anthropic_end("end_turn"),
        )
    )
    raw = loom.openai(ACME_KEY).chat.completions.with_raw_response.create(
        model="claude-test",
        messages=[{"role": "system", "content": policy}, {"role": "user", "content": "Hi"}],
        user="otel-bill",
    )
    (span,) = _spans(loom)
    attrs = dict(span.attributes)
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == 0
    assert attrs["gen_ai.usage.cache_creation.input_tokens"] == 1500
    assert attrs["loom.cache.pricing"] == "anthropic"
    assert attrs["loom.cache.cold"] is False
    predicted = [attrs[f"loom.cache.predicted.{part}"] for part in ("cached", "written", "plain")]
    headers = [int(raw.headers[f"x-loom-predicted-{p}"]) for p in ("cached", "written", "plain")]
    assert predicted == headers
    assert predicted[1] > 1024  # the first call writes its prefix
    assert sum(predicted) == attrs["loom.window.tokens"]


def test_content_on_request_and_errors(loom, monkeypatch: pytest.MonkeyPatch) -> None:
    EXPORTER.clear()
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    loom.wire.script(openai_text("Fine."), openai_error(500, "upstream broke"))
    c = loom.openai(ACME_KEY)
    list(
        c.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "Hi"}], user="o2", stream=True
        )
    )
    with pytest.raises(openai.InternalServerError):
        c.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "x"}])
    ok, failed = _spans(loom)
    assert json.loads(ok.attributes["gen_ai.input.messages"])[-1]["content"] == "Hi"
    assert "Fine." in ok.attributes["gen_ai.output.messages"]
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes["error.type"] == "UpstreamError"


async def test_a_span_per_mcp_build(loom, monkeypatch: pytest.MonkeyPatch) -> None:
    EXPORTER.clear()
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    headers = {"Authorization": f"Bearer {ACME_KEY}"}
    async with httpx2.AsyncClient(headers=headers) as http:
        transport = streamable_http_client(f"{loom.url}/mcp/otel-mcp", http_client=http)
        async with Client(transport) as mcp:
            await mcp.call_tool("remember", {"content": "The spare key is under the mat."})
            done = await mcp.call_tool(
                "build_context", {"query": "Where is the spare key?", "model": "gpt-test"}
            )
            failed = await mcp.call_tool("build_context", {"query": "x" * 40_000, "window": 300})
    built = json.loads(done.content[0].text)
    assert failed.is_error
    ok, bad = [s for s in EXPORTER.get_finished_spans() if s.name.startswith("build_context")]
    attrs = dict(ok.attributes)
    assert ok.name == "build_context gpt-test"
    assert ok.kind == trace.SpanKind.INTERNAL
    assert attrs["gen_ai.request.model"] == "gpt-test"
    assert attrs["loom.tenant"] == "acme"
    assert attrs["loom.session"] == "otel-mcp"
    assert attrs["loom.report_id"] == built["report_id"]
    assert attrs["loom.window.tokens"] == built["token_count"]
    assert attrs["loom.source.user_input.tokens"] > 0
    assert "spare key" not in json.dumps(attrs)  # content is off by default
    assert bad.name == "build_context window"
    assert bad.status.status_code is StatusCode.ERROR
    assert bad.attributes["error.type"] == "BudgetExceededError"

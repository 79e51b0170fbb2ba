"""A receipt per call through the proxy: the response's headers carry the bill the window
predicts under the model's provider's cache (`loomctx.context.billing`), the saved window gets
what the provider reported once the reply ends, and the web inspector shows both, flagging a
cache that missed unexpectedly."""

from __future__ import annotations

from loomctx.session.windows import WindowLog, report_from_payload, usage_of
from tests.agent._servers import (
    anthropic_end,
    anthropic_message_start,
    anthropic_sse,
    anthropic_text_block,
    openai_text,
)
from tests.server._http import call, signed_in
from tests.server.conftest import ACME_KEY

POLICY = "\n".join(f"Policy {i}: answer politely and cite order number {i}." for i in range(160))


def _claude(text: str, *, read: int, written: int) -> object:
    return anthropic_sse(
        anthropic_message_start(input_tokens=40, cache_read=read, cache_creation=written),
        anthropic_text_block(0, text),
        anthropic_end("end_turn"),
    )


def test_the_headers_predict_the_bill_and_the_saved_window_gets_the_provider_s_usage(
    loom_factory,
) -> None:
    loom = loom_factory(window=8000)
    # The first call writes the prefix; the second should read it, but the provider reports
    # it read nothing (an eviction): a miss the inspector flags.
    loom.wire.script(
        _claude("Hello.", read=0, written=1900), _claude("Sure.", read=0, written=1950)
    )
    acme = loom.openai(ACME_KEY)
    session = {"X-Loom-Session": "receipts"}
    first = [{"role": "system", "content": POLICY}, {"role": "user", "content": "Hi"}]
    raw = acme.chat.completions.with_raw_response.create(
        model="claude-test", messages=first, extra_headers=session
    )
    cached, written, plain = (
        int(raw.headers[f"x-loom-predicted-{part}"]) for part in ("cached", "written", "plain")
    )
    _, stored, _ = call("GET", f"{loom.v1}/reports/{raw.headers['x-loom-report']}", key=ACME_KEY)
    report = stored["report"]
    assert report["pricing"] == "anthropic"
    assert cached + written + plain == report["token_count"]
    # Nothing cached on the first call; written up to the last breakpoint (with no dynamic
    # tail yet, the end of the prompt), the rest plain.
    assert cached == 0
    assert written == report["cache_marks"][-1] > 1024
    assert plain == report["token_count"] - written
    # Loom marked its breakpoints in what went upstream.
    assert "cache_control" in str(loom.wire.requests[0].body)

    second = [*first, {"role": "assistant", "content": "Hello."},
              {"role": "user", "content": "Can you help with order 7?"}]  # fmt: skip
    raw = acme.chat.completions.with_raw_response.create(
        model="claude-test", messages=second, extra_headers=session
    )
    assert int(raw.headers["x-loom-predicted-cached"]) == written  # the first call's entry

    log = WindowLog(loom.service.store, ("acme",))  # `service` waits for the replies' records
    records = log.records("receipts")
    assert len(records) == 2
    usages = [usage_of(r.data) for r in records]
    assert [u.to_dict() if u else None for u in usages] == [
        {"input": 40 + 1900, "cache_read": 0, "cache_write": 1900},
        {"input": 40 + 1950, "cache_read": 0, "cache_write": 1950},
    ]
    assert report_from_payload(records[1].data["report"]).predicted_cached == written

    page = signed_in(loom, ACME_KEY).get("/inspect/s/receipts").text
    assert page.count('receipt">predicted ') == 2
    assert f"predicted {written:,} read" in page
    assert "reported 0 read · 1,950 written of 1,990" in page
    assert page.count("cache miss") == 1  # the second call only: the first predicted none


def test_an_openai_model_is_predicted_with_its_automatic_cache(loom) -> None:
    loom.wire.script(openai_text("Hi!", usage=(900, 3), cached=0))
    acme = loom.openai(ACME_KEY)
    raw = acme.chat.completions.with_raw_response.create(
        model="gpt-test",
        messages=[{"role": "user", "content": "Hello"}],
        extra_headers={"X-Loom-Session": "auto"},
    )
    assert raw.headers["x-loom-predicted-written"] == "0"  # no write premium, no breakpoints
    _, stored, _ = call("GET", f"{loom.v1}/reports/{raw.headers['x-loom-report']}", key=ACME_KEY)
    assert stored["report"]["pricing"] == "openai"
    (record,) = WindowLog(loom.service.store, ("acme",)).records("auto")
    assert record.data["usage"] == {"input": 900, "cache_read": 0, "cache_write": 0}

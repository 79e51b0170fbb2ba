"""The cost model (`loomctx.context.billing`) and each build's prediction of its bill."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomctx import ConfigError, ContextOrchestrator, ContextReport, Message, TiktokenCounter
from loomctx.context import LayoutState
from loomctx.context.billing import (
    ANTHROPIC,
    ANTHROPIC_1H,
    OPENAI,
    OPENAI_GPT5,
    PROVIDERS,
    CachePricing,
    pricing_for,
)
from loomctx.context.orchestrator import cache_marks, repeated_prefix_tokens
from loomctx.context.sources import HistorySource, PromptSource, ToolSource, UserInputSource
from loomctx.session.windows import report_from_payload

from .test_orchestrator import DocsSource

COUNTER = TiktokenCounter()


def test_anthropic_reads_the_last_entry_writes_to_the_last_breakpoint_bills_the_rest() -> None:
    p = ANTHROPIC.predict(tokens=5000, reused=4200, marks=(1500, 4100, 4600),
                          previous_marks=(1500, 3000, 4100))  # fmt: skip
    assert (p.cached, p.written, p.plain) == (4100, 500, 400)
    assert ANTHROPIC.bill(p) == pytest.approx(4100 * 0.1 + 500 * 1.25 + 400 * 1.0)
    # A compaction broke the prefix at 2,000 tokens: only the system entry is read.
    broken = ANTHROPIC.predict(tokens=5000, reused=2000, marks=(1500, 4600),
                               previous_marks=(1500, 3000, 4100))  # fmt: skip
    assert (broken.cached, broken.written, broken.plain) == (1500, 3100, 400)


def test_a_cold_cache_reads_nothing_and_short_prefixes_are_not_cached() -> None:
    cold = ANTHROPIC.predict(tokens=5000, reused=4200, marks=(1500, 4600),
                             previous_marks=(4100,), cold=True)  # fmt: skip
    assert (cold.cached, cold.written, cold.plain) == (0, 4600, 400)
    short = ANTHROPIC.predict(tokens=900, reused=800, marks=(300, 800), previous_marks=(700,))
    assert (short.cached, short.written, short.plain) == (0, 0, 900)


def test_openai_reads_the_repeated_prefix_in_steps_and_writes_at_no_premium() -> None:
    p = OPENAI.predict(tokens=5000, reused=4200, marks=(1500, 4600), previous_marks=(4100,))
    assert (p.cached, p.written, p.plain) == (1024 + 24 * 128, 0, 5000 - 4096)
    assert OPENAI.predict(tokens=5000, reused=1000, marks=()).cached == 0
    assert OPENAI.predict(tokens=5000, reused=4200, marks=(), cold=True).cached == 0
    assert OPENAI_GPT5.billed(cached=1000, written=0, plain=0) == pytest.approx(100)
    # A client's one breakpoint at the end: what is new is written at Anthropic's premium.
    assert ANTHROPIC.billed_marked_at_end(prompt=3000, cached=1000) == pytest.approx(2600)
    assert OPENAI.billed_marked_at_end(prompt=3000, cached=1000) == pytest.approx(2500)


def test_pricing_by_provider_and_model_family() -> None:
    assert pricing_for("anthropic") is ANTHROPIC
    assert pricing_for("anthropic-1h") is ANTHROPIC_1H
    assert pricing_for("openai", "gpt-4o-mini") is OPENAI
    assert pricing_for("openai", "gpt-5.1").read == 0.1
    assert pricing_for("openai", "gpt-4.1-mini").read == 0.25
    assert ANTHROPIC_1H.write == 2.0
    assert ANTHROPIC_1H.lifetime == 3600
    assert ANTHROPIC.with_lifetime(60).lifetime == 60
    with pytest.raises(ConfigError, match="unknown provider 'gemini'"):
        pricing_for("gemini")
    with pytest.raises(ConfigError, match="`read`"):
        CachePricing(name="x", read=-0.1, write=1.0)
    with pytest.raises(ConfigError, match="`lifetime`"):
        CachePricing(name="x", read=0.1, write=1.0, lifetime=0)


def test_a_pricing_names_the_ttl_its_breakpoints_ask_for() -> None:
    assert (ANTHROPIC.ttl, ANTHROPIC_1H.ttl, OPENAI.ttl) == (None, "1h", None)
    with pytest.raises(ConfigError, match='"5m" or "1h"'):
        CachePricing(name="x", read=0.1, write=1.25, ttl="2h")
    with pytest.raises(ConfigError, match="automatic prefix cache"):
        CachePricing(name="x", read=0.5, write=1.0, breakpoints=False, ttl="1h")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _conversation(n: int) -> list[Message]:
    out = []
    for i in range(n):
        out += [Message.user(f"Question {i} about the order {i * 7}, " + "detail " * 40),
                Message.assistant(f"Answer {i}: the order shipped. " + "words " * 40)]  # fmt: skip
    return out


async def test_a_build_predicts_its_bill_from_its_breakpoints() -> None:
    clock = Clock()
    history = HistorySource(_conversation(12))
    orch = ContextOrchestrator(
        token_counter=COUNTER,
        sources=[PromptSource("You are a shop assistant. " * 20), history,
                 DocsSource(["doc one " * 60, "doc two " * 60]), UserInputSource()],
        model_context_window=8000,
        output_reserve_ratio=0.125,
        state=LayoutState(clock=clock),
    )  # fmt: skip
    first = await orch.build(query="Where is order 21?")
    assert first.layout is not None
    assert first.layout.tail_start < len(first.messages)
    r1 = first.report
    # Nothing cached on a session's first call; written up to the last breakpoint, which
    # ends right before the dynamic tail; the tail and the user turn are billed plain.
    before_tail = COUNTER.count_messages(first.messages[: first.layout.tail_start])
    assert r1.cache_marks[-1] == before_tail
    assert (r1.pricing, r1.predicted_cached, r1.predicted_written) == ("anthropic", 0, before_tail)
    assert r1.predicted_plain == r1.token_count - before_tail > 0
    assert not r1.cache_cold

    history.extend([Message.user("Where is order 21?"), Message.assistant("It shipped.")])
    clock.now += 60
    second = await orch.build(query="And order 28?")
    r2 = second.report
    assert r2.reused_prefix_tokens >= before_tail
    assert r2.predicted_cached == before_tail  # the first call's entry, read
    assert r2.predicted_written == r2.cache_marks[-1] - before_tail
    assert r2.predicted_plain == r2.token_count - r2.cache_marks[-1]

    history.extend([Message.user("And order 28?"), Message.assistant("Delivered.")])
    clock.now += ANTHROPIC.lifetime + 1  # idle past the cache's lifetime
    third = await orch.build(query="Thanks. Order 35?")
    r3 = third.report
    assert r3.cache_cold
    assert r3.predicted_cached == 0
    assert r3.predicted_written == r3.cache_marks[-1]
    assert r3.reused_prefix_tokens > 0  # the prompt repeats, but the cache has expired


async def test_an_openai_build_predicts_its_repeated_prefix_cached_and_nothing_written() -> None:
    history = HistorySource(_conversation(12))
    orch = ContextOrchestrator(
        token_counter=COUNTER,
        sources=[PromptSource("Rules. " * 50), history, UserInputSource()],
        model_context_window=8000,
        pricing=OPENAI,
    )
    await orch.build(query="first")
    history.extend([Message.user("first"), Message.assistant("ok")])
    report = (await orch.build(query="second")).report
    assert report.pricing == "openai"
    assert report.predicted_written == 0
    assert 0 < report.predicted_cached <= report.reused_prefix_tokens
    assert report.reused_prefix_tokens - report.predicted_cached < 128


async def test_the_prediction_round_trips_and_old_reports_without_it_still_load() -> None:
    orch = ContextOrchestrator(token_counter=COUNTER, sources=[PromptSource("Rules."),
                               UserInputSource()], model_context_window=4000)  # fmt: skip
    report = (await orch.build(query="hello")).report
    data = json.loads(json.dumps(report.to_dict()))
    assert data["predicted_plain"] == report.predicted_plain
    assert ContextReport.from_dict(data) == report
    old = {k: v for k, v in data.items() if k not in {"pricing", "predicted_cached",
           "predicted_written", "predicted_plain", "cache_cold", "cache_marks"}}  # fmt: skip
    for loaded in (ContextReport.from_dict(old), report_from_payload(old)):
        assert loaded.pricing == ""
        assert loaded.cache_marks == ()
        assert loaded.blocks == report.blocks  # the whole report, not its summary form
        assert loaded.predicted_plain == loaded.token_count


@given(
    tokens=st.integers(0, 20_000),
    reused=st.integers(-5, 20_000),
    marks=st.lists(st.integers(0, 20_000), max_size=4),
    previous=st.lists(st.integers(0, 20_000), max_size=4),
    cold=st.booleans(),
    pricing=st.sampled_from(sorted(PROVIDERS.values(), key=lambda p: p.name)),
)
def test_a_prediction_splits_the_whole_prompt_and_reads_no_more_than_it_repeats(
    tokens: int,
    reused: int,
    marks: list[int],
    previous: list[int],
    cold: bool,
    pricing: CachePricing,
) -> None:
    p = pricing.predict(
        tokens=tokens, reused=reused, marks=marks, previous_marks=previous, cold=cold
    )
    assert min(p.cached, p.written, p.plain) >= 0
    assert p.tokens == tokens
    assert p.cached <= max(0, reused)
    if cold:
        assert p.cached == 0
    if not pricing.breakpoints:
        assert p.written == 0
    # Never billed above writing all of it, never below reading all of it.
    bill = pricing.bill(p)
    assert pricing.read * tokens - 1e-9 <= bill <= max(pricing.write, pricing.plain) * tokens + 1e-9


async def test_cache_marks_agree_with_counting_each_prefix_whole() -> None:
    schema = {"type": "object", "properties": {"id": {"type": "string"}}}
    tool = {"type": "function", "function": {"name": "find", "description": "Find an order.",
            "parameters": schema}}  # fmt: skip
    history = HistorySource(_conversation(10))
    orch = ContextOrchestrator(
        token_counter=COUNTER,
        sources=[PromptSource("Rules."), ToolSource([tool]), history,
                 DocsSource(["doc " * 80]), UserInputSource()],
        model_context_window=8000,
    )  # fmt: skip
    window = await orch.build(query="order 3?")
    assert window.layout is not None
    ends = {window.layout.prefix_end, *window.layout.breakpoints()}
    whole = {COUNTER.count_messages(window.messages[:e], tools=window.tools) for e in ends}
    assert window.report.cache_marks == tuple(sorted(whole))
    assert cache_marks(COUNTER, window.messages, window.tools, window.layout) == tuple(
        sorted(whole)
    )


async def test_the_repeated_prefix_agrees_with_counting_it_whole() -> None:
    schema = {"type": "object", "properties": {"id": {"type": "string"}}}
    tool = {"type": "function", "function": {"name": "find", "description": "Find an order.",
            "parameters": schema}}  # fmt: skip
    turns = _conversation(12)
    orch = ContextOrchestrator(
        token_counter=COUNTER,
        sources=[PromptSource("Rules."), ToolSource([tool]), HistorySource(turns),
                 DocsSource(["doc " * 80]), UserInputSource()],
        model_context_window=8000,
    )  # fmt: skip
    first = await orch.build(query="order 3?")
    second = await orch.build(query="and order 4?")
    previous = (first.messages, first.tools)
    for messages in (second.messages, first.messages, second.messages[:3], second.messages[:1]):
        total = COUNTER.count_messages(messages, tools=second.tools)
        whole = repeated_prefix_tokens(COUNTER, previous, messages, second.tools)
        assert repeated_prefix_tokens(COUNTER, previous, messages, second.tools, total) == whole
    assert second.report.reused_prefix_tokens == repeated_prefix_tokens(
        COUNTER, previous, second.messages, second.tools
    )
    assert 0 < second.report.reused_prefix_tokens < second.token_count

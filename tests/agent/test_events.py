"""Agent events: the public type strings, fixed types per subclass, and JSON-ready dicts."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import replace
from typing import Any

import pytest

from loomctx.agent.events import (
    AgentEvent,
    AgentEventType,
    ContextAssembled,
    ErrorEvent,
    LLMCompleted,
    LLMTextDelta,
    RetrievalCompleted,
    RetrievedDocument,
    RunCompleted,
    RunStarted,
    ToolCallEvent,
    ToolResultEvent,
    TurnCompleted,
)
from loomctx.agent.llm import Usage
from loomctx.agent.tools import ToolResult
from loomctx.context.billing import CachePrediction, ReportedUsage, unexpected_miss
from loomctx.context.report import BlockReport, ContextReport, SourceReport
from loomctx.messages import ToolCall

BASE = {"run_id": "r1", "agent": "helper", "turn": 2}
USAGE = Usage(input_tokens=10, output_tokens=5, cached_input_tokens=2)
CALL = ToolCall(id="c1", name="search", arguments={"q": "x", "n": [1, 2]})


def test_type_strings_are_pinned_forever() -> None:
    assert {t.name: t.value for t in AgentEventType} == {
        "RUN_STARTED": "run_started",
        "CONTEXT_ASSEMBLED": "context_assembled",
        "RETRIEVAL_COMPLETED": "retrieval_completed",
        "LLM_TEXT_DELTA": "llm_text_delta",
        "LLM_COMPLETED": "llm_completed",
        "TOOL_CALL": "tool_call",
        "TOOL_RESULT": "tool_result",
        "TURN_COMPLETED": "turn_completed",
        "ERROR": "error",
        "RUN_COMPLETED": "run_completed",
    }
    assert AgentEventType.TOOL_CALL == "tool_call"


EVENTS: list[tuple[AgentEvent, AgentEventType, dict[str, Any]]] = [
    (RunStarted(**BASE, prompt="hi"), AgentEventType.RUN_STARTED, {"prompt": "hi"}),
    (
        ContextAssembled(
            **BASE, total_tokens=100, components=3, overflow=0, report={"total_tokens": 100}
        ),
        AgentEventType.CONTEXT_ASSEMBLED,
        {"total_tokens": 100, "components": 3, "overflow": 0, "report": {"total_tokens": 100}},
    ),
    (
        RetrievalCompleted(**BASE, query="orders", documents=[("d1", 0.9, "Orders table…")]),
        AgentEventType.RETRIEVAL_COMPLETED,
        {"query": "orders", "documents": [{"id": "d1", "score": 0.9, "preview": "Orders table…"}]},
    ),
    (LLMTextDelta(**BASE, text="Hel"), AgentEventType.LLM_TEXT_DELTA, {"text": "Hel"}),
    (
        LLMCompleted(**BASE, text="", tool_calls=[CALL], usage=USAGE, finish_reason="tool_calls"),
        AgentEventType.LLM_COMPLETED,
        {
            "text": "",
            "tool_calls": [{"id": "c1", "name": "search", "arguments": {"q": "x", "n": [1, 2]}}],
            "usage": {
                "kind": "usage",
                "input_tokens": 10,
                "output_tokens": 5,
                "cached_input_tokens": 2,
                "cache_write_tokens": 0,
            },
            "finish_reason": "tool_calls",
            "predicted": None,
        },
    ),
    (
        ToolCallEvent(**BASE, call=CALL),
        AgentEventType.TOOL_CALL,
        {"call": {"id": "c1", "name": "search", "arguments": {"q": "x", "n": [1, 2]}}},
    ),
    (
        ToolResultEvent(
            **BASE, call_id="c1", name="search", content="3 rows", is_error=False, elapsed_ms=1.5
        ),
        AgentEventType.TOOL_RESULT,
        {"call_id": "c1", "name": "search", "content": "3 rows", "is_error": False}
        | {"elapsed_ms": 1.5},
    ),
    (
        TurnCompleted(**BASE, usage=None, had_tool_calls=True),
        AgentEventType.TURN_COMPLETED,
        {"usage": None, "had_tool_calls": True},
    ),
    (
        ErrorEvent(**BASE, message="boom", error_type="ProviderError", recoverable=False),
        AgentEventType.ERROR,
        {"message": "boom", "error_type": "ProviderError", "recoverable": False},
    ),
    (
        RunCompleted(**BASE, output="done", turns=2, usage=USAGE, stopped="done"),
        AgentEventType.RUN_COMPLETED,
        {
            "output": "done",
            "turns": 2,
            "usage": {
                "kind": "usage",
                "input_tokens": 10,
                "output_tokens": 5,
                "cached_input_tokens": 2,
                "cache_write_tokens": 0,
            },
            "stopped": "done",
        },
    ),
]


@pytest.mark.parametrize(("event", "kind", "data"), EVENTS, ids=lambda v: type(v).__name__)
def test_each_event_fixes_its_type_and_dumps_to_json(
    event: AgentEvent, kind: AgentEventType, data: dict[str, Any]
) -> None:
    assert event.type is kind
    out = event.to_dict()
    assert out == {"type": kind.value, **BASE, "at": event.at, "parent_run_id": None, **data}
    assert type(out["type"]) is str
    assert json.loads(json.dumps(out)) == out
    assert list(out)[:6] == ["type", "run_id", "agent", "turn", "at", "parent_run_id"]


def test_every_type_has_exactly_one_event_class() -> None:
    assert sorted(kind for _, kind, _ in EVENTS) == sorted(AgentEventType)


def test_type_cannot_be_passed_or_changed() -> None:
    with pytest.raises(TypeError):
        RunStarted(**BASE, prompt="hi", type=AgentEventType.ERROR)  # type: ignore[call-arg]
    event = RunStarted(**BASE, prompt="hi")
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.type = AgentEventType.ERROR  # type: ignore[misc]
    with pytest.raises(TypeError):
        RunStarted("r1", "helper", 2, prompt="hi")  # type: ignore[misc]


def test_at_defaults_to_now_and_events_are_slotted() -> None:
    before = time.time()
    event = LLMTextDelta(**BASE, text="x")
    assert before <= event.at <= time.time()
    assert not hasattr(event, "__dict__")
    assert LLMTextDelta(**BASE, text="x", at=1.0).at == 1.0


def test_a_completed_call_sets_the_provider_s_usage_beside_the_prediction() -> None:
    predicted = CachePrediction(cached=3000, written=400, plain=600)
    usage = Usage(
        input_tokens=4000, output_tokens=9, cached_input_tokens=0, cache_write_tokens=3400
    )
    event = LLMCompleted(**BASE, text="t", usage=usage, finish_reason="stop", predicted=predicted)
    assert event.reported == ReportedUsage(input=4000, cache_read=0, cache_write=3400)
    assert event.to_dict()["predicted"] == {"cached": 3000, "written": 400, "plain": 600}
    assert unexpected_miss(predicted.cached, event.reported)  # 0 read of 3,000 predicted
    assert not unexpected_miss(predicted.cached, replace(event.reported, cache_read=2900))
    assert LLMCompleted(**BASE, text="t", finish_reason="stop").reported is None


def test_sequences_are_stored_as_tuples() -> None:
    completed = LLMCompleted(**BASE, text="t", tool_calls=[CALL], finish_reason="stop")
    assert completed.tool_calls == (CALL,)
    retrieved = RetrievalCompleted(**BASE, query="q", documents=[["d", 0.5, "p"]])
    assert retrieved.documents == (RetrievedDocument(id="d", score=0.5, preview="p"),)
    assert retrieved.documents[0].score == 0.5


def test_context_assembled_from_report() -> None:
    report = ContextReport(
        window=1000,
        output_reserve=200,
        available=800,
        token_count=500,
        overhead_tokens=20,
        token_counter="o200k_base",
        sources=(
            SourceReport(
                name="memory", priority=0.5, allocated=400, offered=900, used=450,
                blocks_offered=3, blocks_kept=2,
            ),
            SourceReport(
                name="kb", priority=0.4, allocated=100, offered=0, used=0, blocks_offered=0,
                blocks_kept=0, status="timeout", error="timed out",
            ),
        ),
        blocks=(
            BlockReport(id="a", source="memory", section="memory", offered_tokens=300,
                        used_tokens=300, status="kept"),
            BlockReport(id="b", source="memory", section="memory", offered_tokens=600,
                        used_tokens=0, status="dropped", reason="budget"),
        ),
    )  # fmt: skip
    event = ContextAssembled.from_report(report, **BASE)
    assert ContextAssembled.from_report(report, **BASE, parent_run_id="r0").parent_run_id == "r0"
    assert (event.type, event.total_tokens, event.components, event.overflow) == (
        AgentEventType.CONTEXT_ASSEMBLED,
        500,
        1,
        100,
    )
    assert event.report == json.loads(json.dumps({**report.to_dict(), **report.summary()}))
    assert json.loads(json.dumps(event.to_dict()))["report"] == event.report


def test_tool_result_event_from_result() -> None:
    result = ToolResult(call_id="c1", name="f", content="oops", is_error=True, elapsed_ms=2.0)
    event = ToolResultEvent.from_result(result, **BASE)
    assert event.parent_run_id is None
    assert ToolResultEvent.from_result(result, **BASE, parent_run_id="r0").parent_run_id == "r0"
    assert event.type is AgentEventType.TOOL_RESULT
    assert (event.call_id, event.name, event.content, event.is_error, event.elapsed_ms) == (
        "c1",
        "f",
        "oops",
        True,
        2.0,
    )
    assert (event.run_id, event.agent, event.turn) == ("r1", "helper", 2)

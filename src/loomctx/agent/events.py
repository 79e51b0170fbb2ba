"""The events an agent run streams: small frozen dataclasses with a `type` discriminator.

Every event carries the run's id, the agent's name, the turn (0 before the first LLM call), the
time (`time.time()`) and, for a sub-agent's run, `parent_run_id`: the run that delegated to it.
A parent's stream carries its sub-agents' events too, so a UI nests a run's events under the
run named by their `parent_run_id`. Each subclass adds its data and fixes its `type`.
`to_dict()` gives plain JSON types with `type` as its string. The `AgentEventType` values are
public strings, stored and matched on by users: they never change.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

from loomctx.agent.llm import Usage
from loomctx.context.billing import CachePrediction, ReportedUsage
from loomctx.messages import ToolCall

if TYPE_CHECKING:
    from loomctx.context.report import ContextReport

__all__ = [
    "AgentEvent",
    "AgentEventType",
    "ContextAssembled",
    "ErrorEvent",
    "FinishedCall",
    "LLMCompleted",
    "LLMTextDelta",
    "RetrievalCompleted",
    "RetrievedDocument",
    "RunCompleted",
    "RunStarted",
    "ToolCallEvent",
    "ToolResultEvent",
    "TurnCompleted",
]


class AgentEventType(enum.StrEnum):
    """What an event reports; the values are public and permanent."""

    RUN_STARTED = "run_started"
    CONTEXT_ASSEMBLED = "context_assembled"
    RETRIEVAL_COMPLETED = "retrieval_completed"
    LLM_TEXT_DELTA = "llm_text_delta"
    LLM_COMPLETED = "llm_completed"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    TURN_COMPLETED = "turn_completed"
    ERROR = "error"
    RUN_COMPLETED = "run_completed"


def _jsonable(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if hasattr(value, "_asdict"):  # a NamedTuple: keep its field names
        return {k: _jsonable(v) for k, v in value._asdict().items()}
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentEvent:
    """The fields every event has; subclasses fix `type` and add their data."""

    type: AgentEventType
    run_id: str
    agent: str
    turn: int
    at: float = field(default_factory=time.time)
    parent_run_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types (`type` as its string, tuples as lists), stable field names."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStarted(AgentEvent):
    """A run began with `prompt`."""

    type: AgentEventType = field(default=AgentEventType.RUN_STARTED, init=False)
    prompt: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextAssembled(AgentEvent):
    """The window for the next LLM call was built: its size, parts, what did not fit.

    `report` is the whole `ContextReport.to_dict()` (every source and block, what was kept,
    cut or dropped and why) plus the `summary()` totals: what `loomctx inspect` renders.
    """

    type: AgentEventType = field(default=AgentEventType.CONTEXT_ASSEMBLED, init=False)
    total_tokens: int
    components: int
    overflow: int
    report: dict[str, Any] = field(default_factory=dict, hash=False)

    @classmethod
    def from_report(
        cls,
        report: ContextReport,
        *,
        run_id: str,
        agent: str,
        turn: int,
        parent_run_id: str | None = None,
    ) -> ContextAssembled:
        """The event for a build's `ContextReport`."""
        summary = report.summary()
        return cls(
            run_id=run_id,
            agent=agent,
            turn=turn,
            parent_run_id=parent_run_id,
            total_tokens=summary["total_tokens"],
            components=summary["components"],
            overflow=summary["overflow"],
            report={**report.to_dict(), **summary},
        )


class RetrievedDocument(NamedTuple):
    """One retrieved document: its id, its score and the start of its text."""

    id: str
    score: float
    preview: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RetrievalCompleted(AgentEvent):
    """Retrieval for `query` returned `documents`, best first."""

    type: AgentEventType = field(default=AgentEventType.RETRIEVAL_COMPLETED, init=False)
    query: str
    documents: tuple[RetrievedDocument, ...] = ()

    def __post_init__(self) -> None:
        docs = tuple(RetrievedDocument(*d) for d in self.documents)
        object.__setattr__(self, "documents", docs)


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMTextDelta(AgentEvent):
    """A piece of the reply's text, as it streams."""

    type: AgentEventType = field(default=AgentEventType.LLM_TEXT_DELTA, init=False)
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMCompleted(AgentEvent):
    """The LLM call ended: the whole text, the tool calls, the usage and the finish reason.

    `predicted` is what the call's window predicted the provider's cache would bill
    (`ContextReport.predicted_cached` and the rest, `loomctx.context.billing`), set beside
    what the provider reported (`usage`; `reported` is it as the cache's receipt)."""

    type: AgentEventType = field(default=AgentEventType.LLM_COMPLETED, init=False)
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    finish_reason: str
    predicted: CachePrediction | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))

    @property
    def reported(self) -> ReportedUsage | None:
        """The provider's `usage` of the prompt: all of it, read from and written to the
        cache (None when the provider reported no usage)."""
        if self.usage is None:
            return None
        return ReportedUsage(
            input=self.usage.input_tokens,
            cache_read=self.usage.cached_input_tokens,
            cache_write=self.usage.cache_write_tokens,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallEvent(AgentEvent):
    """A tool call is about to run."""

    type: AgentEventType = field(default=AgentEventType.TOOL_CALL, init=False)
    call: ToolCall


class FinishedCall(Protocol):
    """What a `ToolResultEvent` is made from: a finished tool call, as
    `loomctx.agent.tools.ToolResult` is one. Named here, not imported, so that the events
    stay below the tools (whose `ToolContext` emits events)."""

    @property
    def call_id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def content(self) -> str: ...

    @property
    def is_error(self) -> bool: ...

    @property
    def elapsed_ms(self) -> float: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResultEvent(AgentEvent):
    """A tool call finished (`is_error`: it failed, and `content` says why)."""

    type: AgentEventType = field(default=AgentEventType.TOOL_RESULT, init=False)
    call_id: str
    name: str
    content: str
    is_error: bool = False
    elapsed_ms: float = 0.0

    @classmethod
    def from_result(
        cls,
        result: FinishedCall,
        *,
        run_id: str,
        agent: str,
        turn: int,
        parent_run_id: str | None = None,
    ) -> ToolResultEvent:
        """The event for a `ToolResult`."""
        return cls(
            run_id=run_id,
            agent=agent,
            turn=turn,
            parent_run_id=parent_run_id,
            call_id=result.call_id,
            name=result.name,
            content=result.content,
            is_error=result.is_error,
            elapsed_ms=result.elapsed_ms,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnCompleted(AgentEvent):
    """A turn ended: its usage, and whether it ran tools (if so, another turn follows)."""

    type: AgentEventType = field(default=AgentEventType.TURN_COMPLETED, init=False)
    usage: Usage | None = None
    had_tool_calls: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorEvent(AgentEvent):
    """Something failed: `recoverable` says whether the run goes on."""

    type: AgentEventType = field(default=AgentEventType.ERROR, init=False)
    message: str
    error_type: str
    recoverable: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class RunCompleted(AgentEvent):
    """The run ended: its output, turns, total usage, and why it stopped."""

    type: AgentEventType = field(default=AgentEventType.RUN_COMPLETED, init=False)
    output: str
    turns: int
    usage: Usage | None = None
    stopped: Literal["done", "max_turns", "cancelled", "error"]

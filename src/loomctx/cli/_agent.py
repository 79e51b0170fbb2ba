"""The model the commands talk to, and one agent turn with its window's report.

`choose_llm` picks the provider `LOOM_MODEL` (or the `model` setting) names through
`llm_from_env`, or the clearly labelled `OfflineResponder` when none is configured.
`ask` runs one `Agent` turn, hands the reply's text to `on_text` as it streams, and returns
the reply with the report of the last window built for it, and, when the agent's LLM is a
`RecordingLLM`, every window of the turn with the exact messages and tools sent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from loomctx.agent.events import (
    AgentEvent,
    ContextAssembled,
    LLMCompleted,
    LLMTextDelta,
    RunCompleted,
)
from loomctx.agent.executor import Agent
from loomctx.agent.llm import LLM, LLMChunk, LLMOptions
from loomctx.agent.providers import llm_from_env
from loomctx.cli._offline import OfflineResponder
from loomctx.cli._reports import report_from_payload
from loomctx.context.billing import ReportedUsage
from loomctx.context.report import ContextReport
from loomctx.messages import Message

__all__ = ["Answer", "RecordingLLM", "SentWindow", "ask", "choose_llm"]

OFFLINE_HINT = "no LLM configured: set LOOM_MODEL to use one"


def choose_llm(model: str | None, environ: Mapping[str, str], *, offline: bool) -> tuple[LLM, str]:
    """The LLM to use and a line describing it."""
    if offline:
        return OfflineResponder(), "offline responder (--offline)"
    env = dict(environ)
    if model:
        env["LOOM_MODEL"] = model
    llm = llm_from_env(env)
    if llm is None:
        return OfflineResponder(), f"offline responder ({OFFLINE_HINT})"
    return llm, llm.name


class RecordingLLM:
    """`inner`, keeping what each call sent: `sent` holds (messages, tools) per call of the
    current turn (`ask` clears it), in order. So the chat can save the exact text of every
    window with its report."""

    def __init__(self, inner: LLM) -> None:
        self.inner = inner
        self.name = inner.name
        self.sent: list[tuple[tuple[Message, ...], tuple[Mapping[str, Any], ...]]] = []

    def __getattr__(self, name: str) -> Any:
        # What the agent reads of its LLM besides `stream` (`model`, an `AnthropicLLM`'s
        # `calibration`) is the inner one's, so recording changes nothing else.
        return getattr(self.inner, name)

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        options: LLMOptions | None = None,
    ) -> AsyncIterator[LLMChunk]:
        self.sent.append((tuple(messages), tuple(tools)))
        return self.inner.stream(messages, tools=tools, options=options)


@dataclass(frozen=True, slots=True, kw_only=True)
class SentWindow:
    """One model call of a turn: its window's report, what was sent, and the prompt's usage
    as the provider reported it (None if it reported none)."""

    report: ContextReport
    messages: tuple[Message, ...] = ()
    tools: tuple[Mapping[str, Any], ...] = ()
    usage: ReportedUsage | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """A turn's reply, the report of its last window, how many windows were built, and
    each of them (`calls`, in order; their messages when the LLM was a `RecordingLLM`)."""

    text: str
    report: ContextReport
    windows: int
    calls: tuple[SentWindow, ...] = ()


async def ask(
    agent: Agent,
    prompt: str,
    *,
    on_text: Callable[[str], None] | None = None,
    on_event: Callable[[AgentEvent], None] | None = None,
    events: IO[str] | None = None,
) -> Answer:
    """Run one turn of `agent` on `prompt`; `events` receives each event as a JSON line."""
    text = ""
    report: ContextReport | None = None
    windows = 0
    recorder = agent.llm if isinstance(agent.llm, RecordingLLM) else None
    if recorder is not None:  # this turn's calls only: a long chat must not keep them all
        recorder.sent.clear()
    # Each window's report, and the index in `recorder.sent` of the call it was built for:
    # the call right after its event (a sub-agent's calls come later, during tool calls).
    built: list[tuple[ContextReport, int]] = []
    reported: dict[int, ReportedUsage] = {}  # by the index in `built` of the call's window
    async for event in agent.stream(prompt):
        if events is not None:
            events.write(json.dumps(event.to_dict(), ensure_ascii=False) + "\n")
        if on_event is not None:
            on_event(event)
        if event.parent_run_id is not None:
            continue  # a sub-agent's event: its windows are its own
        if isinstance(event, ContextAssembled):
            windows += 1
            report = report_from_payload(event.report, window=agent.window.model_context_window)
            built.append((report, len(recorder.sent) if recorder is not None else -1))
        elif isinstance(event, LLMCompleted) and event.reported is not None and built:
            reported[len(built) - 1] = event.reported
        elif isinstance(event, LLMTextDelta) and on_text is not None:
            on_text(event.text)
        elif isinstance(event, RunCompleted):
            text = event.output
    assert report is not None, "every run builds a window before its first model call"
    calls = []
    for k, (r, at) in enumerate(built):
        usage = reported.get(k)
        if recorder is not None and 0 <= at < len(recorder.sent):
            messages, tools = recorder.sent[at]
            calls.append(SentWindow(report=r, messages=messages, tools=tools, usage=usage))
        else:  # no recorder, or the run ended before the call (a failed build)
            calls.append(SentWindow(report=r, usage=usage))
    return Answer(text=text, report=report, windows=windows, calls=tuple(calls))

"""The model the commands talk to, and one agent turn with its window's report.

`choose_llm` picks the provider `LOOM_MODEL` (or the `model` setting) names through
`llm_from_env`, or the clearly labelled `OfflineResponder` when none is configured.
`ask` runs one `Agent` turn, hands the reply's text to `on_text` as it streams, and returns
the reply with the report of the last window built for it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO

from loomctx.agent.events import AgentEvent, ContextAssembled, LLMTextDelta, RunCompleted
from loomctx.agent.executor import Agent
from loomctx.agent.llm import LLM
from loomctx.agent.providers import llm_from_env
from loomctx.cli._offline import OfflineResponder
from loomctx.cli._reports import report_from_payload
from loomctx.context.report import ContextReport

__all__ = ["Answer", "ask", "choose_llm"]

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


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """A turn's reply, the report of its last window, and how many windows were built."""

    text: str
    report: ContextReport
    windows: int


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
    async for event in agent.stream(prompt):
        if events is not None:
            events.write(json.dumps(event.to_dict(), ensure_ascii=False) + "\n")
        if on_event is not None:
            on_event(event)
        if event.parent_run_id is not None:
            continue  # a sub-agent's event: its windows are its own
        if isinstance(event, ContextAssembled):
            windows += 1
            report = report_from_payload(event.report, window=agent.model_context_window)
        elif isinstance(event, LLMTextDelta) and on_text is not None:
            on_text(event.text)
        elif isinstance(event, RunCompleted):
            text = event.output
    assert report is not None, "every run builds a window before its first model call"
    return Answer(text=text, report=report, windows=windows)

"""The one scoring code for Loom and every peer: a window as it would be sent, judged.

A window is what a strategy hands the model, in OpenAI's chat-completions format:
``{"messages": [...], "tools": [...]}`` (a peer that does not manage tools still sends the
workload's tools: the agent defines them on every call). Every window a run builds is scored,
never a sample of them, so a violation is counted, not assumed away:

- `tokens`: counted by Loom's `TokenCounter` (o200k by default) with the provider's
  per-message overhead and the tool definitions, the same way for every strategy;
- `over_budget`: more tokens than the input budget (window less the reply's reserve);
- `split_tool_units`: tool calls whose results are not all right after them, and tool
  results without their call right before them (a provider rejects both);
- `tool_units`: tool calls kept as calls (a strategy may flatten them to text: not split,
  but not calls either);
- `system_present`: the first message is a system message holding the system prompt;
- `query_present`: the query is in the last user message;
- `documents`: how many of the workload's knowledge documents have a sentence in the window.

`summarize` pools one strategy's build times and window scores into p50 / p95 and totals.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from loomctx.errors import ConfigError, MessageFormatError
from loomctx.messages import from_openai
from loomctx.tokens import TokenCounter

__all__ = ["DocumentProbe", "WindowScore", "percentile", "score_window", "summarize"]

_SENTENCE: Final = re.compile(r"(?<=[.!?])\s+|\n+")
_PROBE_CHARS: Final = 40


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowScore:
    """One window, judged (see the module docstring)."""

    tokens: int
    over_budget: bool
    split_tool_units: int
    tool_units: int
    system_present: bool
    query_present: bool
    documents: int


class DocumentProbe:
    """Tells which documents have text in a window: each document's sentences of at least
    40 characters, looked for verbatim (a chunk cut mid-sentence still shows its whole ones)."""

    def __init__(self, documents: Sequence[str]) -> None:
        self.probes = [
            [s.strip() for s in _SENTENCE.split(doc) if len(s.strip()) >= _PROBE_CHARS]
            for doc in documents
        ]

    def count(self, text: str) -> int:
        """How many documents have at least one sentence in `text`."""
        return sum(1 for probes in self.probes if any(p in text for p in probes))


def percentile(samples: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0..100) of `samples`, nearest rank; 0.0 for none."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[rank]


def _split_units(messages: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """(split tool units, tool units kept as calls) of OpenAI-format messages."""
    split = units = 0
    pending: set[str] = set()
    for m in messages:
        if m.get("role") == "tool":
            call_id = str(m.get("tool_call_id", ""))
            if call_id in pending:
                pending.discard(call_id)
            else:
                split += 1  # a result without its call right before it
            continue
        if pending:
            split += 1  # the call before this message lacks results
            pending = set()
        calls = m.get("tool_calls") or []
        if m.get("role") == "assistant" and calls:
            units += 1
            pending = {str(c.get("id", "")) for c in calls}
    if pending:
        split += 1
    return split, units


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # text parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def score_window(
    window: Mapping[str, Any],
    *,
    counter: TokenCounter,
    available: int,
    system: str,
    query: str,
    documents: DocumentProbe,
) -> WindowScore:
    """`window` (``{"messages": [...], "tools": [...]}``, OpenAI format) judged against the
    input budget `available`, the workload's `system` prompt, the `query` it was built for and
    its `documents`. A malformed window raises `ConfigError` naming what is wrong."""
    raw = window.get("messages")
    if not isinstance(raw, list) or not all(isinstance(m, Mapping) for m in raw):
        raise ConfigError(f"a window's `messages` must be a list of objects, got {raw!r:.80}")
    tools = window.get("tools") or []
    if not isinstance(tools, list):
        raise ConfigError(f"a window's `tools` must be a list, got {tools!r:.80}")
    try:
        messages = from_openai(raw)
    except MessageFormatError as exc:
        raise ConfigError(f"a window's messages are not OpenAI chat messages: {exc}") from None
    tokens = counter.count_messages(messages, tools=tools)
    split, units = _split_units(raw)
    users = [m for m in messages if m.role == "user"]
    first = messages[0] if messages else None
    return WindowScore(
        tokens=tokens,
        over_budget=tokens > available,
        split_tool_units=split,
        tool_units=units,
        system_present=first is not None and first.role == "system" and system in first.content,
        query_present=bool(users) and query in users[-1].content,
        documents=documents.count("\n".join(_text(m.get("content")) for m in raw)),
    )


def summarize(
    samples_ms: Sequence[float], scores: Sequence[WindowScore], *, available: int
) -> dict[str, Any]:
    """One strategy's builds: latency p50 / p95 (ms), mean tokens and utilization of the
    input budget, and the counted violations and presences over every scored window."""
    n = len(scores)
    mean_tokens = statistics.fmean(s.tokens for s in scores) if scores else 0.0
    return {
        "builds": len(samples_ms),
        "p50_ms": round(percentile(samples_ms, 50), 3),
        "p95_ms": round(percentile(samples_ms, 95), 3),
        "windows": n,
        "mean_tokens": round(mean_tokens, 1),
        "max_tokens": max((s.tokens for s in scores), default=0),
        "utilization": round(mean_tokens / available, 4) if available else 0.0,
        "over_budget": sum(s.over_budget for s in scores),
        "split_tool_units": sum(s.split_tool_units for s in scores),
        "tool_units": round(statistics.fmean(s.tool_units for s in scores), 1) if n else 0.0,
        "system_present": sum(s.system_present for s in scores),
        "query_present": sum(s.query_present for s in scores),
        "documents": round(statistics.fmean(s.documents for s in scores), 1) if n else 0.0,
    }

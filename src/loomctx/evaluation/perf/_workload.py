"""The workload of `loomctx bench perf`, built the same way for Loom and every peer.

- a system prompt and 5 tool definitions;
- a history of N LoCoMo turns, cycled with a counter (``(#2)``) past the end of the file so
  that every turn is distinct; even turns are the user's, odd turns the assistant's, and
  before every `TOOL_EVERY`-th turn's reply the assistant calls a tool and gets its result (a
  tool unit: what must stay whole);
- `documents` knowledge documents written from LoCoMo's session summaries and observations
  (text that is not in the history, so that a document found in a window came from the
  knowledge base);
- the queries builds rotate over: LoCoMo questions;
- the continuation: the exchanges that follow the history, one per call, for the billed
  tokens of a conversation that goes on.

`to_json` is what a peer's adapter reads (see `loomctx.evaluation.perf.peers`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from loomctx.errors import ConfigError
from loomctx.evaluation.datasets import load_locomo, read_json
from loomctx.messages import Message, ToolCall, to_openai

__all__ = ["SYSTEM", "TOOLS", "Source", "Workload", "build_workload", "load_source"]

TOOL_EVERY: Final = 10
"""One tool unit before the reply of every 10th turn."""

SYSTEM: Final = (
    "You are a helpful assistant with a long memory of this conversation. Answer from the "
    "conversation, the reference notes and your tools; say so when you do not know. Cite dates."
)


def _tool(name: str, description: str, *params: str) -> dict[str, Any]:
    props = {p: {"type": "string", "description": f"The {p}."} for p in params}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": list(params)},
        },
    }


TOOLS: Final = (
    _tool("search_notes", "Search the notes of earlier conversations for a fact.", "query"),
    _tool("get_calendar", "List calendar events between two dates.", "start", "end"),
    _tool("send_message", "Send a message to a friend.", "to", "text"),
    _tool("get_weather", "Current weather for a city.", "city"),
    _tool("run_sql", "Run a read-only SQL query on the notes database.", "sql"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """What the workload is made of, read once from a LoCoMo file."""

    turns: tuple[str, ...]  # "Speaker: text", in conversation order
    documents: tuple[str, ...]
    questions: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """One size of the workload (see the module docstring)."""

    n: int
    history: tuple[Message, ...]
    tool_units: int
    documents: tuple[str, ...]
    queries: tuple[str, ...]
    continuation: tuple[tuple[str, str], ...]  # (the user's turn, the reply), one per call
    window: int
    reserve: int

    @property
    def available(self) -> int:
        """The input budget: the window less the tokens kept for the reply."""
        return self.window - self.reserve

    def to_json(self, *, builds: int, time_limit: float) -> dict[str, Any]:
        """The workload as a peer's adapter reads it (OpenAI-format messages and tools)."""
        return {
            "n": self.n,
            "window": self.window,
            "reserve": self.reserve,
            "system": SYSTEM,
            "tools": list(TOOLS),
            "history": to_openai(self.history),
            "documents": list(self.documents),
            "queries": list(self.queries),
            "builds": builds,
            "time_limit": time_limit,
        }


def load_source(path: str | Path, *, documents: int = 200, questions: int = 8) -> Source:
    """Turns, `documents` knowledge documents and `questions` queries from a LoCoMo file."""
    if documents < 1 or questions < 1:
        raise ConfigError(
            f"`documents` and `questions` must be >= 1, got {documents!r} and {questions!r}"
        )
    conversations = load_locomo(path)
    turns = tuple(f"{t.speaker}: {t.text}" for c in conversations for t in c.turns)
    asked = [q.question for c in conversations for q in c.questions]
    step = max(1, len(asked) // questions)
    chosen = tuple(dict.fromkeys(asked[::step]))[:questions]
    docs = _documents(path)
    if len(docs) < documents:
        raise ConfigError(
            f"{str(path)!r} yields {len(docs)} knowledge documents (session summaries and "
            f"observations), fewer than the {documents} asked for: ask for fewer"
        )
    return Source(turns=turns, documents=tuple(docs[:documents]), questions=chosen)


def _documents(path: str | Path) -> list[str]:
    """One document per session summary and one per session's observations, interleaved."""
    out: list[str] = []
    for item in read_json(path):
        sample = str(item.get("sample_id", "conversation"))
        summaries: Mapping[str, Any] = item.get("session_summary") or {}
        observations: Mapping[str, Any] = item.get("observation") or {}
        for key in sorted(summaries, key=_session_number):
            number = _session_number(key)
            out.append(f"Notes on {sample}, session {number}.\n\n{summaries[key]}")
            seen = observations.get(f"session_{number}_observation") or {}
            lines = [
                f"- {entry[0]}"
                for facts in seen.values()
                for entry in facts
                if isinstance(entry, list) and entry and isinstance(entry[0], str)
            ]
            if lines:
                out.append(f"Observations on {sample}, session {number}.\n\n" + "\n".join(lines))
    return out


def _session_number(key: str) -> int:
    digits = "".join(ch for ch in key.split("_")[1] if ch in "0123456789") if "_" in key else ""
    return int(digits) if digits else 0


def _turn(source: Source, i: int) -> str:
    base = source.turns[i % len(source.turns)]
    lap = i // len(source.turns)
    return base if lap == 0 else f"{base} (#{lap + 1})"


def build_workload(
    source: Source,
    n: int,
    *,
    calls: int = 20,
    window: int = 8000,
    reserve: int = 1000,
) -> Workload:
    """The workload with a history of `n` turns and `calls` exchanges to continue with."""
    if n < 2:
        raise ConfigError(f"the history needs at least 2 turns, got n={n!r}")
    if not 0 < reserve < window:
        raise ConfigError(f"`reserve` must be within 1..{window - 1}, got {reserve!r}")
    history: list[Message] = []
    units = 0
    for i in range(n):
        text = _turn(source, i)
        if i % 2 == 0:
            history.append(Message.user(text))
            continue
        if i % TOOL_EVERY == TOOL_EVERY - 1:
            call = ToolCall(
                id=f"call_{i}", name="search_notes", arguments={"query": _turn(source, i - 1)[:60]}
            )
            found = _turn(source, (i * 7) % max(1, i))[:200]
            history.append(Message.assistant(tool_calls=[call]))
            history.append(Message.tool(f"1 note found: {found}", tool_call_id=call.id))
            units += 1
        history.append(Message.assistant(text))
    start = n + (n % 2)  # the next user turn
    continuation = tuple(
        (_turn(source, start + 2 * k), _turn(source, start + 2 * k + 1)) for k in range(calls)
    )
    return Workload(
        n=n,
        history=tuple(history),
        tool_units=units,
        documents=source.documents,
        queries=source.questions,
        continuation=continuation,
        window=window,
        reserve=reserve,
    )

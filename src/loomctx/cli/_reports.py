"""Getting a `ContextReport` back from what was saved: a report's JSON, an agent event, or a
run's event log (JSONL, one `AgentEvent.to_dict()` per line).

A `context_assembled` event carries the report of its window. When it carries the whole
report (``ContextReport.to_dict()`` fields), it is read as is; when it carries the summary
form only (totals and per-source numbers, no blocks), the report is rebuilt from those with
`window` as the model's window, and its `blocks` are empty: which blocks were left out is
then known per source only (`left_out` says so).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from loomctx.context.report import BlockReport, ContextReport, SourceReport, source_fields
from loomctx.errors import ConfigError
from loomctx.messages import Message, ToolCall
from loomctx.stores.base import Get, MemoryStore, Put, Record, Scan

__all__ = [
    "WINDOW_FORMAT",
    "SavedWindow",
    "list_knowledge_bases",
    "list_sessions",
    "list_windows",
    "load_reports",
    "load_window",
    "next_turn",
    "report_from_event",
    "report_from_payload",
    "save_window",
]

_FULL: Final = frozenset(f.name for f in fields(ContextReport))
_SOURCE: Final = frozenset(f.name for f in fields(SourceReport))
_BLOCK: Final = frozenset(f.name for f in fields(BlockReport))
_EVENT: Final = "context_assembled"


def _only(data: Mapping[str, Any], names: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k in names}


def report_from_payload(data: Mapping[str, Any], *, window: int | None = None) -> ContextReport:
    """A report from its JSON form, or from a `context_assembled` event's `report` payload
    (`window`: the model's window, needed only for the summary form)."""
    try:
        if data.keys() >= _FULL:
            full = _only(data, _FULL)
            full["sources"] = [_only(source_fields(s), _SOURCE) for s in data["sources"]]
            full["blocks"] = [_only(b, _BLOCK) for b in data["blocks"]]
            return ContextReport.from_dict(full)
        available = int(data["available"])
        total = int(data["total_tokens"])
        sources = tuple(
            SourceReport(priority=0.0, **_only(source_fields(s), _SOURCE - {"priority"}))
            for s in data["sources"]
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"not a context report: {type(exc).__name__} {exc}; expected the JSON of "
            "`ContextReport.to_dict()` or a `context_assembled` event"
        ) from None
    window = available if window is None else window
    return ContextReport(
        window=window,
        output_reserve=max(0, window - available),
        available=available,
        token_count=total,
        overhead_tokens=max(0, total - sum(s.used for s in sources)),
        token_counter=str(data.get("token_counter", "")),
        sources=sources,
        blocks=(),
    )


def report_from_event(event: Mapping[str, Any], *, window: int | None = None) -> ContextReport:
    """The report a `context_assembled` event (as a dict) carries."""
    if event.get("type") != _EVENT or not isinstance(event.get("report"), Mapping):
        raise ConfigError(f"not a `{_EVENT}` event with a `report`: {str(dict(event))[:120]!r}")
    return report_from_payload(event["report"], window=window)


def _from_item(item: Any, where: str) -> list[ContextReport]:
    if isinstance(item, Mapping) and item.get("type") == _EVENT:
        return [report_from_event(item)]
    if isinstance(item, Mapping) and "type" in item:
        return []  # another kind of event in a run's log
    if isinstance(item, Mapping):
        return [report_from_payload(item)]
    raise ConfigError(f"{where}: expected a JSON object (a report or an event)")


def load_reports(path: Path) -> list[ContextReport]:
    """Every report in a file: a report's JSON, an event, a list of them, or JSONL lines."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {str(path)!r}: {exc}") from None
    items: Sequence[Any]
    try:
        data = json.loads(text)
        items = data if isinstance(data, list) else [data]
    except json.JSONDecodeError:
        try:
            items = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{str(path)!r} is neither JSON nor JSONL: {exc}") from None
    reports = [r for n, item in enumerate(items, 1) for r in _from_item(item, f"item {n}")]
    if not reports:
        raise ConfigError(
            f"{str(path)!r} holds no context report; save one with `loomctx chat --events FILE` "
            "or `ContextReport.to_dict()`"
        )
    return reports


# --- windows saved per session: the report and the exact messages sent ----------------------

WINDOW_FORMAT: Final = 1
_WINDOWS: Final = ("cli", "windows")
_SESSIONS: Final = ("cli", "sessions")
_WINDOW: Final = "context_window"
_MESSAGE: Final = "window_message"
_SESSION: Final = "chat_session"
_OLD_REPORTS: Final = ("cli", "reports")


@dataclass(frozen=True, slots=True, kw_only=True)
class SavedWindow:
    """One model call's window as `loomctx chat` saved it: which user `turn` of the session
    and which model `call` of that turn (both from 1), the user's `prompt`, the `report`, and
    the exact `messages` and `tools` sent (empty for windows saved before messages were)."""

    session: str
    turn: int
    call: int
    prompt: str
    saved_at: str
    report: ContextReport
    messages: tuple[Message, ...] = ()
    tools: tuple[Mapping[str, Any], ...] = ()


def _message_dict(m: Message) -> dict[str, Any]:
    return {
        "role": m.role,
        "content": m.content,
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": dict(c.arguments)} for c in m.tool_calls
        ],
        "tool_call_id": m.tool_call_id,
        "name": m.name,
        "is_error": m.is_error,
    }


def _message_of(data: Mapping[str, Any]) -> Message:
    return Message(
        role=data["role"],
        content=data.get("content", ""),
        tool_calls=tuple(
            ToolCall(id=c["id"], name=c["name"], arguments=c.get("arguments", {}))
            for c in data.get("tool_calls", ())
        ),
        tool_call_id=data.get("tool_call_id"),
        name=data.get("name"),
        is_error=bool(data.get("is_error", False)),
    )


def _digest(data: Any) -> str:
    text = json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def save_window(
    store: MemoryStore,
    *,
    session: str,
    turn: int,
    call: int,
    prompt: str,
    report: ContextReport,
    messages: Sequence[Message],
    tools: Sequence[Mapping[str, Any]],
) -> None:
    """Keep one model call's window: its report and the exact messages and tools sent.

    The layout (documented in docs/cli.md, "Saved windows", for other readers such as a web
    inspector):

    - ``("cli", "windows", session)``, key ``window:<turn 6 digits>:<call 3 digits>``, kind
      ``context_window``: ``{"format", "session", "turn", "call", "prompt", "saved_at",
      "report": ContextReport.to_dict(), "messages": [message key, ...], "tools": tools key}``;
    - the same namespace, key ``message:<sha256 of the message, 32 hex>``, kind
      ``window_message``: one message ``{"role", "content", "tool_calls": [{"id", "name",
      "arguments"}], "tool_call_id", "name", "is_error"}``; key ``tools:<sha256>`` the tool
      schemas as sent. Messages and tools are stored once however many windows repeat them
      (a conversation's history is in every window), so a session's windows take about the
      size of its distinct messages plus each call's dynamic tail;
    - ``("cli", "sessions")``, key the session, kind ``chat_session``: ``{"session", "turns",
      "windows", "first_at", "last_at"}``, what `list_sessions` reads.

    Records carry no text: search and background embedding never see them.
    """
    ns = (*_WINDOWS, session)
    by_key: dict[str, Any] = {}
    order = []
    for m in messages:
        data = _message_dict(m)
        key = f"message:{_digest(data)}"
        by_key.setdefault(key, data)
        order.append(key)
    tools_data = [dict(t) for t in tools]
    tools_key = f"tools:{_digest(tools_data)}"
    keys = [*by_key, tools_key]
    index_key = session
    found = store.batch(
        [Get(namespace=ns, key=k) for k in keys] + [Get(namespace=_SESSIONS, key=index_key)]
    )
    now = datetime.now(UTC).isoformat()
    puts = [
        Put(record=Record(namespace=ns, key=k, kind=_MESSAGE, text="", data=by_key[k]))
        for k, rec in zip(keys[:-1], found, strict=False)
        if rec is None
    ]
    if found[len(keys) - 1] is None:
        puts.append(
            Put(
                record=Record(
                    namespace=ns, key=tools_key, kind=_MESSAGE, text="", data={"tools": tools_data}
                )
            )
        )
    window = {
        "format": WINDOW_FORMAT,
        "session": session,
        "turn": turn,
        "call": call,
        "prompt": prompt,
        "saved_at": now,
        "report": report.to_dict(),
        "messages": order,
        "tools": tools_key,
    }
    puts.append(
        Put(
            record=Record(
                namespace=ns,
                key=f"window:{turn:06d}:{call:03d}",
                kind=_WINDOW,
                text="",
                data=window,
            )
        )
    )
    old = found[-1]
    index = dict(old.data) if old is not None else {"session": session, "first_at": now}
    index.update(
        turns=max(int(index.get("turns", 0)), turn),
        windows=int(index.get("windows", 0)) + 1,
        last_at=now,
    )
    puts.append(
        Put(record=Record(namespace=_SESSIONS, key=index_key, kind=_SESSION, text="", data=index))
    )
    store.batch(puts)


def next_turn(store: MemoryStore, session: str) -> int:
    """The number the next user turn of `session` gets (1 for the first), counting the
    turns saved by earlier versions too."""
    found = store.batch(
        [
            Get(namespace=_SESSIONS, key=session),
            Scan(
                prefix=(*_OLD_REPORTS, session), kind="context_report", newest_first=True, limit=1
            ),
        ]
    )
    index, old = found
    turns = int(index.data.get("turns", 0)) if index is not None else 0
    if old:
        turns = max(turns, int(old[0].key.partition(":")[2]))
    return turns + 1


def list_sessions(store: MemoryStore) -> list[dict[str, Any]]:
    """Every session with saved windows, oldest first: ``{"session", "turns", "windows",
    "first_at", "last_at"}`` (sessions saved by earlier versions: turns and windows only)."""
    index, old = store.batch(
        [
            Scan(prefix=_SESSIONS, kind=_SESSION, exact=True),
            Scan(prefix=_OLD_REPORTS, kind="context_report"),
        ]
    )
    out = {str(r.key): dict(r.data) for r in index}
    legacy: dict[str, int] = {}
    for r in old:
        legacy[r.namespace[-1]] = legacy.get(r.namespace[-1], 0) + 1
    for name, n in legacy.items():
        if name not in out:
            out[name] = {
                "session": name,
                "turns": n,
                "windows": n,
                "first_at": None,
                "last_at": None,
            }
    return sorted(out.values(), key=lambda e: (e.get("first_at") or "", e["session"]))


def list_windows(store: MemoryStore, session: str) -> list[tuple[int, int]]:
    """The (turn, call) of every window saved for `session`, in order."""
    found: list[Record] = store.batch(
        [Scan(prefix=(*_WINDOWS, session), kind=_WINDOW, exact=True)]
    )[0]
    return sorted((int(r.data["turn"]), int(r.data["call"])) for r in found)


def load_window(
    store: MemoryStore, session: str, *, turn: int | None = None, call: int | None = None
) -> SavedWindow | None:
    """A saved window of `session`: of user `turn` (default: the last) and model `call` of
    it (default: the turn's last), with its messages; None if there is none. Falls back to
    the reports earlier versions saved (one per turn, no messages)."""
    ns = (*_WINDOWS, session)
    found: list[Record] = store.batch([Scan(prefix=ns, kind=_WINDOW, exact=True)])[0]
    if found:
        chosen = [r for r in found if turn is None or int(r.data["turn"]) == turn]
        if turn is None and chosen:
            last = max(int(r.data["turn"]) for r in chosen)
            chosen = [r for r in chosen if int(r.data["turn"]) == last]
        if call is not None:
            chosen = [r for r in chosen if int(r.data["call"]) == call]
        if not chosen:
            return None
        rec = max(chosen, key=lambda r: (int(r.data["turn"]), int(r.data["call"])))
        data = rec.data
        keys = [*data["messages"], data["tools"]]
        loaded = store.batch([Get(namespace=ns, key=k) for k in keys])
        missing = [k for k, r in zip(keys, loaded, strict=True) if r is None]
        if missing:
            raise ConfigError(
                f"session {session!r}, window {data['turn']}.{data['call']}: "
                f"{len(missing)} stored message(s) are missing; the store was edited by hand?"
            )
        return SavedWindow(
            session=session,
            turn=int(data["turn"]),
            call=int(data["call"]),
            prompt=str(data.get("prompt", "")),
            saved_at=str(data.get("saved_at", "")),
            report=report_from_payload(data["report"]),
            messages=tuple(_message_of(r.data) for r in loaded[:-1]),
            tools=tuple(loaded[-1].data["tools"]),
        )
    if call not in (None, 1):
        return None
    scan = Scan(prefix=(*_OLD_REPORTS, session), kind="context_report", newest_first=True)
    old: list[Record] = store.batch([scan])[0]
    for r in old:
        n = int(r.key.partition(":")[2])
        if turn is None or n == turn:
            return SavedWindow(
                session=session,
                turn=n,
                call=1,
                prompt="",
                saved_at="",
                report=report_from_payload(r.data),
            )
    return None


def list_knowledge_bases(store: MemoryStore) -> list[dict[str, Any]]:
    """Every knowledge base in `store`: ``{"name", "documents"}``, by name."""
    found: list[Record] = store.batch([Scan(prefix=("knowledge",), kind="kb_document")])[0]
    counts: dict[str, int] = {}
    for r in found:
        if len(r.namespace) == 2:
            counts[r.namespace[1]] = counts.get(r.namespace[1], 0) + 1
    return [{"name": n, "documents": c} for n, c in sorted(counts.items())]

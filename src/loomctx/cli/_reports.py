"""Getting a `ContextReport` back from what was saved: a report's JSON, an agent event, or a
run's event log (JSONL, one `AgentEvent.to_dict()` per line).

A `context_assembled` event carries the report of its window. When it carries the whole
report (``ContextReport.to_dict()`` fields), it is read as is; when it carries the summary
form only (totals and per-source numbers, no blocks), the report is rebuilt from those with
`window` as the model's window, and its `blocks` are empty: which blocks were left out is
then known per source only (`left_out` says so).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from loomctx.context.billing import ReportedUsage
from loomctx.context.report import ContextReport
from loomctx.errors import ConfigError
from loomctx.messages import Message
from loomctx.session.windows import WINDOW_FORMAT, SavedWindow, WindowLog, report_from_payload
from loomctx.stores.base import Get, MemoryStore, Record, Scan

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

_EVENT: Final = "context_assembled"


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


# --- windows saved per session: the record is `loomctx.session.windows`'s -----------------

_SESSIONS: Final = ("cli", "sessions")
_OLD_REPORTS: Final = ("cli", "reports")


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
    model: str = "",
    usage: ReportedUsage | None = None,
) -> None:
    """Keep one model call's window (its report, the exact messages and tools sent, and the
    `usage` the provider reported) in the ``("cli",)`` scope of `store`; the layout is
    `loomctx.session.windows`'s."""
    WindowLog(store, ("cli",)).save(
        SavedWindow(
            session=session,
            turn=turn,
            call=call,
            prompt=prompt,
            saved_at="",
            report=report,
            messages=tuple(messages),
            tools=tuple(tools),
            model=model,
            usage=usage,
        )
    )


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
    old: list[Record] = store.batch([Scan(prefix=_OLD_REPORTS, kind="context_report")])[0]
    out = {e["session"]: e for e in WindowLog(store, ("cli",)).sessions()}
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
    return WindowLog(store, ("cli",)).calls(session)


def load_window(
    store: MemoryStore, session: str, *, turn: int | None = None, call: int | None = None
) -> SavedWindow | None:
    """A saved window of `session`: of user `turn` (default: the last) and model `call` of
    it (default: the turn's last), with its messages; None if there is none. Falls back to
    the reports earlier versions saved (one per turn, no messages)."""
    log = WindowLog(store, ("cli",))
    if log.records(session):
        return log.load(session, turn=turn, call=call)
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
    """Every knowledge base in `store`: ``{"name", "documents"}``, by name; a served
    tenant's, kept at ``(tenant, "knowledge", kb)``, is named ``tenant/kb``."""
    found: list[Record] = store.batch([Scan(prefix=(), kind="kb_document")])[0]
    counts: dict[str, int] = {}
    for r in found:
        ns = r.namespace
        name = (
            ns[1]
            if len(ns) == 2 and ns[0] == "knowledge"
            else f"{ns[0]}/{ns[2]}"
            if len(ns) == 3 and ns[1] == "knowledge"
            else None
        )
        if name is not None:
            counts[name] = counts.get(name, 0) + 1
    return [{"name": n, "documents": c} for n, c in sorted(counts.items())]

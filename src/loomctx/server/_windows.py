"""The proxy's saved windows: each window it sends upstream is kept as a
`loomctx.session.windows` record in the tenant's scope (``(tenant, "windows", session)``),
the same record `loomctx chat` writes, so the web inspector reads both alike.

No read of its own: the turn and call numbers, the session's running totals and the keys of
the previous window's messages ride in the proxy's per-session state, which the proxy reads
and writes once per request anyway (one read, one write per request: the window's records
join that write). A message the previous window held is not written again (history repeats
in every window: rewriting it made the write 17x slower, `bench/inspector_bench.py`); any
other is written without asking whether it is stored (a repeat write is the same record).
The window is written first and the state after it, so the keys never name a message that
was not written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from loomctx.context.orchestrator import ContextWindow
from loomctx.server._config import ModelConfig
from loomctx.session.windows import SESSION_KIND, WINDOW_KIND, SavedWindow, WindowLog
from loomctx.stores.base import MemoryStore, Put

__all__ = ["window_log", "window_ops"]


class ChatRequest(Protocol):
    """What a window's record takes from the proxy's request (`loomctx.server._proxy`'s
    `ChatRequest` is one): named here so that this module stays below the proxy."""

    @property
    def session(self) -> str: ...

    @property
    def model(self) -> ModelConfig: ...

    @property
    def conversation(self) -> tuple[Mapping[str, Any], ...]: ...


class Prepared(Protocol):
    """What a window's record takes from the proxy's prepared call (its `Prepared`)."""

    window: ContextWindow | None
    turn: str
    report_id: str | None


def window_log(store: MemoryStore, tenant: str) -> WindowLog:
    """The saved windows of `tenant`."""
    return WindowLog(store, (tenant,))


def _prompt(request: ChatRequest) -> str:
    for m in reversed(request.conversation):
        if m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return " ".join(
                    str(p.get("text", "")) for p in content if isinstance(p, dict)
                ).strip()
    return ""


def window_ops(
    log: WindowLog,
    request: ChatRequest,
    prepared: Prepared,
    state: dict[str, Any],
    report: Mapping[str, Any],
) -> list[Put]:
    """The writes that save `prepared`'s window (whose ``report.to_dict()`` is `report`) in
    `log`, the tenant's; updates `state` (the proxy's state of the session, written by the
    caller) with the window's turn, call and the session's totals."""
    window = prepared.window
    if window is None:
        return []
    seen = dict(state.get("window") or {})
    if seen.get("turn_id") == prepared.turn:
        turn, call = int(seen.get("turn", 1)), int(seen.get("call", 0)) + 1
    else:
        turn, call = int(seen.get("turn", 0)) + 1, 1
    saved = SavedWindow(
        session=request.session,
        turn=turn,
        call=call,
        prompt=_prompt(request),
        saved_at="",
        report=window.report,
        messages=window.messages,
        tools=window.tools,
        model=request.model.name,
        report_id=prepared.report_id or "",
    )
    known = frozenset(seen.get("keys") or ())
    ops = log.ops(saved, index=seen.get("totals"), known=known, report=report)
    totals = next(op.record.data for op in reversed(ops) if op.record.kind == SESSION_KIND)
    record = next(op.record.data for op in reversed(ops) if op.record.kind == WINDOW_KIND)
    state["window"] = {
        "turn_id": prepared.turn,
        "turn": turn,
        "call": call,
        "totals": totals,
        "keys": sorted({*record["messages"], record["tools"]}),  # as `ops` digested them
    }
    return ops

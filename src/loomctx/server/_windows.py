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

The provider's usage of the prompt is known only once the reply ends (on a stream, after the
response's headers left): `usage_op` adds it to the window's record then, as
``"usage": {"input", "cache_read", "cache_write"}`` beside the report's prediction, where the
inspector and `loomctx inspect --cache` read both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol

from loomctx.context.billing import ReportedUsage
from loomctx.context.orchestrator import ContextWindow
from loomctx.server._config import ModelConfig
from loomctx.session.windows import SESSION_KIND, WINDOW_KIND, SavedWindow, WindowLog
from loomctx.stores.base import MemoryStore, Put, Record

__all__ = ["reported_usage", "usage_op", "window_log", "window_ops"]


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
    window_record: Record | None


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
    prepared.window_record = next(
        op.record for op in reversed(ops) if op.record.kind == WINDOW_KIND
    )
    record = prepared.window_record.data
    state["window"] = {
        "turn_id": prepared.turn,
        "turn": turn,
        "call": call,
        "totals": totals,
        "keys": sorted({*record["messages"], record["tools"]}),  # as `ops` digested them
    }
    return ops


def reported_usage(usage: Mapping[str, Any] | None) -> ReportedUsage | None:
    """The prompt's usage in an OpenAI-shaped ``usage`` (``prompt_tokens``, and under
    ``prompt_tokens_details`` ``cached_tokens`` and ``cache_write_tokens``, which the
    Anthropic upstream fills from ``cache_creation_input_tokens``); None without one."""
    if not isinstance(usage, Mapping) or "prompt_tokens" not in usage:
        return None
    details = usage.get("prompt_tokens_details") or {}
    return ReportedUsage(
        input=int(usage.get("prompt_tokens") or 0),
        cache_read=int(details.get("cached_tokens") or 0),
        cache_write=int(details.get("cache_write_tokens") or 0),
    )


def usage_op(record: Record, usage: ReportedUsage) -> Put:
    """The write that adds the provider's reported `usage` to a saved window's `record`."""
    return Put(record=replace(record, data={**record.data, "usage": usage.to_dict()}))

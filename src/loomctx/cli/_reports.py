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
from dataclasses import fields
from pathlib import Path
from typing import Any, Final

from loomctx.context.report import BlockReport, ContextReport, SourceReport
from loomctx.errors import ConfigError

__all__ = ["load_reports", "report_from_event", "report_from_payload"]

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
            full["sources"] = [_only(s, _SOURCE) for s in data["sources"]]
            full["blocks"] = [_only(b, _BLOCK) for b in data["blocks"]]
            return ContextReport.from_dict(full)
        available = int(data["available"])
        total = int(data["total_tokens"])
        sources = tuple(
            SourceReport(priority=0.0, **_only(s, _SOURCE - {"priority"})) for s in data["sources"]
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

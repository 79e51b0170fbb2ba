"""Saved windows: one record per model call, the exact messages and tools sent with the
report of how they were chosen. `loomctx chat` and `loomctx serve`'s proxy write the same
record (`WindowLog`), the web inspector and `loomctx inspect` read it.

Layout in a `MemoryStore`, under a `scope` (``("cli",)`` for `loomctx chat`, ``(tenant,)``
when served, so a tenant's windows are read only under its own name; DESIGN.md invariant 6):

- ``(*scope, "windows", session)``, key ``window:<turn 6 digits>:<call 3 digits>``, kind
  ``context_window``: ``{"format", "session", "turn", "call", "prompt", "model",
  "report_id", "saved_at", "report": ContextReport.to_dict(), "messages": [message key, ...],
  "tools": tools key}`` and, once the provider answered, ``"usage": {"input", "cache_read",
  "cache_write"}`` (`loomctx.context.billing.ReportedUsage`: what it reported, to set beside
  the report's prediction);
- the same namespace, key ``message:<sha256 of the message, 32 hex>``, kind
  ``window_message``: one message ``{"role", "content", "tool_calls": [{"id", "name",
  "arguments"}], "tool_call_id", "name", "is_error"}`` (and ``"parts"``, OpenAI content
  parts, when it holds images or files); key ``tools:<sha256>``: the tool
  schemas as sent. A message is stored once however many windows repeat it (a conversation's
  history is in every window), so a session's windows take about the size of its distinct
  messages plus each call's dynamic tail;
- ``(*scope, "sessions")``, key the session, kind ``chat_session``: ``{"session", "turns",
  "windows", "tokens", "new_tokens", "first_at", "last_at", "model"}``: totals so far, what
  `sessions` lists without reading any window.

Records carry no text field: lexical search and background embedding never see them (the
inspector's search reads the messages itself, one session at a time).

Writing is split from reading so that a caller with its own read-then-write batch (the proxy
does one read and one write per request) can add the window's writes to it: `ops` takes the
session's previous totals and returns the `Put`s; `save` is read, `ops`, write.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from datetime import UTC, datetime
from typing import Any, Final

from loomctx.context.billing import ReportedUsage
from loomctx.context.report import BlockReport, ContextReport, SourceReport, source_fields
from loomctx.errors import ConfigError
from loomctx.messages import Message, ToolCall
from loomctx.parts import part_from_openai, part_to_openai
from loomctx.stores.base import Get, MemoryStore, Put, Record, Scan

__all__ = [
    "WINDOW_FORMAT",
    "SavedWindow",
    "WindowLog",
    "message_dict",
    "report_from_payload",
    "usage_of",
]

WINDOW_FORMAT: Final = 1
WINDOW_KIND: Final = "context_window"
MESSAGE_KIND: Final = "window_message"
SESSION_KIND: Final = "chat_session"

_KEY_CACHE: Final = 4096  # messages whose key a log keeps (L1 holds 50 tasks a session)

# A full report has every field without a default (later fields have defaults: older
# reports lack them and still load whole).
_FULL: Final = frozenset(f.name for f in fields(ContextReport))
_REQUIRED: Final = frozenset(
    f.name for f in fields(ContextReport) if f.default is MISSING and f.default_factory is MISSING
)
_SOURCE: Final = frozenset(f.name for f in fields(SourceReport))
_BLOCK: Final = frozenset(f.name for f in fields(BlockReport))


def _only(data: Mapping[str, Any], names: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k in names}


def report_from_payload(data: Mapping[str, Any], *, window: int | None = None) -> ContextReport:
    """A report from its JSON form, or from a `context_assembled` event's `report` payload
    (`window`: the model's window, needed only for the summary form, which has no blocks)."""
    try:
        if data.keys() >= _REQUIRED:
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


@dataclass(frozen=True, slots=True, kw_only=True)
class SavedWindow:
    """One model call's window: which user `turn` of the session and which model `call` of
    that turn (both from 1), the user's `prompt`, the `report`, the exact `messages` and
    `tools` sent (empty for windows saved before messages were), the `model` it went to,
    the proxy's `report_id` (empty when not served) and the prompt's `usage` as the provider
    reported it (None: not known, or not yet)."""

    session: str
    turn: int
    call: int
    prompt: str
    saved_at: str
    report: ContextReport
    messages: tuple[Message, ...] = ()
    tools: tuple[Mapping[str, Any], ...] = ()
    model: str = ""
    report_id: str = ""
    usage: ReportedUsage | None = None


def usage_of(data: Mapping[str, Any]) -> ReportedUsage | None:
    """The reported usage a window record holds (None if it holds none)."""
    usage = data.get("usage")
    return ReportedUsage.from_dict(usage) if isinstance(usage, Mapping) else None


def message_dict(m: Message) -> dict[str, Any]:
    """A message as the record stores it (plain JSON)."""
    data: dict[str, Any] = {
        "role": m.role,
        "content": m.content,
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": dict(c.arguments)} for c in m.tool_calls
        ],
        "tool_call_id": m.tool_call_id,
        "name": m.name,
        "is_error": m.is_error,
    }
    if m.parts:
        data["parts"] = [part_to_openai(p) for p in m.parts]
    return data


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
        parts=tuple(part_from_openai(j, p) for j, p in enumerate(data.get("parts", ()))),
    )


def _digest(data: Any) -> str:
    text = json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def window_key(turn: int, call: int) -> str:
    """The key of window `turn`.`call` in its session's namespace."""
    return f"window:{turn:06d}:{call:03d}"


class WindowLog:
    """The saved windows of one scope of a store (see the module docstring)."""

    def __init__(self, store: MemoryStore, scope: Sequence[str] = ("cli",)) -> None:
        if not scope or not all(isinstance(p, str) and p for p in scope):
            raise ConfigError(f"a window log's scope must be non-empty names, got {scope!r}")
        self.store = store
        self.scope = tuple(scope)
        self.index_namespace = (*self.scope, "sessions")
        self._keys: OrderedDict[int, tuple[Message, str, dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()

    def _message_key(self, m: Message) -> tuple[str, dict[str, Any]]:
        """A message's key and record data. Kept by message object (held, so its id is not
        reused): a window repeats the history of the one before, and digesting it again
        took a third of the proxy's window write."""
        with self._lock:
            hit = self._keys.get(id(m))
            if hit is not None and hit[0] is m:
                self._keys.move_to_end(id(m))
                return hit[1], hit[2]
        data = message_dict(m)
        key = f"message:{_digest(data)}"
        with self._lock:
            self._keys[id(m)] = (m, key, data)
            while len(self._keys) > _KEY_CACHE:
                self._keys.popitem(last=False)
        return key, data

    def namespace(self, session: str) -> tuple[str, ...]:
        """Where `session`'s windows and messages are."""
        return (*self.scope, "windows", session)

    # --- writing ----------------------------------------------------------------------------

    def index_get(self, session: str) -> Get:
        """The read `ops` wants the result of (the session's totals so far)."""
        return Get(namespace=self.index_namespace, key=session)

    def ops(
        self,
        window: SavedWindow,
        *,
        index: Record | Mapping[str, Any] | None,
        known: frozenset[str] = frozenset(),
        report: Mapping[str, Any] | None = None,
    ) -> list[Put]:
        """The writes that save `window`, given the session's totals so far (`index`: the
        record `index_get` read, or its data, or None for a new session). Messages whose key
        is in `known` are not written again; the others are (a repeated write of a message
        is the same record, so a caller that cannot read first loses nothing but bytes).
        `report`: the window's ``report.to_dict()``, if the caller made it already."""
        session = window.session
        ns = self.namespace(session)
        by_key: dict[str, dict[str, Any]] = {}
        order = []
        for m in window.messages:
            key, data = self._message_key(m)
            by_key.setdefault(key, data)
            order.append(key)
        tools_data = [dict(t) for t in window.tools]
        tools_key = f"tools:{_digest(tools_data)}"
        puts = [
            Put(record=Record(namespace=ns, key=k, kind=MESSAGE_KIND, text="", data=d))
            for k, d in by_key.items()
            if k not in known
        ]
        if tools_key not in known:
            puts.append(
                Put(
                    record=Record(
                        namespace=ns,
                        key=tools_key,
                        kind=MESSAGE_KIND,
                        text="",
                        data={"tools": tools_data},
                    )
                )
            )
        saved_at = window.saved_at or datetime.now(UTC).isoformat()
        data = {
            "format": WINDOW_FORMAT,
            "session": session,
            "turn": window.turn,
            "call": window.call,
            "prompt": window.prompt,
            "model": window.model,
            "report_id": window.report_id,
            "saved_at": saved_at,
            "report": dict(report) if report is not None else window.report.to_dict(),
            "messages": order,
            "tools": tools_key,
        }
        if window.usage is not None:
            data["usage"] = window.usage.to_dict()
        puts.append(
            Put(
                record=Record(
                    namespace=ns,
                    key=window_key(window.turn, window.call),
                    kind=WINDOW_KIND,
                    text="",
                    data=data,
                )
            )
        )
        old = dict(index.data if isinstance(index, Record) else index or {})
        totals = {"session": session, "first_at": saved_at, **old}
        totals.update(
            turns=max(int(totals.get("turns", 0)), window.turn),
            windows=int(totals.get("windows", 0)) + 1,
            tokens=int(totals.get("tokens", 0)) + window.report.token_count,
            new_tokens=int(totals.get("new_tokens", 0)) + window.report.new_tokens,
            last_at=saved_at,
            model=window.model or totals.get("model", ""),
        )
        puts.append(
            Put(
                record=Record(
                    namespace=self.index_namespace,
                    key=session,
                    kind=SESSION_KIND,
                    text="",
                    data=totals,
                )
            )
        )
        return puts

    @staticmethod
    def keys(window: SavedWindow) -> list[str]:
        """The keys `window`'s messages and tools are stored under (distinct, in order)."""
        keys = list(dict.fromkeys(f"message:{_digest(message_dict(m))}" for m in window.messages))
        keys.append(f"tools:{_digest([dict(t) for t in window.tools])}")
        return keys

    def save(self, window: SavedWindow) -> None:
        """Keep one window: one read (totals, and which messages are stored), one write."""
        ns = self.namespace(window.session)
        keys = self.keys(window)
        found = self.store.batch(
            [Get(namespace=ns, key=k) for k in keys] + [self.index_get(window.session)]
        )
        known = frozenset(k for k, r in zip(keys, found, strict=False) if r is not None)
        self.store.batch(self.ops(window, index=found[-1], known=known))

    # --- reading ----------------------------------------------------------------------------

    def sessions(self) -> list[dict[str, Any]]:
        """Every session with saved windows, oldest first, with its totals (see the module
        docstring)."""
        scan = Scan(prefix=self.index_namespace, kind=SESSION_KIND, exact=True)
        found: list[Record] = self.store.batch([scan])[0]
        out = [{"session": str(r.key), **dict(r.data)} for r in found]
        return sorted(out, key=lambda e: (str(e.get("first_at") or ""), e["session"]))

    def session(self, session: str) -> dict[str, Any] | None:
        """One session's totals, or None if it has no saved window."""
        found = self.store.batch([self.index_get(session)])[0]
        return None if found is None else {"session": session, **dict(found.data)}

    def records(self, session: str, *, after_seq: int = 0) -> list[Record]:
        """The window records of `session` (report and message keys, no messages), in order;
        only those written after the store's write `after_seq` (see `Record.seq`) if given."""
        scan = Scan(
            prefix=self.namespace(session), kind=WINDOW_KIND, exact=True, after_seq=after_seq
        )
        found: list[Record] = self.store.batch([scan])[0]
        return sorted(found, key=lambda r: (int(r.data["turn"]), int(r.data["call"])))

    def calls(self, session: str) -> list[tuple[int, int]]:
        """The (turn, call) of every window saved for `session`, in order."""
        return [(int(r.data["turn"]), int(r.data["call"])) for r in self.records(session)]

    def load(
        self, session: str, *, turn: int | None = None, call: int | None = None
    ) -> SavedWindow | None:
        """A saved window of `session`: of user `turn` (default: the last) and model `call`
        of it (default: the turn's last), with its messages; None if there is none."""
        found = self.records(session)
        if turn is None and found:
            turn = int(found[-1].data["turn"])
        chosen = [
            r
            for r in found
            if int(r.data["turn"]) == turn and (call is None or int(r.data["call"]) == call)
        ]
        return self.materialize(chosen[-1]) if chosen else None

    def loaded(self, record: Record) -> list[Record | None]:
        """The message and tools records a window record names (None where missing)."""
        data = record.data
        keys = [*data["messages"], data["tools"]]
        ns = record.namespace
        return list(self.store.batch([Get(namespace=ns, key=k) for k in keys]))

    def materialize(self, record: Record) -> SavedWindow:
        """The `SavedWindow` of a window record, its messages read from the store."""
        data = record.data
        loaded = self.loaded(record)
        missing = sum(1 for r in loaded if r is None)
        if missing:
            raise ConfigError(
                f"session {data['session']!r}, window {data['turn']}.{data['call']}: "
                f"{missing} stored message(s) are missing; the store was edited by hand?"
            )
        return SavedWindow(
            session=str(data["session"]),
            turn=int(data["turn"]),
            call=int(data["call"]),
            prompt=str(data.get("prompt", "")),
            saved_at=str(data.get("saved_at", "")),
            report=report_from_payload(data["report"]),
            messages=tuple(_message_of(r.data) for r in loaded[:-1] if r is not None),
            tools=tuple(loaded[-1].data["tools"]) if loaded[-1] is not None else (),
            model=str(data.get("model", "")),
            report_id=str(data.get("report_id", "")),
            usage=usage_of(data),
        )

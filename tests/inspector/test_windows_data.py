"""The saved-window record (`WindowLog`) and what the inspector computes from it: the diff
between calls, search, pricing; on real SQLite files, with reports from real builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from loomctx import ContextOrchestrator, Message, SQLiteStore, TiktokenCounter
from loomctx.context.sources import HistorySource, PromptSource, UserInputSource
from loomctx.errors import ConfigError
from loomctx.server._inspect_data import Pricing, diff_windows, search_text, timeline
from loomctx.session import SavedWindow, WindowLog


def _window(
    session: str, turn: int, history: list[Message], query: str, **kw: object
) -> SavedWindow:
    built = ContextOrchestrator(
        token_counter=TiktokenCounter(),
        sources=[PromptSource("Be brief."), HistorySource(history), UserInputSource()],
        model_context_window=2000,
    ).build_sync(query=query)
    return SavedWindow(
        session=session,
        turn=turn,
        call=1,
        prompt=query,
        saved_at="",
        report=built.report,
        messages=built.messages,
        tools=built.tools,
        **kw,  # type: ignore[arg-type]
    )


HISTORY = [Message.user("The staging port is 8443."), Message.assistant("Noted: 8443.")]


def test_windows_are_kept_per_scope_with_running_totals(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "w.db")
    try:
        acme, globex = WindowLog(store, ("acme",)), WindowLog(store, ("globex",))
        first = _window("s1", 1, [], "Hi", model="m")
        second = _window("s1", 2, HISTORY, "Which port?", model="m")
        acme.save(first)
        acme.save(second)
        assert acme.calls("s1") == [(1, 1), (2, 1)]
        assert globex.calls("s1") == []
        assert globex.session("s1") is None
        totals = acme.session("s1")
        assert totals is not None
        assert (totals["turns"], totals["windows"], totals["model"]) == (2, 2, "m")
        assert totals["tokens"] == first.report.token_count + second.report.token_count
        loaded = acme.load("s1")
        assert loaded is not None
        assert (loaded.turn, loaded.messages, loaded.model) == (2, second.messages, "m")
        assert acme.load("s1", turn=3) is None
        # A message repeated by the second window is stored once.
        keys = [r.key for r in store.scan(acme.namespace("s1"), kind="window_message")]
        assert len(keys) == len(set(keys))
    finally:
        store.close()


def test_a_scope_must_name_something() -> None:
    with pytest.raises(ConfigError, match="scope"):
        WindowLog(None, ())  # type: ignore[arg-type]


def test_the_diff_names_the_first_changed_message_and_the_blocks(tmp_path: Path) -> None:
    before = _window("s", 1, HISTORY[:1], "Which port?")
    after = _window("s", 2, HISTORY, "Which host?")
    diff = diff_windows(before, after)
    assert diff.previous == "1.1"
    assert diff.same_messages == 2  # the system message and the first history message
    assert diff.first_change is not None
    assert diff.first_change.startswith("assistant: 'Noted: 8443.'")
    assert "message 3" in diff.cause
    assert diff.added  # the new history block
    assert not diff.tools_changed
    same = diff_windows(before, before)
    assert same.first_change is None
    assert "prefix" in same.cause
    tools = diff_windows(before, SavedWindow(**{**_fields(before), "tools": ({"name": "x"},)}))
    assert tools.tools_changed
    assert "tool schemas" in tools.cause


def _fields(w: SavedWindow) -> dict[str, object]:
    return {name: getattr(w, name) for name in w.__slots__}  # type: ignore[attr-defined]


def test_search_finds_the_calls_and_when_the_text_left(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "w.db")
    try:
        log = WindowLog(store)
        log.save(_window("s", 1, HISTORY, "Which port?"))
        log.save(_window("s", 2, [], "Something else"))
        log.save(_window("t", 1, [], "Nothing here"))
        hits = search_text(log, "  PORT is 8443 ", ["s", "t"])
        assert [h.session for h in hits] == ["s"]
        assert [p[:2] for p in hits[0].present] == [(1, 1)]
        assert [left[:2] for left in hits[0].left] == [(2, 1)]
        with pytest.raises(ConfigError, match="search for what"):
            search_text(log, "  ", ["s"])
        rows = timeline(log, "s", Pricing.named("openai"))
        assert [r.label for r in rows] == ["1.1", "2.1"]
        assert rows[0].billed == rows[0].report.token_count  # nothing cached: 1.0 per token
    finally:
        store.close()


def test_pricing() -> None:
    anthropic = Pricing.named("anthropic", usd_per_mtok=3.0)
    assert anthropic.billed(1000, 100) == pytest.approx(1000 * 0.1 + 100 * 1.25)
    assert anthropic.label(1_000_000) == "1,000,000 billed tok · $3.0000"
    assert Pricing.named("openai").label(10) == "10 billed tok"
    with pytest.raises(ConfigError, match="unknown pricing 'x'"):
        Pricing.named("x")
    with pytest.raises(ConfigError, match="negative"):
        Pricing.named("openai", usd_per_mtok=-1)

"""The web inspector in a real browser (Chromium through Playwright): every view loads with no
console error, the timeline has one bar per call sized as the reports say, a call's page
shows its text and what was left out, the diff names the blocks that changed, untrusted text
never runs, new calls appear live, and each view passes an accessibility check.

The accessibility check is our own, run in the page (`A11Y`), not axe-core: it needs no
package from the network at test time and checks what these pages can get wrong: a `main`
landmark and one `h1`, a label for every form field, a name for every graphic (`role=img`
with `aria-label`), links with text, table headers with a scope, and WCAG AA contrast (4.5:1,
3:1 for large text) of every text against its effective background, colours as computed.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from loomctx.cli._reports import save_window
from loomctx.session.windows import WindowLog
from loomctx.stores.sqlite import SQLiteStore
from tests.inspector._replay import PAYLOAD, SESSION, TOOL_TURN
from tests.inspector.conftest import Page, Served

A11Y = (Path(__file__).parent / "a11y.js").read_text(encoding="utf-8")


def _records(served: Served) -> list[Any]:
    store = SQLiteStore(served.path)
    try:
        return WindowLog(store).records(SESSION)
    finally:
        store.close()


def _views(served: Served) -> dict[str, str]:
    return {
        "sessions": f"{served.url}/inspect",
        "timeline": f"{served.url}/inspect/s/{SESSION}",
        "window": f"{served.url}/inspect/s/{SESSION}/w/{TOOL_TURN}/2",
        "search": f"{served.url}/inspect/search?q=checkout",
    }


def test_every_view_loads_without_console_errors_and_is_screenshotted(
    page: Page, served: Served, artifacts: Any
) -> None:
    for name, url in _views(served).items():
        response = page.page.goto(url)
        assert response is not None, name
        assert response.status == 200, name
        page.page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)
        assert page.errors == [], f"{name}: {page.errors}"


def test_the_timeline_has_one_bar_per_call_sized_as_the_reports_say(
    page: Page, served: Served
) -> None:
    records = _records(served)
    assert len(records) == sum(served.calls) == 9  # turn 3 made a tool call: two calls
    page.page.goto(f"{served.url}/inspect/s/{SESSION}")
    bars = page.page.locator("tr.call-row svg.bar")
    assert bars.count() == len(records)
    scale = max(int(r.data["report"]["window"]) for r in records)
    for i, record in enumerate(records):
        report = record.data["report"]
        bar = bars.nth(i)
        width = bar.bounding_box()["width"]
        segments = bar.locator("rect.seg")
        tokens = [
            int(segments.nth(j).get_attribute("data-tokens")) for j in range(segments.count())
        ]
        assert sum(tokens) == report["token_count"]
        by_source = {
            segments.nth(j).get_attribute("data-source"): tokens[j] for j in range(len(tokens))
        }
        for s in report["sources"]:
            if s["used"]:
                assert by_source[s["name"]] == s["used"]
        # The drawn length of the whole stack is the window's share of the scale, in pixels.
        drawn = sum(segments.nth(j).bounding_box()["width"] for j in range(segments.count()))
        assert drawn == pytest.approx(width * report["token_count"] / scale, abs=1.5)
        cached = bar.locator("rect.cached")
        if report["reused_prefix_tokens"]:
            assert int(cached.get_attribute("data-tokens")) == report["reused_prefix_tokens"]
            assert cached.bounding_box()["width"] == pytest.approx(
                width * report["reused_prefix_tokens"] / scale, abs=1.5
            )
        else:
            assert cached.count() == 0
        budget = bar.locator("line.budget").bounding_box()
        assert budget["x"] - bar.bounding_box()["x"] + budget["width"] / 2 == pytest.approx(
            width * report["available"] / scale, abs=2
        )
    # Compactions are marked on their call's row, with the sizes before and after.
    rows = page.page.locator("tr.call-row")
    compacted = 0
    for i, record in enumerate(records):
        notes = rows.nth(i).locator("td").last.inner_text()
        for c in record.data["report"]["compactions"]:
            assert f"{c['action']} {c['tokens_before']:,}→{c['tokens_after']:,}" in notes
            compacted += c["action"] == "compacted"
        if not record.data["report"]["compactions"]:
            assert "compacted" not in notes
    assert compacted  # the small window compacts history within eight turns
    # Later calls repeat the earlier prompt: some of them are cached.
    assert any(r.data["report"]["reused_prefix_tokens"] for r in records)


def test_clicking_a_call_shows_its_text_and_what_was_left_out(page: Page, served: Served) -> None:
    records = _records(served)
    last = records[-1]
    turn, call = last.data["turn"], last.data["call"]
    page.page.goto(f"{served.url}/inspect/s/{SESSION}")
    page.page.get_by_role("link", name=f"call {turn}.{call}", exact=True).click()
    page.page.wait_for_url(f"**/w/{turn}/{call}")
    messages = page.page.locator("section.msg")
    assert messages.count() == len(last.data["messages"])
    assert last.data["prompt"] in messages.last.inner_text()
    left = [b for b in last.data["report"]["blocks"] if b["status"] != "kept"]
    assert left, "the small window leaves history out by the last turn"
    rows = page.page.locator("#left-out tbody tr")
    assert rows.count() == len(left)
    for i, b in enumerate(left):
        text = rows.nth(i).inner_text()
        assert b["id"] in text, text
        assert b["status"] in text, text
        assert b["reason"] in text, text
    assert page.errors == []


def test_the_diff_names_the_blocks_that_changed(page: Page, served: Served) -> None:
    records = _records(served)

    def kept(r: Any) -> set[str]:
        return {b["id"] for b in r.data["report"]["blocks"] if b["status"] in ("kept", "truncated")}

    pairs = [(a, b) for a, b in itertools.pairwise(records) if kept(a) != kept(b)]
    assert pairs
    before, after = pairs[-1]
    page.page.goto(f"{served.url}/inspect/s/{SESSION}/w/{after.data['turn']}/{after.data['call']}")
    diff = page.page.locator("#diff").inner_text()
    for block in kept(after) - kept(before):
        assert f"added: {block}" in diff
    for block in kept(before) - kept(after):
        assert f"no longer in the window: {block}" in diff
    assert "Cache:" in diff


def test_untrusted_text_shows_as_text_and_never_runs(page: Page, served: Served) -> None:
    page.page.goto(f"{served.url}/inspect/s/{SESSION}/w/{TOOL_TURN}/2")
    assert page.page.title().startswith(SESSION)  # not "pwned", not "1"
    assert PAYLOAD in page.page.locator("main").inner_text()
    assert page.page.locator("main script, main img").count() == 0
    page.page.goto(f"{served.url}/inspect/search?q={PAYLOAD[:20]}")
    assert page.page.locator("main script").count() == 0
    assert page.errors == []


def test_a_new_call_appears_live(page: Page, served: Served) -> None:
    """Another session of the same store, so the other tests' counts stay as replayed."""
    last = _records(served)[-1]

    def save(turn: int, prompt: str) -> None:
        store = SQLiteStore(served.path)
        try:
            saved = WindowLog(store).materialize(last)
            save_window(
                store,
                session="live",
                turn=turn,
                call=1,
                prompt=prompt,
                report=saved.report,
                messages=saved.messages,
                tools=saved.tools,
            )
        finally:
            store.close()

    # The page's event stream is held until the second call is saved: a call made between
    # the page and its stream must reach the page too.
    held: list[Any] = []
    page.page.route("**/events*", lambda route: held.append(route))
    save(1, "the first call")
    with page.page.expect_request("**/events*"):
        page.page.goto(f"{served.url}/inspect/s/live")
    rows = page.page.locator("tr.call-row")
    assert rows.count() == 1
    first = rows.first.element_handle()
    save(2, "a call made while the page is open")
    assert len(held) == 1
    held[0].continue_()
    expect(rows).to_have_count(2, timeout=60_000)
    # Appended: the row that was there is the same element, not a re-render.
    assert page.page.evaluate("(el) => el.isConnected", first)
    assert "a call made while the page is open" in rows.last.inner_text()
    assert "2 calls" in page.page.locator("#live").inner_text()
    assert page.errors == []


def test_every_view_passes_the_accessibility_check(page: Page, served: Served) -> None:
    views = _views(served)
    views["login"] = f"{served.url}/inspect/login"
    for name, url in views.items():
        page.page.goto(url)
        assert page.page.evaluate(A11Y) == [], name


def test_the_accessibility_check_finds_what_it_looks_for(page: Page) -> None:
    page.page.set_content(
        '<html><body><main><h1>x</h1><p style="color:#bbb">faint text</p>'
        '<input id="q"><svg><rect width="5" height="5"/></svg><a href="/x"></a>'
        "<table><thead><tr><th>h</th></tr></thead></table></main></body></html>"
    )
    problems = page.page.evaluate(A11Y)
    assert any(p.startswith("contrast") and "faint text" in p for p in problems)
    for expected in ("unlabelled field q", "svg without role=img", "graphic without a name",
                     "empty link", "th without scope", "no lang on <html>"):  # fmt: skip
        assert any(p.startswith(expected) for p in problems), (expected, problems)

"""Signing in to the web inspector in a real browser (Chromium through Playwright): the key is
typed once into a form and the browser holds an opaque, HttpOnly sign-in instead; signing out
revokes it server-side; a page of another site cannot sign the browser in (login CSRF); a key
in the address signs nobody in; `loomctx inspect --web`'s one-time link works once."""

from __future__ import annotations

from typing import Any

from loomctx.server._inspect_data import Pricing
from loomctx.server._inspector import local_inspector
from loomctx.stores.sqlite import SQLiteStore
from tests.inspector.conftest import Served, sign_in

EVIL = "http://evil.test"


def _context(browser: Any) -> Any:
    return browser.new_context(viewport={"width": 1280, "height": 900})


def _cookie(context: Any) -> dict[str, Any] | None:
    return next((c for c in context.cookies() if c["name"] == "loom_inspect"), None)


def test_the_browser_holds_an_httponly_sign_in_not_the_key_and_signing_out_revokes_it(
    browser: Any, served: Served
) -> None:
    context = _context(browser)
    page = context.new_page()
    sign_in(page, served)
    assert "Sign out" in page.inner_text("header")
    cookie = _cookie(context)
    assert cookie is not None
    assert cookie["httpOnly"]
    assert cookie["sameSite"] == "Strict"
    assert cookie["value"] != served.token
    assert served.token not in cookie["value"]
    assert "loom_inspect" not in page.evaluate("document.cookie")  # no script reads it
    # A copy of the sign-in (another browser holding the same cookie) reads as this one does...
    copy = _context(browser)
    copy.add_cookies([{**cookie}])
    other = copy.new_page()
    assert other.goto(f"{served.url}/inspect").status == 200
    # ...until this one signs out: the sign-in is revoked on the server, not only forgotten.
    page.click("header button")
    page.wait_for_url(f"{served.url}/inspect/login")
    assert _cookie(context) is None
    answer = other.goto(f"{served.url}/inspect")
    assert answer.status == 401
    assert other.locator("#key").count() == 1
    context.close()
    copy.close()


def test_a_page_of_another_site_cannot_sign_the_browser_in(browser: Any, served: Served) -> None:
    context = _context(browser)
    page = context.new_page()
    # The attacker's page knows a valid key (its own) and posts it to the inspector's form.
    attack = (
        f'<html><body><form id="f" method="post" action="{served.url}/inspect/login">'
        f'<input name="key" value="{served.token}"><input name="csrf" value="{"A" * 43}">'
        '</form><script>document.getElementById("f").submit()</script></body></html>'
    )
    context.route(
        f"{EVIL}/**", lambda route: route.fulfill(status=200, body=attack, content_type="text/html")
    )
    # Even with a sign-in page of the inspector opened first (its CSRF cookie set).
    page.goto(f"{served.url}/inspect/login")
    with page.expect_navigation(url=f"{served.url}/inspect/login"):
        page.goto(f"{EVIL}/attack")
    assert "did not come from this server" in page.inner_text("main")
    assert _cookie(context) is None
    assert page.goto(f"{served.url}/inspect").status == 401
    # A link with the key in the address signs nobody in either.
    answer = page.goto(f"{served.url}/inspect/login?key={served.token}")
    assert answer.status == 400
    assert "signs nobody in" in page.inner_text("main")
    assert _cookie(context) is None
    assert page.goto(f"{served.url}/inspect").status == 401
    context.close()


def test_a_one_time_link_signs_in_once_and_leaves_the_address(browser: Any, served: Served) -> None:
    # Another instance over the same store mints the link: sign-ins live in the store.
    store = SQLiteStore(served.path)
    try:
        minted = local_inspector(store, token=served.token, pricing=Pricing.named("openai"))
        link = served.url + minted.one_time_link(served.token)
    finally:
        store.close()
    context = _context(browser)
    page = context.new_page()
    page.goto(link)
    assert page.url == f"{served.url}/inspect"  # the code is out of the address bar
    assert page.locator("tr").count() > 1
    assert _cookie(context) is not None
    # From the history, in a browser that is not signed in, the link is spent.
    later = _context(browser)
    again = later.new_page()
    answer = again.goto(link)
    assert answer.status == 401
    assert "used already or has expired" in again.inner_text("main")
    assert _cookie(later) is None
    context.close()
    later.close()

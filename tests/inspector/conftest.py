"""Fixtures for the web inspector's browser tests: a replayed session in a SQLite file, the
inspector served over it by uvicorn (in a thread of the test process, as `loomctx inspect
--web` serves it), and Debian's Chromium driven by Playwright.

The browser is `/usr/bin/chromium` (``apt-get install chromium``; `.ci/run` installs it),
never one Playwright downloads. Without it (or without the `playwright` package) the tests
skip, and in CI (``CI=true``) they fail.

Screenshots go to ``.artifacts/inspector/`` at the repository's root (gitignored), or to
``$LOOM_ARTIFACTS/inspector`` when set.
"""

from __future__ import annotations

import os
import secrets
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from loomctx.server._inspect_data import Pricing
from loomctx.server._inspector import inspector_app, local_inspector
from loomctx.stores.sqlite import SQLiteStore
from tests.inspector._replay import replay
from tests.server.conftest import free_port

CHROMIUM = os.environ.get("LOOM_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ROOT = Path(__file__).resolve().parents[2]


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _missing(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"the browser tests need Chromium and Playwright in CI: {reason}")
    pytest.skip(reason)


@dataclass
class Served:
    """The inspector over a replayed store: its base URL, the token, the store's path."""

    url: str
    token: str
    path: Path
    calls: list[int]


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    path = tmp_path_factory.mktemp("inspector") / "replay.db"
    return path, replay(path)


@pytest.fixture(scope="module")
def served(replayed: tuple[Path, list[int]]) -> Iterator[Served]:
    path, calls = replayed
    store = SQLiteStore(path)
    token = secrets.token_urlsafe(16)
    inspector = local_inspector(
        store, token=token, pricing=Pricing.named("anthropic", usd_per_mtok=3.0), poll_seconds=0.2
    )
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(inspector_app(inspector), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the inspector did not start"
        assert thread.is_alive(), "the inspector's thread ended"
        time.sleep(0.02)
    yield Served(url=f"http://127.0.0.1:{port}", token=token, path=path, calls=calls)
    server.should_exit = True
    thread.join(timeout=10)
    store.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("the `playwright` package is not installed (`pip install -e '.[dev]'`)")
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        _missing(f"no Chromium at {CHROMIUM} (`apt-get install chromium`)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def artifacts() -> Path:
    base = os.environ.get("LOOM_ARTIFACTS")
    folder = (Path(base) if base else ROOT / ".artifacts") / "inspector"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@dataclass
class Page:
    """A signed-in page, and every console error and page error it met."""

    page: Any
    errors: list[str]


def sign_in(page: Any, served: Served) -> None:
    """Sign `page` in as a person would: the key typed into the form, the button pressed."""
    page.goto(f"{served.url}/inspect/login")
    page.fill("#key", served.token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{served.url}/inspect")


@pytest.fixture
def page(browser: Any, served: Served) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    sign_in(page, served)
    yield Page(page=page, errors=errors)
    context.close()

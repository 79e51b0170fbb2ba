"""`loomctx inspect --web`: the inspector over a local store, on the loopback address, behind
a one-time token (a real process, a real HTTP client)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from typer.testing import CliRunner

from loomctx.cli import app
from tests.inspector._replay import SESSION
from tests.server.conftest import free_port


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_web_serves_the_store_on_loopback_behind_a_token(
    replayed: tuple[Path, list[int]],
) -> None:
    path, _ = replayed
    port = free_port()
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "loomctx"), "inspect", "--web", "--no-browser",
         "--store", str(path), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert f"http://127.0.0.1:{port}/inspect/open?code=" in line, line
        url = next(w for w in line.split() if w.startswith("http://"))
        deadline = time.monotonic() + 20
        while True:
            try:
                status, _ = _get(f"http://127.0.0.1:{port}/inspect")
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, "the inspector did not start"
                time.sleep(0.1)
        assert status == 401  # no sign-in, no windows
        assert _get(f"http://127.0.0.1:{port}/inspect/open?code=wrong")[0] == 401
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        with opener.open(url, timeout=10) as r:  # the link, then its sign-in cookie
            assert r.status == 200
            assert r.url == f"http://127.0.0.1:{port}/inspect"  # the code left the address
            assert SESSION in r.read().decode()
        with opener.open(f"http://127.0.0.1:{port}/inspect/s/{SESSION}", timeout=10) as r:
            assert "one row per model call" in r.read().decode().lower()
        # The link works once: from the browser's history, it signs nobody in.
        status, text = _get(url)
        assert status == 401
        assert "used already or has expired" in text
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


def test_web_takes_no_file_or_session_and_needs_a_store(tmp_path: Path) -> None:
    runner = CliRunner()
    both = runner.invoke(app, ["inspect", "--web", "--list", "--store", str(tmp_path / "x.db")])
    assert both.exit_code != 0
    assert "--web" in both.output
    missing = runner.invoke(
        app, ["inspect", "--web", "--no-browser", "--store", str(tmp_path / "none.db")]
    )
    assert missing.exit_code != 0
    assert "no store at" in missing.output
    pricing = runner.invoke(
        app,
        [
            "inspect",
            "--web",
            "--no-browser",
            "--pricing",
            "cheap",
            "--store",
            str(tmp_path / "x.db"),
        ],
    )
    assert pricing.exit_code != 0
    assert "unknown pricing 'cheap'" in pricing.output

"""The server's configuration, its logs, and the `loomctx serve` command itself (a real
process, talked to by the official `openai` client)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest
from typer.testing import CliRunner

from loomctx.cli import app
from loomctx.errors import ConfigError
from loomctx.server import hash_key, load_serve_config
from loomctx.server._config import serve_config_from
from loomctx.server._logs import JSONFormatter, configure_logging
from tests.agent._servers import WireServer, openai_text
from tests.server._http import call
from tests.server.conftest import free_port

GOOD = {"keys": [hash_key("k")]}


def test_hash_key_is_sha256() -> None:
    assert hash_key("abc") == (
        "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ({"nope": 1}, "unknown key `nope`"),
        ({"max_body_bytes": 10}, "`max_body_bytes`"),
        ({"max_body_bytes": True}, "`max_body_bytes`"),
        ({"passthrough": "yes"}, "`passthrough`"),
        ({"models": {"m": "x"}}, "must be a table"),
        ({"models": {"m": {"provider": "cohere"}}}, "`provider`"),
        ({"models": {"m": {"window": 10}}}, "`window`"),
        ({"models": {"m": {"output_reserve": 1.5}}}, "`output_reserve`"),
        ({"models": {"m": {"base_url": ""}}}, "`base_url`"),
        ({"models": {"m": {"colour": "red"}}}, "unknown key `colour`"),
        ({"models": {"m": {"timeout": 0}}}, "`timeout` in [serve].models.m must be a number"),
        ({"models": {"m": {"connect_timeout": "5"}}}, "`connect_timeout`"),
        ({"models": {"m": {"first_byte_timeout": True}}}, "`first_byte_timeout`"),
        ({"models": {"m": {"timeout": float("nan")}}}, "`timeout`"),
        (
            {"models": {"m": {"first_byte_timeout": 60, "timeout": 30}}},
            "`first_byte_timeout` (60 s) in [serve].models.m is longer than `timeout` (30 s)",
        ),
        ({"models": {"bad name": {}}}, "a model name"),
        ({"tenants": {"t": "x"}}, "must be a table"),
        ({"tenants": {"t": {"keys": ["plain-key"]}}}, "never the keys themselves"),
        ({"tenants": {"t": {"keys": "x"}}}, "`keys`"),
        ({"tenants": {"t": {"knowledge": "kb"}}}, "`knowledge`"),
        ({"tenants": {"t": {"knowledge": ["a/b"]}}}, "`knowledge`"),
        ({"tenants": {"a": GOOD, "b": GOOD}}, "belongs to one tenant"),
        ({"tenants": {"acme\n": {}}}, "a tenant name"),
        ({"tenants": {"t": {"keys": [hash_key("k") + "\n"]}}}, "never the keys themselves"),
        ({"tenants": {"t": {"knowledge": ["kb\n"]}}}, "`knowledge`"),
    ],
)
def test_bad_config(table: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        serve_config_from(table, store="x.db", embedder="none")
    assert needle in str(err.value)


def test_config_file(tmp_path: Path) -> None:
    path = tmp_path / "loom.toml"
    path.write_text(
        'store = "a.db"\n[serve]\npassthrough = false\n'
        '[serve.models."gpt-x"]\nwindow = 4096\nfirst_byte_timeout = 30\n'
        f'[serve.tenants.acme]\nkeys = ["{hash_key("secret")}"]\n',
        encoding="utf-8",
    )
    config = load_serve_config(path, store="a.db")
    assert config.passthrough is False
    assert config.models["gpt-x"].upstream_model == "gpt-x"
    assert config.models["gpt-x"].window == 4096
    timeouts = config.models["gpt-x"]
    assert (timeouts.connect_timeout, timeouts.first_byte_timeout, timeouts.timeout) == (
        10.0,
        30.0,
        600.0,
    )
    assert config.tenant_for_key("secret").name == "acme"  # type: ignore[union-attr]
    assert config.tenant_for_key("other") is None
    assert load_serve_config(None).models == {}
    with pytest.raises(ConfigError, match="does not exist"):
        load_serve_config(tmp_path / "missing.toml")
    (tmp_path / "bad.toml").write_text("[serve\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_serve_config(tmp_path / "bad.toml")
    (tmp_path / "flat.toml").write_text('serve = "x"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="must be a table"):
        load_serve_config(tmp_path / "flat.toml")


def test_json_logs(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info")
    logger = logging.getLogger("loomctx.server")
    try:
        logger.info("request", extra={"loom": {"status": 200, "tenant": "acme"}})
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("failed", extra={"session": "s1"})
    finally:
        logger.handlers.clear()
        logger.propagate = True
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert lines[0]["status"] == 200
    assert lines[0]["tenant"] == "acme"
    assert lines[0]["message"] == "request"
    assert lines[1]["exception"] == "ValueError"
    assert lines[1]["session"] == "s1"
    assert isinstance(JSONFormatter().format(logging.makeLogRecord({"msg": "x"})), str)


def test_hash_key_command() -> None:
    result = CliRunner().invoke(app, ["serve", "--hash-key"], input="abc\n")
    assert result.exit_code == 0
    assert result.output.strip() == hash_key("abc")
    assert CliRunner().invoke(app, ["serve", "--hash-key"], input="\n").exit_code == 2


def test_loomctx_serve_process(tmp_path: Path) -> None:
    """`loomctx serve` as users run it: a process, its config in loom.toml, the openai client."""
    wire = WireServer().start()
    try:
        wire.script(openai_text("served"))
        config = tmp_path / "loom.toml"
        config.write_text(
            f'store = "{tmp_path / "loom.db"}"\nembedder = "none"\n'
            f'[serve.models.local]\nbase_url = "{wire.openai_url}"\n'
            f'[serve.tenants.me]\nkeys = ["{hash_key("sk-me")}"]\n',
            encoding="utf-8",
        )
        port = free_port()
        exe = Path(sys.executable).parent / "loomctx"
        proc = subprocess.Popen(
            [str(exe), "serve", "--config", str(config), "--port", str(port)],
            stderr=subprocess.PIPE,
            env={**os.environ, "LOOM_EMBEDDER": "none"},
            text=True,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while True:
                try:
                    if call("GET", f"{url}/readyz")[0] == 200:
                        break
                except OSError:
                    pass
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "loomctx serve did not start"
                time.sleep(0.1)
            with openai.OpenAI(base_url=f"{url}/v1", api_key="sk-me", max_retries=0) as c:
                reply = c.chat.completions.create(
                    model="local", messages=[{"role": "user", "content": "hi"}]
                )
            assert reply.choices[0].message.content == "served"
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=30)
        logs = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
        assert any(r.get("path") == "/v1/chat/completions" and r.get("status") == 200 for r in logs)
        assert "sk-me" not in err
    finally:
        wire.stop()

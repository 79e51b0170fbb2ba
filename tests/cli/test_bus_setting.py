"""The `bus` setting: checked like every setting, and `loomctx chat` announces each turn's
window (``context.assembled``) on the bus it names, here a real Redis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from typer.testing import CliRunner

from loomctx.cli import app
from loomctx.cli._config import load_settings
from loomctx.errors import ConfigError
from tests.session.conftest import redis_prefix, redis_url  # noqa: F401 - fixtures


def test_the_bus_comes_from_env_or_file(tmp_path: Path) -> None:
    assert load_settings(environ={}, cwd=tmp_path).bus is None
    (tmp_path / "loom.toml").write_text('bus = "redis://10.0.0.5:6379/0"\n')
    from_file = load_settings(environ={}, cwd=tmp_path)
    assert from_file.bus == "redis://10.0.0.5:6379/0"
    from_env = load_settings(environ={"LOOM_BUS": "memory://"}, cwd=tmp_path)
    assert (from_env.bus, from_env.origin["bus"]) == ("memory://", "env")


@pytest.mark.parametrize("value", ['"kafka://broker:9092"', '"127.0.0.1:6379"', '""', "6379"])
def test_a_bad_bus_names_the_key_and_the_accepted_urls(tmp_path: Path, value: str) -> None:
    (tmp_path / "loom.toml").write_text(f"bus = {value}\n")
    with pytest.raises(ConfigError, match=r"`bus` in .* must be"):
        load_settings(environ={}, cwd=tmp_path)


def test_chat_announces_each_window_on_the_bus(
    runner: CliRunner,
    monkeypatch: pytest.MonkeyPatch,
    lexical: None,
    redis_url: str,  # noqa: F811
    redis_prefix: str,  # noqa: F811
) -> None:
    monkeypatch.setenv("LOOM_BUS", f"{redis_url}?prefix={redis_prefix}")
    questions = ["what is the deploy key?", "and who rotates it?"]
    result = runner.invoke(
        app, ["chat", "--session", "s1"], input="".join(f"{q}\n" for q in questions)
    )
    assert result.exit_code == 0, result.output
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    entries = client.xrange(f"{redis_prefix}:stream:context.assembled")
    events = [json.loads(fields["event"]) for _, fields in entries]
    assert [e["payload"]["query"] for e in events] == questions
    assert all(e["payload"]["session_ids"] == ["s1"] for e in events)
    assert all(e["source"] == "chat:s1" for e in events)
    assert all(e["payload"]["report"]["total_tokens"] > 0 for e in events)


def test_chat_with_an_unknown_bus_fails_before_the_first_turn(runner: CliRunner) -> None:
    result = runner.invoke(app, ["chat"], input="hello\n", env={"LOOM_BUS": "nats://x:4222"})
    assert result.exit_code == 1
    assert "LOOM_BUS" in result.output

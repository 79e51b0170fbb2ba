"""Settings: flags > LOOM_* environment > loom.toml > defaults, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from loomctx.cli import app
from loomctx.cli._config import DEFAULT_INSTRUCTIONS, KEYS, Settings, load_settings
from loomctx.errors import ConfigError


def test_defaults_without_file_or_environment(tmp_path: Path) -> None:
    s = load_settings(environ={}, cwd=tmp_path)
    assert s == Settings()
    assert s.instructions == DEFAULT_INSTRUCTIONS
    assert set(s.origin.values()) == {"default"}
    assert set(s.origin) == set(KEYS)


def test_precedence_is_flag_then_env_then_file_then_default(tmp_path: Path) -> None:
    (tmp_path / "loom.toml").write_text(
        'window = 1000\nstore = "file.db"\nmodel = "openai/from-file"\nembedder = "none"\n'
    )
    s = load_settings(
        flags={"window": 3000, "store": None},
        environ={"LOOM_WINDOW": "2000", "LOOM_STORE": "env.db"},
        cwd=tmp_path,
    )
    assert (s.window, s.store, s.model, s.embedder, s.max_turns) == (
        3000,
        "env.db",
        "openai/from-file",
        "none",
        10,
    )
    assert s.origin["window"] == "flag"
    assert s.origin["store"] == "env"
    assert s.origin["model"] == str(tmp_path / "loom.toml")
    assert s.origin["max_turns"] == "default"


def test_environment_values_are_parsed_and_checked(tmp_path: Path) -> None:
    s = load_settings(
        environ={"LOOM_OUTPUT_RESERVE": "0.25", "LOOM_MAX_TURNS": "3", "LOOM_WINDOW": "16_000"},
        cwd=tmp_path,
    )
    assert (s.output_reserve, s.max_turns, s.window) == (0.25, 3, 16000)
    with pytest.raises(ConfigError, match="`LOOM_WINDOW` must be an integer, got 'big'"):
        load_settings(environ={"LOOM_WINDOW": "big"}, cwd=tmp_path)
    with pytest.raises(ConfigError, match="`LOOM_OUTPUT_RESERVE` must be a number"):
        load_settings(environ={"LOOM_OUTPUT_RESERVE": "half"}, cwd=tmp_path)


def test_an_unknown_key_is_named(tmp_path: Path) -> None:
    (tmp_path / "loom.toml").write_text('window = 4000\nwindwo = 2\nmodle = "x"\n')
    with pytest.raises(ConfigError, match=r"unknown key `modle`; the keys are `store`"):
        load_settings(environ={}, cwd=tmp_path)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("window = 100", r"`window` in .* must be an integer >= 256, got 100"),
        ("window = true", r"`window` in .* must be an integer >= 256, got True"),
        ("max_turns = 0", r"`max_turns` in .* must be an integer >= 1, got 0"),
        ("output_reserve = 1.5", r"`output_reserve` in .* between 0 and 1 \(exclusive\), got 1.5"),
        ("output_reserve = false", r"`output_reserve` in .* between 0 and 1"),
        ('embedder = "bert"', r'`embedder` in .* must be "default" .* or "none" .* got \'bert\''),
        ('store = ""', r"`store` in .* must be a non-empty string, got ''"),
        ("model = 4", r"`model` in .* must be a non-empty string, got 4"),
        ('kb = "a/b"', r"`kb` in .* is a knowledge base name, without '/', got 'a/b'"),
    ],
)
def test_a_bad_value_names_the_key_and_where_it_came_from(
    tmp_path: Path, line: str, message: str
) -> None:
    (tmp_path / "loom.toml").write_text(line + "\n")
    with pytest.raises(ConfigError, match=message):
        load_settings(environ={}, cwd=tmp_path)


def test_the_config_file_is_found_by_flag_then_env(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text("window = 1111\n")
    (tmp_path / "b.toml").write_text("window = 2222\n")
    env = {"LOOM_CONFIG": str(tmp_path / "b.toml")}
    assert load_settings(config=tmp_path / "a.toml", environ=env, cwd=tmp_path).window == 1111
    assert load_settings(environ=env, cwd=tmp_path).window == 2222
    with pytest.raises(ConfigError, match=r"config file '.*missing\.toml' does not exist"):
        load_settings(config=tmp_path / "missing.toml", environ={}, cwd=tmp_path)


def test_invalid_toml_is_reported(tmp_path: Path) -> None:
    (tmp_path / "loom.toml").write_text("window = = 3\n")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load_settings(environ={}, cwd=tmp_path)


def test_an_unreadable_file_is_reported(tmp_path: Path) -> None:
    (tmp_path / "conf.toml").mkdir()
    with pytest.raises(ConfigError, match=r"cannot read the config file '.*conf\.toml': Is a dir"):
        load_settings(environ={"LOOM_CONFIG": str(tmp_path / "conf.toml")}, cwd=tmp_path)


def test_a_loom_toml_folder_is_not_a_config_file(tmp_path: Path) -> None:
    (tmp_path / "loom.toml").mkdir()
    assert load_settings(environ={}, cwd=tmp_path) == Settings()


def test_loom_config_shows_each_value_and_its_origin(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "loom.toml").write_text('store = "team.db"\n')
    monkeypatch.setenv("LOOM_WINDOW", "12000")
    # Wide enough for the origin's path, however deep the test's folder (pytest-xdist workers
    # add a level).
    monkeypatch.setenv("COLUMNS", str(120 + len(str(tmp_path))))
    result = runner.invoke(app, ["config"])
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line.rstrip() for line in result.output.splitlines() if line.strip()}
    assert "'team.db'" in lines["store"]
    assert lines["store"].endswith("loom.toml")
    assert "12000" in lines["window"]
    assert lines["window"].endswith("env")
    assert lines["max_turns"].endswith("default")


def test_loom_config_fails_with_exit_code_1_on_a_bad_file(
    runner: CliRunner, tmp_path: Path
) -> None:
    (tmp_path / "loom.toml").write_text("colour = 1\n")
    result = runner.invoke(app, ["config"])
    assert result.exit_code == 1
    assert "error: " in result.output
    assert "unknown key `colour`" in result.output
    assert "Traceback" not in result.output

"""The `loomctx` command's settings, in one place.

Each setting comes from the first of: a command-line flag, a ``LOOM_*`` environment variable,
a ``loom.toml`` file, the default. The file is ``--config PATH``, else ``$LOOM_CONFIG``, else
``./loom.toml`` if there is one; it holds top-level keys only::

    store = ".loom/loom.db"      # memory, knowledge and reports: a SQLite file (or sqlite:///PATH)
                                 # or a PostgreSQL URL (postgresql://user@host/db)
    bus = "redis://host:6379/0"  # the event bus (unset or "memory://": none across processes)
    model = "openai/gpt-4o-mini" # provider/model; unset: the offline responder
    window = 8000                # the model's context window, in tokens
    output_reserve = 0.2         # the share of the window kept for the reply
    embedder = "default"         # "default" (offline multilingual-e5) or "none" (lexical only)
    instructions = "You are ..." # the agent's system instructions
    knowledge = "docs/"          # a folder of documents `loomctx chat` ingests and searches
    kb = "default"               # the knowledge base `ingest` fills and `chat` reads
    tools = "my_tools.py"        # a Python file or module whose `Tool`s the agent may call
    session = "notes"            # the session `loomctx chat` resumes (unset: a new one each time)
    max_turns = 10               # model calls per user message, at most

An unknown key, a value of the wrong type or out of range raises `ConfigError` naming the key
and where it came from; nothing is ignored silently.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final

from loomctx.errors import ConfigError

__all__ = ["DEFAULT_INSTRUCTIONS", "Settings", "load_settings"]

DEFAULT_INSTRUCTIONS: Final = (
    "You are a helpful assistant. Answer from the conversation so far and the reference "
    "context you are given; say so when they do not contain the answer."
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """The resolved settings, and where each value came from (`origin`)."""

    store: str = ".loom/loom.db"
    bus: str | None = None
    model: str | None = None
    window: int = 8000
    output_reserve: float = 0.2
    embedder: str = "default"
    instructions: str = DEFAULT_INSTRUCTIONS
    knowledge: str | None = None
    kb: str = "default"
    tools: str | None = None
    session: str | None = None
    max_turns: int = 10
    origin: Mapping[str, str] = field(default_factory=dict, compare=False)


KEYS: Final = tuple(f.name for f in fields(Settings) if f.name != "origin")


def _env_name(key: str) -> str:
    return f"LOOM_{key.upper()}"


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where} must be a non-empty string, got {value!r}")
    return value


def _int(low: int) -> Callable[[Any, str], int]:
    def check(value: Any, where: str) -> int:
        if isinstance(value, str):
            try:
                value = int(value.replace("_", ""))
            except ValueError:
                raise ConfigError(f"{where} must be an integer, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{where} must be an integer >= {low}, got {value!r}")
        return value

    return check


def _ratio(value: Any, where: str) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ConfigError(f"{where} must be a number between 0 and 1, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise ConfigError(f"{where} must be a number between 0 and 1 (exclusive), got {value!r}")
    return float(value)


def _embedder(value: Any, where: str) -> str:
    if value not in ("default", "none"):
        raise ConfigError(
            f'{where} must be "default" (the offline multilingual-e5 model) or "none" '
            f"(lexical search only), got {value!r}"
        )
    return str(value)


def _bus(value: Any, where: str) -> str:
    url = _text(value, where)
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in ("memory", "redis", "rediss", "unix"):
        raise ConfigError(
            f'{where} must be an event bus URL, "memory://" (in process, the default) or '
            f'"redis://host:6379/0" (Redis Streams, shared by many workers), got {value!r}'
        )
    return url


def _kb(value: Any, where: str) -> str:
    name = _text(value, where)
    if "/" in name:
        raise ConfigError(f"{where} is a knowledge base name, without '/', got {value!r}")
    return name


_CHECKS: Final[Mapping[str, Callable[[Any, str], Any]]] = {
    "store": _text,
    "bus": _bus,
    "model": _text,
    "window": _int(256),
    "output_reserve": _ratio,
    "embedder": _embedder,
    "instructions": _text,
    "knowledge": _text,
    "kb": _kb,
    "tools": _text,
    "session": _text,
    "max_turns": _int(1),
}


def _config_file(path: str | Path | None, environ: Mapping[str, str], cwd: Path) -> Path | None:
    if path is None and environ.get("LOOM_CONFIG"):
        path = environ["LOOM_CONFIG"]
    if path is not None:
        return Path(path)
    found = cwd / "loom.toml"
    return found if found.is_file() else None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{str(path)!r} is not valid TOML: {exc}") from None
    except FileNotFoundError:
        raise ConfigError(
            f"config file {str(path)!r} does not exist; check `--config` or LOOM_CONFIG"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read the config file {str(path)!r}: {exc.strerror}") from None
    # `[serve]` is the server's table (`loomctx.server`), read by `loomctx serve` itself.
    unknown = sorted(set(data) - set(KEYS) - {"serve"})
    if unknown:
        raise ConfigError(
            f"{str(path)!r}: unknown key `{unknown[0]}`; the keys are "
            + ", ".join(f"`{k}`" for k in KEYS)
        )
    return data


def load_settings(
    *,
    flags: Mapping[str, Any] | None = None,
    config: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Settings:
    """Resolve every setting: `flags` (None means not given) > ``LOOM_*`` in `environ` >
    the config file > the defaults."""
    environ = os.environ if environ is None else environ
    path = _config_file(config, environ, cwd or Path.cwd())
    from_file = _read_toml(path) if path is not None else {}
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for key in KEYS:
        flag = (flags or {}).get(key)
        env = environ.get(_env_name(key))
        if flag is not None:
            values[key] = _CHECKS[key](flag, f"`--{key.replace('_', '-')}`")
            origin[key] = "flag"
        elif env:
            values[key] = _CHECKS[key](env, f"`{_env_name(key)}`")
            origin[key] = "env"
        elif key in from_file:
            values[key] = _CHECKS[key](from_file[key], f"`{key}` in {str(path)!r}")
            origin[key] = str(path)
        else:
            origin[key] = "default"
    return Settings(**values, origin=origin)

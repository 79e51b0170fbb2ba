"""What `loomctx serve` serves: models, tenants and their keys, limits.

The server reads the ``[serve]`` table of ``loom.toml`` (the same file as the other commands'
settings, whose top-level `store`, `embedder` and `bus` it shares)::

    [serve]
    max_body_bytes = 4_000_000   # a larger request body is refused with 413
    passthrough = true           # if Loom itself fails, forward the request unchanged

    [serve.models."gpt-4o-mini"]        # the name clients send as `model`
    provider = "openai"                 # or "anthropic"
    base_url = "https://api.openai.com/v1"
    api_key_env = "OPENAI_API_KEY"      # the variable holding the upstream key (never the key)
    upstream = "gpt-4o-mini"            # the name sent upstream (default: the table's name)
    window = 128000                     # the model's context window, in tokens
    output_reserve = 0.2                # the share of it kept for the reply
    connect_timeout = 10                # seconds to connect to the upstream
    first_byte_timeout = 120            # seconds from sending to the reply's first chunk
    timeout = 600                       # seconds for the whole reply
    cache_ttl = "5m"                    # Anthropic: "1h" asks for the one-hour prompt cache

    [serve.tenants.acme]
    keys = ["sha256:9f86d0..."]         # `loomctx serve --hash-key` prints a key's hash
    knowledge = ["handbook"]            # the tenant's knowledge bases searched for every window
    instructions = "You work for ACME." # put before the client's own system message
    previous_keys = []                  # hashes of retired keys: proof of identity only

A tenant's name is its identity in the store: the store records the key hashes each tenant
was served with, and a tenant none of whose `keys` or `previous_keys` it recorded is refused
at start-up (a retired tenant's name, reused, would inherit its data); see
`loomctx.server._tenants`.

API keys are stored as SHA-256 hashes only: a key is a long random token, so its hash cannot
be searched backwards, and a leaked config file grants nothing. Upstream keys are never in the
file, only the names of the environment variables that hold them. Any malformed value raises
`ConfigError` naming its key; nothing is ignored silently.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from loomctx.context.billing import ANTHROPIC_1H, CachePricing, pricing_for
from loomctx.errors import ConfigError

__all__ = ["ModelConfig", "ServeConfig", "TenantConfig", "hash_key", "load_serve_config"]

_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
_HASH: Final = re.compile(r"^sha256:[0-9a-f]{64}\Z")


def hash_key(key: str) -> str:
    """How an API key is stored: ``sha256:<hex digest>``."""
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelConfig:
    """A model clients may name, and where Loom forwards its windows.

    The timeouts bound what one request may wait for the upstream (and so how long it holds
    its session): `connect_timeout` to connect, `first_byte_timeout` from sending the request
    to the reply's first chunk, `timeout` for the whole reply; each in seconds.
    `cache_ttl` (Anthropic only) is how long the provider keeps what Loom's breakpoints
    write: ``"1h"`` sends ``"ttl": "1h"`` on them and bills the model as `ANTHROPIC_1H`
    (writes at 2x, kept an hour), for conversations whose turns come more than five
    minutes apart; ``"5m"`` (default) is Anthropic's default cache."""

    name: str
    provider: str = "openai"
    base_url: str | None = None
    api_key_env: str | None = None
    upstream: str = ""
    window: int = 8000
    output_reserve: float = 0.2
    connect_timeout: float = 10.0
    first_byte_timeout: float = 120.0
    timeout: float = 600.0
    cache_ttl: Literal["5m", "1h"] = "5m"

    @property
    def upstream_model(self) -> str:
        """The model name sent upstream."""
        return self.upstream or self.name

    @property
    def pricing(self) -> CachePricing:
        """How its provider's prompt cache bills the model (`loomctx.context.billing`; an
        OpenAI-compatible upstream is billed as OpenAI's model of its family)."""
        provider = self.provider if self.provider in ("anthropic", "openai") else "openai"
        if provider == "anthropic" and self.cache_ttl == "1h":
            return ANTHROPIC_1H
        return pricing_for(provider, self.upstream_model)


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantConfig:
    """A tenant: the hashes of its API keys, its knowledge bases, its instructions, and the
    hashes of keys it no longer accepts (`previous_keys`: they prove to the store which
    tenant this is after a rotation, and open nothing)."""

    name: str
    keys: tuple[str, ...] = ()
    previous_keys: tuple[str, ...] = ()
    knowledge: tuple[str, ...] = ()
    instructions: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeConfig:
    """Everything one server instance needs; several instances with the same config and
    store serve the same tenants."""

    store: str = ".loom/loom.db"
    embedder: str = "none"
    models: Mapping[str, ModelConfig] = field(default_factory=dict)
    tenants: Mapping[str, TenantConfig] = field(default_factory=dict)
    max_body_bytes: int = 4_000_000
    passthrough: bool = True
    bus: str | None = None  # the `bus` setting: where each window's event is published

    def tenant_for_key(self, key: str) -> TenantConfig | None:
        """The tenant an API key belongs to, or None."""
        digest = hash_key(key)
        for tenant in self.tenants.values():
            if digest in tenant.keys:
                return tenant
        return None


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ConfigError(
            f"{where} must be a name of letters, digits, `_`, `.` or `-` (at most 64, not "
            f"starting with a symbol), got {value!r}"
        )
    return value


def _str(table: Mapping[str, Any], key: str, where: str, default: str | None) -> str | None:
    value = table.get(key, default)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ConfigError(f"`{key}` in {where} must be a non-empty string, got {value!r}")
    return value


def _check_keys(table: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise ConfigError(
            f"unknown key `{unknown[0]}` in {where}; the keys are "
            + ", ".join(f"`{k}`" for k in allowed)
        )


def _model(name: str, table: Any, where: str) -> ModelConfig:
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where} must be a table, got {table!r}")
    _check_keys(
        table,
        (
            "provider",
            "base_url",
            "api_key_env",
            "upstream",
            "window",
            "output_reserve",
            "cache_ttl",
            *_TIMEOUTS,
        ),
        where,
    )
    provider = table.get("provider", "openai")
    if provider not in ("openai", "anthropic"):
        raise ConfigError(
            f'`provider` in {where} must be "openai" or "anthropic", got {provider!r}'
        )
    window = table.get("window", 8000)
    if isinstance(window, bool) or not isinstance(window, int) or window < 256:
        raise ConfigError(f"`window` in {where} must be an integer >= 256, got {window!r}")
    reserve = table.get("output_reserve", 0.2)
    if isinstance(reserve, bool) or not isinstance(reserve, int | float) or not 0 < reserve < 1:
        raise ConfigError(
            f"`output_reserve` in {where} must be a number between 0 and 1, got {reserve!r}"
        )
    timeouts = _timeouts(table, where)
    ttl = table.get("cache_ttl", "5m")
    if ttl not in ("5m", "1h"):
        raise ConfigError(f'`cache_ttl` in {where} must be "5m" or "1h", got {ttl!r}')
    if ttl == "1h" and provider != "anthropic":
        raise ConfigError(
            f'`cache_ttl = "1h"` in {where} is for Anthropic\'s prompt cache; an OpenAI '
            "upstream caches prefixes by itself: remove it"
        )
    return ModelConfig(
        name=name,
        provider=provider,
        base_url=_str(table, "base_url", where, None),
        api_key_env=_str(table, "api_key_env", where, None),
        upstream=_str(table, "upstream", where, name) or name,
        window=window,
        output_reserve=float(reserve),
        cache_ttl=ttl,
        **timeouts,
    )


_TIMEOUTS: Final = ("connect_timeout", "first_byte_timeout", "timeout")


def _timeouts(table: Mapping[str, Any], where: str) -> dict[str, float]:
    """The upstream's timeouts, in seconds: each positive, and neither the connection's nor
    the first chunk's longer than the whole reply's. (A `connect_timeout` longer than
    `first_byte_timeout` is allowed: the shorter limit wins.)"""
    defaults = ModelConfig(name="_")
    out: dict[str, float] = {}
    for key in _TIMEOUTS:
        value = table.get(key, getattr(defaults, key))
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e6:
            raise ConfigError(
                f"`{key}` in {where} must be a number of seconds above 0, got {value!r}"
            )
        out[key] = float(value)
    for shorter in ("connect_timeout", "first_byte_timeout"):
        longer = "timeout"
        if out[shorter] > out[longer]:
            raise ConfigError(
                f"`{shorter}` ({out[shorter]:g} s) in {where} is longer than `{longer}` "
                f"({out[longer]:g} s): lower `{shorter}` or raise `{longer}`"
            )
    return out


def _tenant(name: str, table: Any, where: str) -> TenantConfig:
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where} must be a table, got {table!r}")
    _check_keys(table, ("keys", "knowledge", "instructions", "previous_keys"), where)
    keys = _hashes(table, "keys", where)
    previous = _hashes(table, "previous_keys", where)
    if set(keys) & set(previous):
        raise ConfigError(
            f"a key hash is in both `keys` and `previous_keys` in {where}: a key is either "
            "accepted (`keys`) or retired (`previous_keys`)"
        )
    knowledge = table.get("knowledge", [])
    if not isinstance(knowledge, list):
        raise ConfigError(f"`knowledge` in {where} must be a list of knowledge base names")
    instructions = _str(table, "instructions", where, None) or ""
    return TenantConfig(
        name=name,
        keys=tuple(keys),
        previous_keys=tuple(previous),
        knowledge=tuple(_name(k, f"`knowledge` in {where}") for k in knowledge),
        instructions=instructions,
    )


def _hashes(table: Mapping[str, Any], key: str, where: str) -> list[str]:
    hashes = table.get(key, [])
    if not isinstance(hashes, list) or not all(
        isinstance(k, str) and _HASH.match(k) for k in hashes
    ):
        raise ConfigError(
            f"`{key}` in {where} must be a list of key hashes (`sha256:` and 64 hex digits, "
            f"printed by `loomctx serve --hash-key`), never the keys themselves; got "
            f"{len(hashes) if isinstance(hashes, list) else hashes!r} entries that are not "
            "all hashes"
        )
    return hashes


def serve_config_from(
    table: Mapping[str, Any],
    *,
    store: str,
    embedder: str,
    bus: str | None = None,
    where: str = "[serve]",
) -> ServeConfig:
    """A `ServeConfig` from a ``[serve]`` table (as parsed from TOML)."""
    _check_keys(table, ("max_body_bytes", "passthrough", "models", "tenants"), where)
    size = table.get("max_body_bytes", 4_000_000)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1024:
        raise ConfigError(f"`max_body_bytes` in {where} must be an integer >= 1024, got {size!r}")
    passthrough = table.get("passthrough", True)
    if not isinstance(passthrough, bool):
        raise ConfigError(f"`passthrough` in {where} must be true or false, got {passthrough!r}")
    models: dict[str, ModelConfig] = {}
    for name, sub in dict(table.get("models", {})).items():
        models[name] = _model(
            _name(name, f"a model name in {where}"), sub, f"{where}.models.{name}"
        )
    tenants: dict[str, TenantConfig] = {}
    seen: dict[str, str] = {}
    for name, sub in dict(table.get("tenants", {})).items():
        tenant = _tenant(_name(name, f"a tenant name in {where}"), sub, f"{where}.tenants.{name}")
        for key in tenant.keys:
            if key in seen:
                raise ConfigError(
                    f"a key hash is listed for tenants `{seen[key]}` and `{name}`; a key "
                    "belongs to one tenant"
                )
            seen[key] = name
        tenants[name] = tenant
    return ServeConfig(
        store=store,
        embedder=embedder,
        models=models,
        tenants=tenants,
        max_body_bytes=size,
        passthrough=passthrough,
        bus=bus,
    )


def load_serve_config(
    path: str | Path | None,
    *,
    store: str = ".loom/loom.db",
    embedder: str = "none",
    bus: str | None = None,
) -> ServeConfig:
    """The ``[serve]`` table of the TOML file at `path` (none: an empty table)."""
    if path is None:
        return serve_config_from({}, store=store, embedder=embedder, bus=bus)
    try:
        with Path(path).open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{str(path)!r} is not valid TOML: {exc}") from None
    table = data.get("serve", {})
    if not isinstance(table, Mapping):
        raise ConfigError(f"`serve` in {str(path)!r} must be a table (`[serve]`)")
    return serve_config_from(
        table, store=store, embedder=embedder, bus=bus, where=f"[serve] of {path}"
    )

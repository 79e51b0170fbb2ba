"""`loomctx serve` and `loomctx mcp`: Loom as a server (see `loomctx.server`).

Both read the `store` and `embedder` settings like every command, and the ``[serve]`` table of
the same ``loom.toml`` (models, tenants and their key hashes; see `loomctx.server._config`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from loomctx.cli._common import ConfigOption, StoreOption, settings_from
from loomctx.cli._config import _config_file
from loomctx.errors import MissingExtraError

__all__ = ["mcp", "serve"]


def _require_extra() -> None:
    try:
        import mcp  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(
            feature="`loomctx serve`", extra="serve", module=exc.name or "starlette"
        ) from None


def _config_path(config: Path | None) -> Path | None:
    return _config_file(config, os.environ, Path.cwd())


def serve(
    config: ConfigOption = None,
    store: StoreOption = None,
    host: Annotated[str, typer.Option(help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="The port to listen on.")] = 8700,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    shutdown_timeout: Annotated[
        int,
        typer.Option(
            min=1,
            help="Seconds a stopping server (SIGTERM, Ctrl-C) gives the requests in flight "
            "before it cancels them, and their upstream calls.",
        ),
    ] = 20,
    hash_key: Annotated[
        bool,
        typer.Option(
            "--hash-key",
            help="Read an API key on stdin, print the hash to put in `keys = [...]`, and exit.",
        ),
    ] = False,
) -> None:
    """Serve the OpenAI-compatible proxy, the REST API and MCP (/mcp/{session})."""
    if hash_key:
        from loomctx.server._config import hash_key as digest

        key = sys.stdin.readline().strip()
        if not key:
            raise typer.BadParameter("no key on stdin", param_hint="--hash-key")
        typer.echo(digest(key))
        return
    _require_extra()
    import uvicorn

    from loomctx.server import LoomService, create_app, load_serve_config
    from loomctx.server._logs import configure_logging

    settings = settings_from(config, store=store)
    cfg = load_serve_config(
        _config_path(config), store=settings.store, embedder=settings.embedder, bus=settings.bus
    )
    configure_logging(log_level)
    app = create_app(LoomService(cfg))
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=shutdown_timeout,
    )


def mcp(
    config: ConfigOption = None,
    store: StoreOption = None,
    tenant: Annotated[
        str, typer.Option(help="The tenant whose memory and knowledge to serve.")
    ] = "local",
    session: Annotated[
        str, typer.Option(help="The session (memory namespace) to serve.")
    ] = "default",
) -> None:
    """Serve MCP on stdin/stdout for a desktop client: build_context, remember, recall, forget."""
    _require_extra()
    from loomctx.server import (
        ChatProxy,
        LoomService,
        TenantConfig,
        fixed_resolver,
        load_serve_config,
        make_mcp_server,
    )

    settings = settings_from(config, store=store)
    cfg = load_serve_config(_config_path(config), store=settings.store, embedder=settings.embedder)
    who = cfg.tenants.get(tenant) or TenantConfig(name=tenant)
    service = LoomService(cfg)
    mcp_server = make_mcp_server(ChatProxy(service), fixed_resolver(who, session), static=who)
    try:
        mcp_server.run("stdio")
    finally:
        service.close()

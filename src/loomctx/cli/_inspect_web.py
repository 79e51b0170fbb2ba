"""`loomctx inspect --web`: the web inspector over a local store's saved windows.

It binds the loopback address only, and a one-time link signs the browser in: it opens
``/inspect/open?code=<code>``, which works once and for a few minutes, then leaves the address
(the browser holds a sign-in cookie, never the code), so another user of the machine who
finds the port, or the link in the browser's history, still sees nothing. The pages are the ones
`loomctx serve` serves at ``/inspect`` (`loomctx.server._inspector`).
"""

from __future__ import annotations

import secrets
import threading
import webbrowser

import typer

from loomctx.cli._serve import _require_extra
from loomctx.errors import ConfigError
from loomctx.stores import open_store

__all__ = ["serve_inspector"]


def serve_inspector(
    store_path: str,
    *,
    port: int,
    browser: bool,
    pricing: str,
    usd_per_mtok: float | None,
) -> None:
    """Serve the inspector on 127.0.0.1:`port` until interrupted."""
    _require_extra()
    import uvicorn

    from loomctx.server._inspect_data import Pricing
    from loomctx.server._inspector import inspector_app, local_inspector

    prices = Pricing.named(pricing, usd_per_mtok=usd_per_mtok)
    if "://" not in store_path:
        from pathlib import Path

        if not Path(store_path).is_file():
            raise ConfigError(
                f"no store at {store_path!r}; run `loomctx chat` first or pass `--store`"
            )
    store = open_store(store_path)
    token = secrets.token_urlsafe(24)
    inspector = local_inspector(store, token=token, pricing=prices)
    app = inspector_app(inspector)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    url = f"http://127.0.0.1:{port}" + inspector.one_time_link(token)
    typer.echo(f"the inspector of {store_path}: {url}  (Ctrl-C to stop)")
    if browser:
        threading.Timer(0.5, webbrowser.open, args=(url,)).start()
    try:
        server.run()
    finally:
        store.close()

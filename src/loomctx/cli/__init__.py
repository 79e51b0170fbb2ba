"""The `loomctx` command line: demo, chat, ingest, inspect, bench and config.

A thin typer app over the public API; `main` is the console script's entry point, `app` the
typer application (for `typer.testing.CliRunner`).
"""

from loomctx.cli._app import app, main

__all__ = ["app", "main"]

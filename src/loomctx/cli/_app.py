"""The `loomctx` command: a thin typer app over the public API.

Exit codes scripts can rely on: 0 success; 1 a runtime error (a `LoomError`: its message is
printed to stderr as ``error: ...``, without a traceback); 2 a usage error (a bad flag or
argument: typer's message and usage); 130 interrupted.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Annotated, Any

import typer
from rich.table import Table
from typer.core import TyperGroup

from loomctx.cli._bench import bench_app
from loomctx.cli._chat import chat
from loomctx.cli._common import ConfigOption, err_console, out_console, settings_from
from loomctx.cli._config import KEYS
from loomctx.cli._demo import demo
from loomctx.cli._ingest import ingest
from loomctx.cli._inspect import inspect
from loomctx.cli._replay import replay
from loomctx.cli._serve import mcp, serve
from loomctx.errors import LoomError

__all__ = ["app", "main"]


class _Group(TyperGroup):
    """Turns a `LoomError` raised by any command into its message and exit code 1."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except LoomError as exc:
            console = err_console()
            console.print("error:", style="bold red", end=" ")
            console.print(str(exc), markup=False, soft_wrap=True)
            raise typer.Exit(1) from None


app = typer.Typer(
    cls=_Group,
    help="Loom: the best context window that fits an exact token budget, before every LLM call.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"loomctx {version('loomctx')}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Loom: the best context window that fits an exact token budget, before every LLM call.

    Settings come from flags, then LOOM_* environment variables, then ./loom.toml (see
    `loomctx config`). Exit codes: 0 ok, 1 error, 2 usage error.
    """


@app.command("config")
def config_command(config: ConfigOption = None) -> None:
    """Show every setting, its value, and where it came from."""
    settings = settings_from(config)
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("setting", no_wrap=True)
    table.add_column("value", ratio=1)
    table.add_column("from", style="dim", no_wrap=True)
    for key in KEYS:
        table.add_row(key, repr(getattr(settings, key)), settings.origin[key])
    out_console().print(table)


app.command("demo")(demo)
app.command("chat")(chat)
app.command("ingest")(ingest)
app.command("inspect")(inspect)
app.command("serve")(serve)
app.command("mcp")(mcp)
app.command("replay")(replay)
app.add_typer(bench_app, name="bench")


def main() -> None:
    """The console script's entry point."""
    app(prog_name="loomctx")

"""What every command shares: the consoles, the common options, and reading the settings."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from loomctx.cli._config import Settings, load_settings

__all__ = [
    "ConfigOption",
    "StoreOption",
    "err_console",
    "out_console",
    "progress_bar",
    "settings_from",
]

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="A loom.toml to read settings from (default: $LOOM_CONFIG, else ./loom.toml).",
        dir_okay=False,
    ),
]
StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="The store: a SQLite file (or sqlite:///PATH) or a postgresql:// URL "
        "(setting `store`, env LOOM_STORE).",
    ),
]


def out_console() -> Console:
    """The console for results (stdout), as wide as the terminal."""
    return Console(highlight=False)


def err_console() -> Console:
    """The console for progress and errors (stderr)."""
    return Console(stderr=True, highlight=False)


def settings_from(config: Path | None, **flags: Any) -> Settings:
    """Settings from the flags given (None: not given), the environment and the file."""
    return load_settings(flags=flags, config=config, environ=os.environ)


def progress_bar(console: Console) -> Progress:
    """A labelled bar with done/total and the time spent."""
    return Progress(
        TextColumn("  {task.description:<14}"),
        BarColumn(bar_width=40),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )

"""`loomctx inspect`: draw a context window's report, from a file or a session.

``loomctx inspect FILE`` reads a report's JSON (`ContextReport.to_dict()`), a
`context_assembled` event, or a run's event log (what ``loomctx chat --events`` writes), and shows
the last window in it, or window ``--turn N``. ``loomctx inspect --session ID`` shows the last
window `loomctx chat` built in that session. ``--json`` prints the report as JSON instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from loomctx.cli._common import ConfigOption, StoreOption, out_console, settings_from
from loomctx.cli._render import report_view
from loomctx.cli._reports import load_reports, report_from_payload
from loomctx.cli._workspace import latest_report, open_store
from loomctx.context.report import ContextReport
from loomctx.errors import ConfigError

__all__ = ["inspect"]


def _from_session(session: str, store_path: str) -> ContextReport:
    if "://" not in store_path and not Path(store_path).is_file():
        raise ConfigError(f"no store at {store_path!r}; run `loomctx chat` first or pass `--store`")
    store = open_store(store_path)
    try:
        data = latest_report(store, session)
    finally:
        store.close()
    if data is None:
        raise ConfigError(
            f"session {session!r} has no saved window in {store_path!r}; chat in it first "
            f"(`loomctx chat --session {session}`)"
        )
    return report_from_payload(data)


def inspect(
    path: Annotated[
        Path | None,
        typer.Argument(
            help="A report's JSON, a context_assembled event, or a run's event log (JSONL).",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    session: Annotated[
        str | None,
        typer.Option(
            "--session", help="Show the last window `loomctx chat` built in this session."
        ),
    ] = None,
    turn: Annotated[
        int | None,
        typer.Option(
            "--turn", min=1, help="Which window of the file (1 = the first); default last."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    store: StoreOption = None,
    config: ConfigOption = None,
) -> None:
    """Show what went into a context window, what did not, and why."""
    if (path is None) == (session is None):
        raise typer.BadParameter("give a FILE or `--session ID` (one of them)")
    if path is not None:
        reports = load_reports(path)
        index = len(reports) if turn is None else turn
        if index > len(reports):
            raise ConfigError(
                f"{str(path)!r} has {len(reports)} window(s); `--turn {turn}` is past them"
            )
        report = reports[index - 1]
    else:
        assert session is not None
        report = _from_session(session, settings_from(config, store=store).store)
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2))
        return
    console = out_console()
    console.print(report_view(report, width=console.width))

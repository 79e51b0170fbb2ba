"""`loomctx replay LOGS`: what Loom would have saved on a log of recorded chat requests.

Offline: it builds Loom's windows and counts tokens, it calls no model. Prints a table per call
and in total (or, with ``--json``, the numbers as JSON on stdout), the lines it could not read
on stderr, and with ``--plot FILE`` draws a PNG. A log with no request in it exits with 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from loomctx.cli._common import err_console, out_console
from loomctx.cli._render import print_table
from loomctx.evaluation.replay import DEFAULT_WINDOW, NoRequestError, plot_replay, replay_log

__all__ = ["replay"]

_COLUMNS = ["sent", "cached", "anthropic", "openai", "over"]


def _row(side: dict[str, Any]) -> dict[str, Any]:
    return {
        "sent": side["sent"],
        "cached": side["cached"],
        "anthropic": round(side["billed_anthropic"]),
        "openai": round(side["billed_openai"]),
        "over": int(side["over_window"]),
    }


def _calls_table(calls: list[dict[str, Any]]) -> Table:
    """One row a call (conversation:line of the log): each figure as sent, then through Loom."""
    table = Table(
        title="Per call: as the client sent it, then through Loom (billed: input tokens)",
        title_justify="left",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=(0, 1, 0, 0),
    )
    table.add_column("conv:line", no_wrap=True)
    for header in ("sent", "loom", "cached", "loom", "anthropic", "loom", "openai", "loom"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("over", justify="right", no_wrap=True)
    for call in calls:
        sent, loom = _row(call["client"]), _row(call["loom"])
        cells = [str(v) for c in _COLUMNS[:-1] for v in (sent[c], loom[c])]
        over = {(1, 0): "sent", (0, 1): "loom", (1, 1): "both"}.get(
            (sent["over"], loom["over"]), ""
        )
        table.add_row(f"{call['conversation'] + 1}:{call['line']}", *cells, over)
    return table


def replay(
    logs: Annotated[
        Path,
        typer.Argument(
            help="A JSONL file of chat requests, one a line (OpenAI or Anthropic shape).",
            exists=True,
            dir_okay=False,
        ),
    ],
    window: Annotated[
        int | None,
        typer.Option(
            "--window",
            min=256,
            help=f"The model's context window in tokens (default: the model's if known, "
            f"else {DEFAULT_WINDOW}).",
        ),
    ] = None,
    output_reserve: Annotated[
        float,
        typer.Option(
            "--output-reserve",
            min=0.01,
            max=0.9,
            help="The share of the window kept for the reply.",
        ),
    ] = 0.2,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the numbers as JSON instead of tables.")
    ] = False,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Draw tokens sent and billed per call to this PNG file."),
    ] = None,
) -> None:
    """What would Loom save me? Replay recorded chat requests through Loom, offline: tokens
    sent, cached and billed (Anthropic and OpenAI prices) per call and in total, as the
    client sent them and through Loom, and the calls over the model's window."""
    try:
        result = replay_log(logs, window=window, output_reserve=output_reserve)
    except NoRequestError as exc:  # nothing to replay: the argument is wrong, exit 2
        err_console().print(f"error: {exc}", style="bold red", markup=False, soft_wrap=True)
        raise typer.Exit(2) from None
    for skipped in result["skipped"]:
        err_console().print(
            f"line {skipped['line']} skipped: {skipped['reason']}", markup=False, soft_wrap=True
        )
    for call in result["calls"]:
        if "note" in call:  # no window could be built: counted as the client sent it
            err_console().print(
                f"line {call['line']}: {call['note']}", markup=False, soft_wrap=True
            )
    if plot is not None:
        plot_replay(result, plot)
        err_console().print(f"plot written to {plot}", style="dim", markup=False)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    console = out_console()
    console.print(_calls_table(result["calls"]))
    total = result["total"]
    rows = [("as sent", _row(total["client"])), ("through Loom", _row(total["loom"]))]
    title = (
        f"In total: {total['client']['calls']} calls, {len(result['conversations'])} "
        "conversation(s)"
    )
    print_table(console, title, rows, _COLUMNS)
    saved = total["saved"]
    console.print(
        f"Through Loom: {_change(saved['sent'])} tokens sent; billed "
        f"{_change(saved['billed_anthropic'])} at Anthropic's prices, "
        f"{_change(saved['billed_openai'])} at OpenAI's.",
        markup=False,
    )


def _change(saved: float) -> str:
    return f"{saved:.1%} less" if saved >= 0 else f"{-saved:.1%} more"

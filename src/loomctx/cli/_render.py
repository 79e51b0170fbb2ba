"""Drawing a `ContextReport` for people: totals, a bar of the window's make-up, a table per
source, and what was left out and why. Everything fits the console's width (rich measures it),
and reads without colour: the bar's segments carry their source's name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from loomctx.context.report import ContextReport

__all__ = [
    "composition_bar",
    "left_out",
    "print_table",
    "report_view",
    "source_notes",
    "source_table",
    "totals_line",
]

_PALETTE: Final = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
)
_FREE: Final = "grey23"
# A number in a reason, elided to group reasons alike; not digits inside a name ("L1_recent").
_NUMBER: Final = re.compile(r"(?<![\w`.:-])\d[\d,]*(?![\w`])")


def _n(value: int) -> str:
    return f"{value:,}"


def _colours(report: ContextReport) -> dict[str, str]:
    return {s.name: _PALETTE[i % len(_PALETTE)] for i, s in enumerate(report.sources)}


def totals_line(report: ContextReport) -> Text:
    """One line: the window, the reply's reserve, the input budget, what the input used, and
    how much of it repeats the session's last window (what a prompt cache reads)."""
    return Text.assemble(
        ("window ", "dim"),
        _n(report.window),
        ("  reply ", "dim"),
        _n(report.output_reserve),
        ("  input ", "dim"),
        _n(report.available),
        ("  used ", "dim"),
        (_n(report.token_count), "bold"),
        f" ({report.utilization:.0%})",
        ("  framing ", "dim"),
        _n(report.overhead_tokens),
        *(
            (("  repeats the last window ", "dim"), _n(report.reused_prefix_tokens))
            if report.reused_prefix_tokens
            else ()
        ),
    )


def composition_bar(report: ContextReport, width: int) -> Text:
    """The input budget as a bar of `width` cells: one segment per source in proportion to
    the tokens it holds in the window, then framing, then what is free."""
    parts = [(s.name, s.used) for s in report.sources if s.used > 0]
    parts.append(("framing", report.overhead_tokens))
    parts.append(("free", max(0, report.available - report.token_count)))
    total = sum(t for _, t in parts)
    if total <= 0:
        return Text(" " * width)
    colours = {**_colours(report), "framing": "grey50", "free": _FREE}
    # Largest remainders, so the segments add up to exactly `width`; any part gets >= 1 cell.
    exact = [(name, tokens * width / total) for name, tokens in parts if tokens > 0]
    cells = [max(1, int(x)) for _, x in exact]
    order = sorted(range(len(exact)), key=lambda i: exact[i][1] - int(exact[i][1]), reverse=True)
    for i in order[: max(0, width - sum(cells))]:
        cells[i] += 1
    while sum(cells) > width and max(cells) > 1:
        cells[cells.index(max(cells))] -= 1
    bar = Text()
    for (name, _), size in zip(exact, cells, strict=True):
        body = f"{name[: size - 1]:<{size - 1}}" if size > 1 else ""
        bar.append("▏" + body, style=f"white on {colours[name]}")
    bar.truncate(width)  # more parts than cells: the last ones do not show
    return bar


def source_table(report: ContextReport) -> Table:
    """Per source: its allocation, what it offered, what it used, blocks kept, its status.
    Names are never cut (the status column wraps instead); a source with nothing to offer
    this build says so ("idle", its blocks "–") rather than showing 0/0."""
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    longest = max((len(s.name) for s in report.sources), default=6) + 2
    table.add_column("source", no_wrap=True, min_width=longest)
    for name in ("allocated", "offered", "used", "kept"):
        table.add_column(name, justify="right", no_wrap=True, min_width=len(name))
    table.add_column("status", ratio=1, min_width=6)
    colours = _colours(report)
    for s in report.sources:
        idle = s.blocks_offered == 0 and s.status == "ok" and s.used == 0
        if s.status != "ok":
            status = Text(f"{s.status}: {s.error or ''}".strip(), style="red")
        elif idle:
            status = Text("idle", style="dim")  # nothing to offer this build
        else:
            status = Text("ok", style="green")
        table.add_row(
            Text("■ ", style=colours[s.name]) + Text(s.name),
            _n(s.allocated),
            _n(s.offered),
            _n(s.used) + ("*" if s.note else ""),
            "–" if idle else f"{s.blocks_kept}/{s.blocks_offered}",
            status,
            style="dim" if idle else None,
        )
    return table


def source_notes(report: ContextReport) -> RenderableType | None:
    """Why a source used more than it offered or was allocated (the starred numbers)."""
    notes = [(s.name, s.note) for s in report.sources if s.note]
    if not notes:
        return None
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(style="dim", ratio=1)
    for name, note in notes:
        grid.add_row(f"* {name}", note)
    return grid


def left_out(report: ContextReport, *, limit: int = 6) -> RenderableType | None:
    """What is not in the window whole, grouped by source, status and reason (numbers in the
    reason elided), biggest first; None when everything offered is in."""
    if not report.blocks:  # a report in summary form: counts per source only
        counts = [
            f"{s.name} {s.blocks_offered - s.blocks_kept} of {s.blocks_offered}"
            for s in report.sources
            if s.blocks_kept < s.blocks_offered
        ]
        if not counts:
            return None
        return Text(f"blocks not kept: {', '.join(counts)} (reasons not recorded)", "dim")
    groups: dict[tuple[str, str, str], list[int]] = {}
    examples: dict[tuple[str, str, str], str] = {}
    for b in report.blocks:
        if b.status == "kept":
            continue
        reason = b.reason.split(": ", 1)[-1] if b.status == "summarized" else b.reason
        key = (b.source, str(b.status), _NUMBER.sub("…", reason))
        groups.setdefault(key, []).append(b.offered_tokens)
        examples.setdefault(key, reason)
    if not groups:
        return None
    table = Table.grid(padding=(0, 1))
    table.add_column(justify="right", style="bold")
    table.add_column(no_wrap=True)
    table.add_column(style="dim", ratio=1)
    ranked = sorted(groups.items(), key=lambda kv: (-sum(kv[1]), kv[0]))
    for key, sizes in ranked[:limit]:
        source, status, pattern = key
        what = Text.assemble(
            f"{source} ",
            (status, "red" if status == "dropped" else "yellow"),
            (f" ({_n(sum(sizes))} tokens)", "dim"),
        )
        table.add_row(str(len(sizes)), what, examples[key] if len(sizes) == 1 else pattern)
    if len(ranked) > limit:
        rest = sum(len(s) for _, s in ranked[limit:])
        table.add_row("…", f"{rest} more in {len(ranked) - limit} more groups", "")
    return table


def report_view(
    report: ContextReport, *, width: int, full_history: int | None = None
) -> RenderableType:
    """The whole picture of one window, for a console `width` cells wide."""
    parts: list[RenderableType] = [
        totals_line(report),
        composition_bar(report, max(10, width)),
        source_table(report),
    ]
    notes = source_notes(report)
    if notes is not None:
        parts.append(notes)
    out = left_out(report)
    if out is not None:
        parts.append(Text("not in the window whole:", style="bold"))
        parts.append(out)
    elif report.blocks:
        parts.append(Text("every offered block is in the window whole", style="dim"))
    if full_history is not None:
        ratio = full_history / report.token_count if report.token_count else 0.0
        parts.append(
            Text.assemble(
                ("sent ", "dim"),
                (_n(report.token_count), "bold"),
                (" tokens; sending the whole history instead: ", "dim"),
                (_n(full_history), "bold"),
                f" ({ratio:.1f}x)",
            )
        )
    return Group(*parts)


def print_table(
    console: Console,
    title: str,
    rows: Iterable[tuple[str, Mapping[str, Any]]],
    columns: Iterable[str],
) -> None:
    """A table of metrics: one row per (label, values); fractions shown as percentages."""
    cols = list(columns)
    body = []
    for label, values in rows:
        cells = []
        for c in cols:
            v = values.get(c)
            cells.append(f"{v:.1%}" if isinstance(v, float) else "" if v is None else str(v))
        body.append((label, cells))
    # Short headers and exact widths, so that 80 columns hold every metric uncut.
    headers = [
        "n" if c == "questions" else c.replace("window@", "win@").removeprefix("recall_")
        for c in cols
    ]
    table = Table(
        title=title,
        title_justify="left",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=(0, 1, 0, 0),
    )
    table.add_column("", no_wrap=True, min_width=max((len(label) for label, _ in body), default=0))
    for k, header in enumerate(headers):
        width = max([len(header), *(len(cells[k]) for _, cells in body)])
        table.add_column(header, justify="right", no_wrap=True, min_width=width)
    for label, cells in body:
        table.add_row(label, *cells)
    console.print(table)

"""`loomctx inspect`: what a context window held, what it did not, why, and the exact text sent.

- ``loomctx inspect FILE`` reads a report's JSON (`ContextReport.to_dict()`), a
  `context_assembled` event, or a run's event log (what ``loomctx chat --events`` writes), and
  shows the last window in it, or window ``--turn N``.
- ``loomctx inspect --list`` lists the sessions with saved windows and the knowledge bases in
  the store.
- ``loomctx inspect --session ID`` shows a window `loomctx chat` saved: the last one, or user
  turn ``--turn N`` (its last model call, or call ``--call N`` of it: a turn with tool calls
  builds a window before each). ``--text`` prints the exact messages and tools that were sent
  instead of the report; the answer to "what exactly did the model see on turn 7?" is
  ``loomctx inspect --session ID --turn 7 --text``.
- ``loomctx inspect --web`` serves the web inspector over the store (loopback only) and
  opens it in the browser (``--no-browser``: print the address only); see docs/inspector.md.
- ``loomctx inspect --session ID --cache`` lists each model call of the session with its
  cache receipt: the tokens its window predicted the provider's cache would read, write and
  bill plain, beside what the provider reported reading and writing; a call whose cache
  missed unexpectedly (over 1,024 tokens predicted read, under half of them reported) is
  flagged ``MISS``, with the likely causes.
- ``--json`` prints the report (with ``--text``: the window, messages included) as JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from loomctx.cli._common import ConfigOption, StoreOption, out_console, settings_from
from loomctx.cli._render import report_view
from loomctx.cli._reports import (
    SavedWindow,
    list_knowledge_bases,
    list_sessions,
    list_windows,
    load_reports,
    load_window,
)
from loomctx.context.billing import MISS_FLOOR, unexpected_miss
from loomctx.errors import ConfigError
from loomctx.messages import to_openai, to_openai_tools
from loomctx.session.windows import WindowLog, report_from_payload, usage_of
from loomctx.stores import open_store

__all__ = ["inspect"]


def _open(store_path: str) -> Any:
    if "://" not in store_path and not Path(store_path).is_file():
        raise ConfigError(f"no store at {store_path!r}; run `loomctx chat` first or pass `--store`")
    return open_store(store_path)


def _window(store_path: str, session: str, turn: int | None, call: int | None) -> SavedWindow:
    store = _open(store_path)
    try:
        saved = load_window(store, session, turn=turn, call=call)
        if saved is None:
            have = list_windows(store, session)
    finally:
        store.close()
    if saved is not None:
        return saved
    if not have and turn is None and call is None:
        raise ConfigError(
            f"session {session!r} has no saved window in {store_path!r}; chat in it first "
            f"(`loomctx chat --session {session}`), or list the sessions with `loomctx inspect "
            f"--list`"
        )
    shown = ", ".join(f"{t}.{c}" for t, c in have[-12:]) or "none"
    asked = f"turn {turn}" if turn is not None else "the last turn"
    raise ConfigError(
        f"session {session!r} has no window for {asked}"
        + (f", call {call}" if call is not None else "")
        + f"; saved windows (turn.call): {shown}"
    )


def _listing(store_path: str, as_json: bool) -> None:
    store = _open(store_path)
    try:
        sessions = list_sessions(store)
        bases = list_knowledge_bases(store)
    finally:
        store.close()
    if as_json:
        typer.echo(json.dumps({"sessions": sessions, "knowledge_bases": bases}, indent=2))
        return
    console = out_console()
    table = Table(title="sessions", title_justify="left", header_style="bold", box=None)
    for name, justify in (("session", "left"), ("turns", "right"), ("windows", "right"),
                          ("last", "left")):  # fmt: skip
        table.add_column(name, justify=justify, no_wrap=name == "session")  # type: ignore[arg-type]
    for s in sessions:
        last = str(s.get("last_at") or "")[:19].replace("T", " ")
        table.add_row(s["session"], str(s["turns"]), str(s["windows"]), last)
    kbs = Table(title="knowledge bases", title_justify="left", header_style="bold", box=None)
    kbs.add_column("name", no_wrap=True)
    kbs.add_column("documents", justify="right")
    for kb in bases:
        kbs.add_row(kb["name"], str(kb["documents"]))
    console.print(table if sessions else Text("no saved sessions", style="dim"))
    console.print(kbs if bases else Text("no knowledge bases", style="dim"))


def _text_view(saved: SavedWindow) -> Group:
    """The messages as sent, one after another, each under a rule naming its role."""
    parts: list[Any] = [
        Text.assemble(
            ("session ", "dim"),
            saved.session,
            ("  turn ", "dim"),
            str(saved.turn),
            ("  call ", "dim"),
            str(saved.call),
            ("  tokens ", "dim"),
            f"{saved.report.token_count:,}",
        )
    ]
    if not saved.messages:
        parts.append(Text("this window was saved without its messages (an older version)"))
    if saved.tools:
        names = ", ".join(t.get("name") or t.get("function", {}).get("name", "?")
                          for t in saved.tools)  # fmt: skip
        parts.append(Text.assemble(("tools: ", "bold"), names))
    for i, m in enumerate(saved.messages, 1):
        title = m.role if m.role != "tool" else f"tool result ({m.name or m.tool_call_id})"
        parts.append(Rule(f"{i} {title}", align="left", style="dim"))
        if m.content:
            parts.append(Text(m.content))
        for call in m.tool_calls:
            parts.append(Text(f"→ {call.name}({call.arguments_json()})", style="cyan"))
    return Group(*parts)


def _receipts(store_path: str, session: str) -> list[dict[str, Any]]:
    """Each saved call of `session`: its predicted and reported cache use, and whether its
    cache missed unexpectedly (`loomctx.context.billing.unexpected_miss`)."""
    store = _open(store_path)
    try:
        records = WindowLog(store, ("cli",)).records(session)
    finally:
        store.close()
    if not records:
        raise ConfigError(
            f"session {session!r} has no saved window in {store_path!r}; list the sessions "
            "with `loomctx inspect --list`"
        )
    out = []
    for r in records:
        report = report_from_payload(r.data["report"])
        usage = usage_of(r.data)
        out.append(
            {
                "turn": int(r.data["turn"]),
                "call": int(r.data["call"]),
                "tokens": report.token_count,
                "pricing": report.pricing,
                "predicted": {
                    "cached": report.predicted_cached,
                    "written": report.predicted_written,
                    "plain": report.predicted_plain,
                },
                "reported": usage.to_dict() if usage is not None else None,
                "missed": unexpected_miss(report.predicted_cached, usage),
            }
        )
    return out


def _cache_view(session: str, receipts: list[dict[str, Any]]) -> Group:
    table = Table(
        title=f"cache per call, session {session}: predicted by Loom, reported by the provider",
        title_justify="left",
        header_style="bold",
        box=None,
    )
    for name in ("call", "tokens", "cached", "written", "plain", "read", "wrote", ""):
        table.add_column(name, justify="left" if name in ("call", "") else "right")
    for c in receipts:
        p, r = c["predicted"], c["reported"]
        table.add_row(
            f"{c['turn']}.{c['call']}",
            f"{c['tokens']:,}",
            f"{p['cached']:,}",
            f"{p['written']:,}",
            f"{p['plain']:,}",
            f"{r['cache_read']:,}" if r else "-",
            f"{r['cache_write']:,}" if r else "-",
            Text("MISS", style="bold red") if c["missed"] else "",
        )
    missed = sum(c["missed"] for c in receipts)
    unknown = sum(c["reported"] is None for c in receipts)
    parts: list[Any] = [table]
    if missed:
        parts.append(
            Text(
                f"{missed} call(s) read under half of the {MISS_FLOOR:,}+ tokens predicted "
                "cached: the provider's cache expired or was evicted early, the prompt's "
                "prefix changed outside Loom, or its breakpoints were not sent",
                style="red",
            )
        )
    else:
        parts.append(Text("no call missed the cache unexpectedly", style="dim"))
    if unknown:
        parts.append(Text(f"{unknown} call(s) have no reported usage", style="dim"))
    return Group(*parts)


def _receipt_line(saved: SavedWindow) -> Text:
    """One call's predicted cache use beside the provider's report, flagged on a miss."""
    r = saved.report
    line = Text.assemble(
        ("cache ", "dim"),
        f"predicted {r.predicted_cached:,} read, {r.predicted_written:,} written, "
        f"{r.predicted_plain:,} plain",
        (f" ({r.pricing})" if r.pricing else " (no prediction: an older report)", "dim"),
    )
    if saved.usage is None:
        line.append("; the provider's usage is not known", style="dim")
        return line
    line.append(
        f"; reported {saved.usage.cache_read:,} read, {saved.usage.cache_write:,} written "
        f"of {saved.usage.input:,}"
    )
    if unexpected_miss(r.predicted_cached, saved.usage):
        line.append("  MISS: the cache missed unexpectedly", style="bold red")
    return line


def _window_json(saved: SavedWindow) -> dict[str, Any]:
    return {
        "session": saved.session,
        "turn": saved.turn,
        "call": saved.call,
        "prompt": saved.prompt,
        "saved_at": saved.saved_at,
        "report": saved.report.to_dict(),
        "usage": saved.usage.to_dict() if saved.usage is not None else None,
        "messages": to_openai(saved.messages),
        "tools": to_openai_tools(saved.tools) if saved.tools else [],
    }


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
        typer.Option("--session", help="Show a window `loomctx chat` saved in this session."),
    ] = None,
    listing: Annotated[
        bool,
        typer.Option("--list", help="List the saved sessions and the knowledge bases."),
    ] = False,
    turn: Annotated[
        int | None,
        typer.Option(
            "--turn",
            min=1,
            help="FILE: which window (1 = the first). --session: which user turn. Default last.",
        ),
    ] = None,
    call: Annotated[
        int | None,
        typer.Option(
            "--call", min=1, help="--session: which model call of the turn; default its last."
        ),
    ] = None,
    text: Annotated[
        bool,
        typer.Option("--text", help="--session: print the exact messages and tools sent."),
    ] = False,
    cache: Annotated[
        bool,
        typer.Option(
            "--cache",
            help="--session: each call's predicted vs reported cache use; flags misses.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
    web: Annotated[
        bool, typer.Option("--web", help="Serve the web inspector over the store (loopback).")
    ] = False,
    browser: Annotated[
        bool, typer.Option("--browser/--no-browser", help="--web: open it in the browser.")
    ] = True,
    port: Annotated[int, typer.Option("--port", help="--web: the port.", min=1)] = 8701,
    pricing: Annotated[
        str,
        typer.Option(
            "--pricing",
            help="--web: the cache pricing (`anthropic`, `openai`, `openai-gpt-5`, ...).",
        ),
    ] = "anthropic",
    price: Annotated[
        float | None,
        typer.Option("--price-per-mtok", help="--web: USD per million input tokens.", min=0),
    ] = None,
    store: StoreOption = None,
    config: ConfigOption = None,
) -> None:
    """Show what went into a context window, what did not, why, and the text sent."""
    if web:
        if path is not None or session is not None or listing:
            raise typer.BadParameter(
                "`--web` shows the whole store; give no FILE, `--session` or `--list`"
            )
        from loomctx.cli._inspect_web import serve_inspector

        serve_inspector(
            settings_from(config, store=store).store,
            port=port,
            browser=browser,
            pricing=pricing,
            usd_per_mtok=price,
        )
        return
    if sum((path is not None, session is not None, listing)) != 1:
        raise typer.BadParameter("give a FILE, `--session ID`, `--list` or `--web` (one of them)")
    if path is not None and (call is not None or text or cache):
        raise typer.BadParameter("`--call`, `--text` and `--cache` read a session's saved windows")
    if listing:
        _listing(settings_from(config, store=store).store, as_json)
        return
    console = out_console()
    if path is not None:
        reports = load_reports(path)
        index = len(reports) if turn is None else turn
        if index > len(reports):
            raise ConfigError(
                f"{str(path)!r} has {len(reports)} window(s); `--turn {turn}` is past them"
            )
        report = reports[index - 1]
        if as_json:
            typer.echo(json.dumps(report.to_dict(), indent=2))
        else:
            console.print(report_view(report, width=console.width))
        return
    assert session is not None
    if cache:
        receipts = _receipts(settings_from(config, store=store).store, session)
        if as_json:
            typer.echo(json.dumps(receipts, indent=2))
        else:
            console.print(_cache_view(session, receipts))
        return
    saved = _window(settings_from(config, store=store).store, session, turn, call)
    if as_json:
        data = _window_json(saved) if text else saved.report.to_dict()
        typer.echo(json.dumps(data, indent=2, ensure_ascii=False))
    elif text:
        console.print(_text_view(saved))
    else:
        console.print(
            Text.assemble(
                ("session ", "dim"),
                saved.session,
                ("  turn ", "dim"),
                str(saved.turn),
                ("  call ", "dim"),
                str(saved.call),
                (f"  {saved.prompt[:200]!r}" if saved.prompt else "", "dim"),
            )
        )
        console.print(report_view(saved.report, width=console.width))
        console.print(_receipt_line(saved))

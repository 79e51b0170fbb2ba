"""The agent's tools over the shop database: `list_tables`, `describe_table`, `run_sql`.

`run_sql` only reads, three times over: the file is opened with ``mode=ro``; anything but one
SELECT (or WITH ... SELECT) statement is refused before it runs; and an authorizer lets SQLite
itself refuse every action but reading (so ``WITH x AS (...) DELETE ...`` fails too). A query
that runs too long is interrupted, and at most `MAX_ROWS` rows come back. Failures raise
`ToolError`, which the agent turns into an error result the model reads and can act on.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Mapping
from contextlib import closing
from difflib import get_close_matches
from pathlib import Path

from loomctx import Tool, ToolError, tool

from .database import TABLES
from .schema import connect_read_only

__all__ = ["MAX_ROWS", "make_tools", "run_query"]

MAX_ROWS = 50
"""Rows `run_sql` returns at most: more would flood the context window."""
MAX_CELL = 80
"""Characters of one value shown at most."""

_FIRST_WORD = re.compile(r"\s*(?:(?:--[^\n]*(?:\n|$)|/\*.*?\*/)\s*)*(\w*)", re.DOTALL)
_ALLOWED = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
_ACTIONS = {
    sqlite3.SQLITE_INSERT: "insert rows",
    sqlite3.SQLITE_UPDATE: "update rows",
    sqlite3.SQLITE_DELETE: "delete rows",
    sqlite3.SQLITE_PRAGMA: "run a PRAGMA",
    sqlite3.SQLITE_ATTACH: "attach a database",
    sqlite3.SQLITE_TRANSACTION: "control a transaction",
}


def _cell(value: object) -> str:
    text = "NULL" if value is None else str(value)
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def run_query(
    database: str | Path,
    query: str,
    *,
    tables: Mapping[str, str],
    time_limit: float = 5.0,
    plain_errors: bool = False,
) -> str:
    """Run one read-only query and return its rows as text (a header, then ` | `-separated
    rows); raise `ToolError` saying what to change when the query is refused or fails.

    With `plain_errors`, a failing query's error is SQLite's message alone, as most SQL
    tools give it ("no such column: r.order_id"), without the hint naming its tables: the
    agent must find what to retrieve in the query it tried (seed 001, scenario 3)."""
    first = _FIRST_WORD.match(query)
    word = first.group(1).upper() if first else ""
    if not word:
        raise ToolError("`query` is empty; pass one SELECT statement")
    if word not in ("SELECT", "WITH"):
        raise ToolError(
            f"run_sql only reads: {word} statements are refused; write one SELECT "
            "(or WITH ... SELECT) query"
        )
    denied: list[str] = []

    def authorize(action: int, target: str | None, *_: object) -> int:
        if action in _ALLOWED:
            return sqlite3.SQLITE_OK
        if target == "sqlite_master":  # what table-valued PRAGMA functions do first
            denied.append("read SQLite's own catalogue (use `describe_table`)")
        else:
            denied.append(_ACTIONS.get(action, "change the database"))
        return sqlite3.SQLITE_DENY

    deadline = time.monotonic() + time_limit
    with closing(connect_read_only(database)) as conn:
        conn.set_authorizer(authorize)
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        try:
            cursor = conn.execute(query)
            rows = cursor.fetchmany(MAX_ROWS + 1)
        except sqlite3.ProgrammingError as exc:  # "You can only execute one statement at a time."
            raise ToolError(
                f"run_sql runs one statement at a time ({exc}); send each query in its own call"
            ) from exc
        except sqlite3.Error as exc:
            if denied:
                raise ToolError(
                    f"run_sql only reads: the statement tries to {denied[0]}, which is "
                    "refused; write one SELECT query"
                ) from exc
            if str(exc) == "interrupted":
                raise ToolError(
                    f"the query ran longer than {time_limit:g} s and was stopped; filter "
                    "earlier, aggregate, or add a LIMIT"
                ) from exc
            if plain_errors:
                raise ToolError(f"SQLite error: {exc}") from exc
            named = [f"`{t}`" for t in tables if re.search(rf"\b{t}\b", query, re.I)]
            hint = (
                f"It names the tables {', '.join(named)}: check their columns with "
                "`describe_table`, or see every table with `list_tables`."
                if named
                else "Call `list_tables` to see the tables."
            )
            raise ToolError(f"SQLite error: {exc}. {hint}") from exc
    header = " | ".join(d[0] for d in cursor.description)
    lines = [header, *(" | ".join(map(_cell, row)) for row in rows[:MAX_ROWS])]
    if len(rows) > MAX_ROWS:
        lines.append(f"(only the first {MAX_ROWS} rows are shown: aggregate, or add a LIMIT)")
    else:
        lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines)


def make_tools(
    database: str | Path,
    docs: Mapping[str, str],
    *,
    time_limit: float = 5.0,
    plain_errors: bool = False,
) -> list[Tool]:
    """The three tools over `database`, whose tables `docs` documents (`table_docs`);
    `plain_errors` as in `run_query`."""
    about = {t.name: t.about for t in TABLES}

    @tool
    def list_tables() -> str:
        """List every table of the shop database with its row count and what it holds."""
        with closing(connect_read_only(database)) as conn:
            lines = []
            for name in docs:
                (count,) = conn.execute(f"SELECT COUNT(*) FROM {name}").fetchone()
                lines.append(f"{name} ({count:,} rows): {about[name]}")
        return "\n".join(lines)

    @tool
    def describe_table(name: str) -> str:
        """The columns of one table: types, meanings, example values and foreign keys.

        Args:
            name: The table's name, as `list_tables` shows it.
        """
        key = name.strip().lower()
        if key in docs:
            return docs[key]
        close = get_close_matches(key, docs, n=2)
        suggestion = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
        raise ToolError(f"there is no table {name!r}; {suggestion}call `list_tables` for all")

    @tool
    def run_sql(query: str) -> str:
        """Run one read-only SQLite query (SELECT or WITH ... SELECT) on the shop database and
        return up to 50 rows.

        Args:
            query: One SQLite SELECT statement, e.g. "SELECT COUNT(*) FROM orders".
        """
        return run_query(
            database, query, tables=docs, time_limit=time_limit, plain_errors=plain_errors
        )

    return [list_tables, describe_table, run_sql]

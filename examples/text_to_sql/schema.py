"""The schema retriever: which tables' documentation the model sees on this turn.

The whole schema does not fit the schema budget, so before every model call the agent asks
`SchemaRetriever.retrieve_for_query` for the tables that matter. A table ranks by the share of
the query's terms its documentation contains (`loomctx.text`: English words and Chinese bigrams,
so "销售额" finds `orders`), and a table whose name the query mentions ranks first. The agent's
query is the user's question plus what the model last tried (its calls: the SQL it wrote) and
what the results said, and what earlier turns found while still relevant, so a `list_tables`
listing, or a query over `returns` that failed with only "no such column: r.order_id", brings
those tables' schemas into the next window (seed 001, scenarios 2 and 3).
"""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from pathlib import Path

from loomctx import TokenCounter
from loomctx.agent import BaseContextRetriever, Document
from loomctx.text import coverage, terms

from .database import TABLES, TODAY, Column, Table

__all__ = ["SchemaRetriever", "connect_read_only", "table_docs"]

CONSTRAINTS = (
    "These are the tables most relevant to this step, from a SQLite database of an online "
    "shop; other tables exist (call `list_tables`, or `describe_table` for one table's "
    f"columns). The data ends on {TODAY.isoformat()}: treat that day as today. Use only "
    "columns documented here or returned by a tool."
)
RULES = (
    "Money is stored in integer cents: divide by 100.0 for amounts. Dates are ISO text: "
    f"compare them as text, e.g. `ordered_at >= date('{TODAY.isoformat()}', '-6 days')`. "
    "Cancelled orders are not sales. Answer with the numbers the query returned."
)


def connect_read_only(database: str | Path) -> sqlite3.Connection:
    """A connection that cannot write: SQLite opens the file with ``mode=ro``."""
    path = Path(database).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no database at {path}; create it with `create_database`")
    return sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)


def _examples(conn: sqlite3.Connection, table: Table, column: Column) -> str:
    """What the data looks like: the range of dates and numbers, the commonest texts."""
    name, where = column.name, f"FROM {table.name} WHERE {column.name} IS NOT NULL"
    if column.references or name == "id" or "'" in column.meaning:
        return ""  # ids say nothing; enumerated values are in the meaning already
    if column.type == "TEXT" and not name.endswith(("_on", "_at")):
        values = conn.execute(
            f"SELECT {name} {where} GROUP BY {name} ORDER BY COUNT(*) DESC, {name} LIMIT 3"
        ).fetchall()
        return " Examples: " + ", ".join(repr(v) for (v,) in values) + "."
    low, high = conn.execute(f"SELECT MIN({name}), MAX({name}) {where}").fetchone()
    return f" From {low} to {high}."


def _doc(conn: sqlite3.Connection, table: Table) -> str:
    (rows,) = conn.execute(f"SELECT COUNT(*) FROM {table.name}").fetchone()
    lines = [f"Table {table.name}: {table.about} {rows:,} rows.", "Columns:"]
    for c in table.columns:
        key = " PRIMARY KEY" if table.primary_key == (c.name,) else ""
        ref = f" -> {c.references}" if c.references else ""
        lines.append(f"- {c.name} {c.type}{key}{ref}: {c.meaning}{_examples(conn, table, c)}")
    referenced_by = [
        f"{other.name}.{c.name}"
        for other in TABLES
        for c in other.columns
        if c.references.split(".")[0] == table.name and other is not table
    ]
    if referenced_by:
        lines.append(f"Referenced by: {', '.join(referenced_by)}.")
    return "\n".join(lines)


def table_docs(database: str | Path) -> dict[str, str]:
    """The documentation of every table, by name, in the order of `TABLES`."""
    with closing(connect_read_only(database)) as conn:
        return {t.name: _doc(conn, t) for t in TABLES}


class SchemaRetriever(BaseContextRetriever):
    """A `ContextRetriever` over per-table documentation (see the module docstring).

    `retrieve_for_query` returns the constraints, the `top_k` best tables and the rules;
    `format_documents` (inherited) assembles them as seed 001 does within `max_tokens`.
    """

    def __init__(
        self,
        docs: dict[str, str],
        *,
        counter: TokenCounter | None = None,
        max_tokens: int = 4000,
    ) -> None:
        super().__init__(counter=counter, max_tokens=max_tokens)
        self.docs = docs
        self._terms = {name: frozenset(terms(doc)) for name, doc in docs.items()}
        self._names = re.compile(r"\b(" + "|".join(map(re.escape, docs)) + r")\b", re.IGNORECASE)

    def rank(self, query: str) -> list[tuple[str, float]]:
        """Every table that matches `query`, best first: (name, score); a mentioned table
        scores 1 more than its lexical score, the share of the query's terms it contains."""
        wanted = frozenset(terms(query))
        mentioned = {m.lower() for m in self._names.findall(query)}
        scored = [
            (name, coverage(wanted, self._terms[name]) + (1.0 if name in mentioned else 0.0))
            for name in self.docs
        ]
        return sorted(((n, s) for n, s in scored if s > 0), key=lambda pair: -pair[1])

    async def retrieve_for_query(self, query: str, top_k: int = 5) -> list[Document]:
        """The constraints, the schemas of the `top_k` best tables, and the rules."""
        tables = [
            Document(id=name, content=self.docs[name], score=round(score, 3))
            for name, score in self.rank(query)[:top_k]
        ]
        return [
            Document(id="schema_constraints", content=CONSTRAINTS, kind="constraint"),
            *tables,
            Document(id="schema_rules", content=RULES, kind="rule"),
        ]

"""The text-to-SQL agent: a model, the three database tools, and the schema retriever."""

from __future__ import annotations

from pathlib import Path

from loomctx import LLM, Agent, AgentLoop, AgentSources

from .schema import SchemaRetriever, table_docs
from .tools import make_tools

__all__ = ["INSTRUCTIONS", "SCHEMA_BUDGET", "TOP_TABLES", "build_agent"]

INSTRUCTIONS = (
    "You answer questions about an online shop from its SQLite database. Look at the schema "
    "in the reference context; when a table you need is not there, call `list_tables` or "
    "`describe_table`. Run each query with `run_sql`, read the rows, and fix the query when it "
    "fails. Answer briefly with the numbers you found, in the language of the question."
)
SCHEMA_BUDGET = 1500
"""Tokens the schema may take in a window: less than the full schema (about 2,800 tokens)."""
TOP_TABLES = 5
"""Tables retrieved per turn."""


def build_agent(
    llm: LLM, database: str | Path, *, max_turns: int = 8, plain_errors: bool = False
) -> Agent:
    """An agent that answers questions about the shop `database` with `llm` (`plain_errors`:
    SQL errors are SQLite's message alone, see `run_query`)."""
    docs = table_docs(database)
    return Agent(
        llm=llm,
        system_instructions=INSTRUCTIONS,
        tools=make_tools(database, docs, plain_errors=plain_errors),
        name="text_to_sql",
        sources=AgentSources(
            retriever=SchemaRetriever(docs, max_tokens=SCHEMA_BUDGET), top_k=TOP_TABLES
        ),
        loop=AgentLoop(max_turns=max_turns),
    )

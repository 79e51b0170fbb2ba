"""The SQL pieces of `PostgresStore`: connection setup, vector tables, filters, unit vectors.

Every statement is parameterized; the only identifiers built here are vector tables'
names, made from an integer (`table`), never from user text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql

from loomctx.errors import ConfigError
from loomctx.stores._codec import check_str, encode, prefix_range
from loomctx.stores.base import Namespace, Record

__all__ = [
    "check_nul",
    "configure",
    "create_vector_table",
    "describe",
    "filters",
    "normalise",
    "spans",
    "table",
    "where",
]

HNSW_MAX_DIM: Final = 2_000  # pgvector's limit for an HNSW index on `vector`
# A JSON text holds U+0000 as the escape \u0000, after an even number of backslashes.
_NUL_ESCAPE: Final = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
EF_SEARCH: Final = 100  # HNSW candidates per search (pgvector's default: 40); > any usual limit


def configure(conn: psycopg.Connection[Any]) -> None:
    """Set up a new pooled connection: pgvector's types, and iterative index scans so that
    a filtered vector search still returns `limit` rows (pgvector >= 0.8)."""
    register_vector(conn)
    conn.execute("SET hnsw.iterative_scan = relaxed_order")
    conn.execute(sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(EF_SEARCH)))


def table(set_id: int) -> sql.Identifier:
    return sql.Identifier(f"vectors_{int(set_id)}")


def filters(
    prefix: Namespace, kind: str | None, *, exact: bool, column: str = ""
) -> tuple[list[sql.Composable], list[Any]]:
    """Conditions (each with ``%s`` placeholders, in order) on namespace and kind."""
    clauses: list[sql.Composable] = []
    params: list[Any] = []
    bounds = prefix_range(prefix)
    if exact:
        clauses.append(sql.SQL(f"{column}namespace = %s"))
        params.append(encode(prefix))
    elif bounds is not None:
        clauses.append(sql.SQL(f"{column}namespace >= %s AND {column}namespace < %s"))
        params += bounds
    if kind is not None:
        check_str("kind", kind)
        clauses.append(sql.SQL(f"{column}kind = %s"))
        params.append(kind)
    return clauses, params


def where(clauses: list[sql.Composable]) -> sql.Composable:
    if not clauses:
        return sql.SQL("")
    return sql.SQL(" WHERE ") + sql.SQL(" AND ").join(clauses)


def spans(clauses: list[sql.Composable]) -> Iterator[tuple[str, tuple[int, int]]]:
    """Each clause of `filters` as text with its ``%s`` turned into ``{}``, and the index
    range of its parameters, to name them for a query that takes named parameters."""
    start = 0
    for clause in clauses:
        assert isinstance(clause, sql.SQL)
        text = clause.as_string()
        count = text.count("%s")
        yield text.replace("%s", "{}"), (start, start + count)
        start += count


def normalise(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Unit rows (a zero row stays zero: it scores 0 against everything), as SQLite's index."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1
    unit: npt.NDArray[np.float32] = (vectors / norms).astype(np.float32, copy=False)
    return unit


def create_vector_table(conn: psycopg.Connection[Any], model: str, dim: int) -> int:
    """Register `model` with `dim`-d vectors and create its table; the new set's id."""
    row = conn.execute(
        "INSERT INTO vector_sets (model, dim) VALUES (%s, %s) RETURNING id", (model, dim)
    ).fetchone()
    assert row is not None
    set_id = int(row[0])
    name = table(set_id)
    conn.execute(
        sql.SQL(
            "CREATE TABLE {} (record_id bigint PRIMARY KEY REFERENCES records (id) "
            'ON DELETE CASCADE, namespace text COLLATE "C" NOT NULL, kind text NOT NULL, '
            "embedding vector({}) NOT NULL, seq bigint NOT NULL)"
        ).format(name, sql.Literal(dim))
    )
    conn.execute(sql.SQL("CREATE INDEX ON {} (namespace)").format(name))
    if dim <= HNSW_MAX_DIM:
        conn.execute(
            sql.SQL("CREATE INDEX ON {} USING hnsw (embedding vector_ip_ops)").format(name)
        )
    return set_id


def check_nul(record: Record, encoded: str, data_json: str) -> None:
    """`ConfigError` if a field of `record` holds U+0000, which PostgreSQL text cannot."""
    fields = {"namespace": encoded, "key": record.key, "kind": record.kind}
    for name, value in {**fields, "text": record.text, "data": data_json}.items():
        if "\x00" in value or (name == "data" and _NUL_ESCAPE.search(value)):
            raise ConfigError(
                f"the `{name}` of record {record.key!r} holds the NUL character (U+0000), "
                f"which PostgreSQL cannot store; remove it (s.replace('\\x00', ''))"
            )


def describe(params: dict[str, Any]) -> str:
    """Where a connection goes, for messages: never the password."""
    host = params.get("host") or "localhost"
    port = params.get("port")
    database = params.get("dbname") or params.get("user") or "postgres"
    return f"postgresql://{host}{f':{port}' if port else ''}/{database}"

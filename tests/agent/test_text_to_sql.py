"""Seed 001's three scenarios on the text-to-SQL example: the real database, tools, schema
retriever and agent loop, with a scripted model; and the read-only guarantees of `run_sql`.

What the model was shown is read from `ScriptedLLM.calls`: the schema of a table is in a
window when its documentation is inside the retrieved-context block of that call's messages.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import importlib.util
import json
import re
import sqlite3
import sys
import unicodedata
from pathlib import Path
from types import ModuleType

import pytest

from loomctx import AgentEvent, Message, TiktokenCounter, ToolCall, ToolResult
from loomctx.agent import Document
from loomctx.agent.events import RetrievalCompleted, RunCompleted, ToolResultEvent
from loomctx.testing import LLMCall, ScriptedLLM
from tests.agent._servers import (
    WireServer,
    openai_chunk,
    openai_sse,
    openai_text,
    openai_tool_delta,
)

ROOT = Path(__file__).resolve().parents[2] / "examples" / "text_to_sql"


def _package() -> ModuleType:
    """Import examples/text_to_sql as the package `text_to_sql` (examples/ is not on the path)."""
    if "text_to_sql" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "text_to_sql", ROOT / "__init__.py", submodule_search_locations=[str(ROOT)]
        )
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["text_to_sql"] = module
        spec.loader.exec_module(module)
    return sys.modules["text_to_sql"]


_package()
shop = importlib.import_module("text_to_sql.agent")
database_module = importlib.import_module("text_to_sql.database")
schema_module = importlib.import_module("text_to_sql.schema")
tools_module = importlib.import_module("text_to_sql.tools")
main_module = importlib.import_module("text_to_sql.__main__")


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path: Path = database_module.create_database(tmp_path_factory.mktemp("shop") / "shop.db")
    return path


@pytest.fixture(scope="module")
def docs(database: Path) -> dict[str, str]:
    found: dict[str, str] = schema_module.table_docs(database)
    return found


def sql_call(call_id: str, query: str) -> list[ToolCall]:
    return [ToolCall(id=call_id, name="run_sql", arguments={"query": query})]


def retrieved(call: LLMCall) -> str:
    """The retrieved-context block of the messages one model call received."""
    for message in call.messages:
        match = re.search(r'<context source="retrieved".*?</context>', message.content, re.S)
        if match:
            return match.group()
    return ""


def tables_shown(call: LLMCall, docs: dict[str, str]) -> set[str]:
    """The tables whose whole documentation the model saw in this call."""
    block = retrieved(call)
    return {name for name, doc in docs.items() if doc in block}


def last_tool_text(messages: tuple[Message, ...]) -> str:
    return next(m.content for m in reversed(messages) if m.role == "tool")


async def run(
    llm: ScriptedLLM, database: Path, question: str, *, plain_errors: bool = False
) -> list[AgentEvent]:
    agent = shop.build_agent(llm, database, plain_errors=plain_errors)
    events = [e async for e in agent.stream(question)]
    llm.assert_complete()
    return events


def results(events: list[AgentEvent]) -> list[ToolResultEvent]:
    return [e for e in events if isinstance(e, ToolResultEvent)]


def output(events: list[AgentEvent]) -> str:
    done = events[-1]
    assert isinstance(done, RunCompleted)
    assert done.stopped == "done"
    return done.output


# ---------------------------------------------------------------------------------------------
# Seed 001's scenarios


async def test_scenario_1_one_turn_with_the_relevant_schema(
    database: Path, docs: dict[str, str]
) -> None:
    query = (
        "SELECT ROUND(SUM(total_cents) / 100.0, 2) AS sales FROM orders "
        "WHERE status != 'cancelled' AND ordered_at >= date('2025-06-30', '-6 days')"
    )
    llm = ScriptedLLM(
        [sql_call("q1", query), lambda ms: f"最近7天的销售额: {last_tool_text(ms).splitlines()[1]}"]
    )
    events = await run(llm, database, "查询最近7天的销售额")

    first = llm.calls[0]
    assert "orders" in tables_shown(first, docs)
    assert tables_shown(first, docs) < set(docs)  # the schema was selected, not dumped
    (result,) = results(events)
    assert not result.is_error
    with sqlite3.connect(database) as conn:
        (expected,) = conn.execute(query).fetchone()
    assert result.content.splitlines()[:2] == ["sales", str(expected)]
    assert output(events) == f"最近7天的销售额: {expected}"


async def test_scenario_2_list_tables_brings_their_schemas_into_the_next_call(
    database: Path, docs: dict[str, str]
) -> None:
    llm = main_module.walkthrough()
    events = await run(llm, database, main_module.SCENARIO_2)

    before, after = (tables_shown(call, docs) for call in llm.calls[:2])
    assert before == {"customers", "orders"}
    listing = results(events)[0]
    assert listing.name == "list_tables"
    listed = {line.split(" ")[0] for line in listing.content.splitlines()}
    assert listed == set(docs)
    revealed = after - before
    assert "products" in revealed  # the query of the next step joins it
    assert revealed <= listed
    for name in revealed:
        assert docs[name] in retrieved(llm.calls[1])
        assert docs[name] not in retrieved(llm.calls[0])
    rows = results(events)[1]
    assert not rows.is_error
    assert rows.content.splitlines()[0].startswith("segment | buyers | orders")
    assert output(events).startswith("Purchase behaviour by customer segment")
    assert "- consumer: " in output(events)


async def test_scenario_3_a_failed_query_brings_the_missing_schema(
    database: Path, docs: dict[str, str]
) -> None:
    guess = "SELECT COUNT(DISTINCT returns.order_id) FROM returns"
    fixed = (
        "SELECT COUNT(DISTINCT oi.order_id) FROM returns r "
        "JOIN order_items oi ON oi.id = r.order_item_id WHERE r.requested_on >= '2025-05-01' "
        "AND r.requested_on < '2025-06-01'"
    )
    llm = ScriptedLLM(
        [
            sql_call("q1", guess),
            sql_call("q2", fixed),
            lambda ms: f"上个月有 {last_tool_text(ms).splitlines()[1]} 个订单有退货。",
        ]
    )
    events = await run(llm, database, "上个月有多少订单被退回？")

    assert "returns" not in tables_shown(llm.calls[0], docs)
    failed, answered = results(events)
    assert failed.is_error
    assert "no such column: returns.order_id" in failed.content
    assert "returns" in tables_shown(llm.calls[1], docs)
    assert docs["returns"] in retrieved(llm.calls[1])
    assert not answered.is_error
    with sqlite3.connect(database) as conn:
        (count,) = conn.execute(fixed).fetchone()
    assert output(events) == f"上个月有 {count} 个订单有退货。"


async def test_scenario_3_with_a_plain_sqlite_error_the_tried_query_brings_the_schema(
    database: Path, docs: dict[str, str]
) -> None:
    # The tool gives SQLite's message alone, which names no table: only the SQL the model
    # tried says `returns`, so the query of the next turn must include the model's call.
    guess = "SELECT COUNT(DISTINCT r.order_id) FROM returns r"
    fixed = (
        "SELECT COUNT(DISTINCT oi.order_id) FROM returns r "
        "JOIN order_items oi ON oi.id = r.order_item_id WHERE r.requested_on >= '2025-05-01' "
        "AND r.requested_on < '2025-06-01'"
    )
    llm = ScriptedLLM(
        [
            sql_call("q1", guess),
            sql_call("q2", fixed),
            lambda ms: f"上个月有 {last_tool_text(ms).splitlines()[1]} 个订单有退货。",
        ]
    )
    events = await run(llm, database, "上个月有多少订单被退回？", plain_errors=True)

    failed, answered = results(events)
    assert failed.is_error
    assert failed.content.endswith("SQLite error: no such column: r.order_id")
    assert "returns" not in failed.content
    assert "returns" not in tables_shown(llm.calls[0], docs)
    queries = [e.query for e in events if isinstance(e, RetrievalCompleted)]
    assert guess in queries[1]  # what the model tried, beside what it got back
    assert "no such column: r.order_id" in queries[1]
    assert "returns" in tables_shown(llm.calls[1], docs)
    assert not answered.is_error
    with sqlite3.connect(database) as conn:
        (count,) = conn.execute(fixed).fetchone()
    assert output(events) == f"上个月有 {count} 个订单有退货。"


async def test_what_a_listing_revealed_stays_two_turns_later_while_relevant(
    database: Path, docs: dict[str, str]
) -> None:
    # Turn 1 lists the tables; turn 2 describes `customers`, whose documentation does not
    # name `products`; the query of turn 3 still holds the listing (it shares the tables the
    # run works with), so `products` is still in the window when the model writes the join.
    llm = ScriptedLLM(
        [
            [ToolCall(id="l1", name="list_tables", arguments={})],
            [ToolCall(id="d1", name="describe_table", arguments={"name": "customers"})],
            sql_call("q1", main_module.SCENARIO_2_SQL),
            "done",
        ]
    )
    events = await run(llm, database, main_module.SCENARIO_2)
    assert "products" not in docs["customers"]
    shown = [tables_shown(call, docs) for call in llm.calls]
    assert "products" not in shown[0]
    assert "products" in shown[1]  # the listing of turn 1 revealed it
    assert "products" in shown[2]  # and it is still there on turn 3
    queries = [e.query for e in events if isinstance(e, RetrievalCompleted)]
    listing = results(events)[0].content
    assert listing.splitlines()[0] in queries[2]
    rows = results(events)[2]
    assert not rows.is_error
    assert output(events) == "done"


def test_the_full_schema_does_not_fit_the_schema_budget(docs: dict[str, str]) -> None:
    counter = TiktokenCounter()
    assert sum(counter.count(doc) for doc in docs.values()) > 1.5 * shop.SCHEMA_BUDGET
    retriever = schema_module.SchemaRetriever(docs, max_tokens=shop.SCHEMA_BUDGET)
    everything = [Document(id=name, content=doc, score=1.0) for name, doc in docs.items()]
    assert counter.count(retriever.format_documents(everything)) <= shop.SCHEMA_BUDGET


async def test_retrieval_ranks_mentioned_tables_first_and_keeps_top_k(
    docs: dict[str, str],
) -> None:
    retriever = schema_module.SchemaRetriever(docs)
    found = await retriever.retrieve_for_query("分析客户购买行为, see the REVIEWS table", top_k=2)
    assert [d.kind for d in found] == ["constraint", "document", "document", "rule"]
    assert found[1].id == "reviews"
    assert found[2].id in ("customers", "orders")
    nothing = await retriever.retrieve_for_query("zebra", top_k=5)
    assert [d.kind for d in nothing] == ["constraint", "rule"]


# ---------------------------------------------------------------------------------------------
# The tools


def invoke(database: Path, docs: dict[str, str], tool_name: str, **arguments: str) -> ToolResult:
    (found,) = [t for t in tools_module.make_tools(database, docs) if t.name == tool_name]
    result: ToolResult = asyncio.run(found.invoke(arguments, call_id="c1"))
    return result


def fingerprint(database: Path) -> str:
    return hashlib.sha256(database.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("query", "refusal"),
    [
        ("INSERT INTO orders (id) VALUES (999999)", "INSERT statements are refused"),
        ("UPDATE orders SET status = 'paid'", "UPDATE statements are refused"),
        ("DELETE FROM orders", "DELETE statements are refused"),
        ("DROP TABLE orders", "DROP statements are refused"),
        ("ATTACH DATABASE 'other.db' AS other", "ATTACH statements are refused"),
        ("PRAGMA user_version = 5", "PRAGMA statements are refused"),
        ("pragma journal_mode = delete", "PRAGMA statements are refused"),
        ("-- tidy up\nVACUUM", "VACUUM statements are refused"),
        ("SELECT 1; DROP TABLE orders", "runs one statement at a time"),
        ("SELECT 1; SELECT 2", "runs one statement at a time"),
        ("WITH gone AS (SELECT 1) DELETE FROM orders", "tries to delete rows"),
        ("WITH x AS (SELECT 1) INSERT INTO orders (id) SELECT 999999", "tries to insert rows"),
        ("SELECT * FROM pragma_table_info('orders')", "tries to read SQLite's own catalogue"),
        ("", "`query` is empty"),
    ],
)
def test_run_sql_refuses_everything_but_one_select(
    database: Path, docs: dict[str, str], query: str, refusal: str
) -> None:
    before = fingerprint(database)
    result = invoke(database, docs, "run_sql", query=query)
    assert result.is_error
    assert refusal in result.content
    assert fingerprint(database) == before


def test_the_connection_itself_cannot_write(database: Path) -> None:
    conn = schema_module.connect_read_only(database)
    with pytest.raises(sqlite3.OperationalError, match="readonly database"):
        conn.execute("INSERT INTO categories (id, name) VALUES (999, 'x')")
    conn.close()
    with pytest.raises(FileNotFoundError, match="no database at"):
        schema_module.connect_read_only(database.parent / "missing.db")


def test_run_sql_caps_the_rows_and_shows_nulls(database: Path, docs: dict[str, str]) -> None:
    many = invoke(database, docs, "run_sql", query="SELECT id, customer_id FROM web_sessions")
    lines = many.content.splitlines()
    assert len(lines) == 1 + tools_module.MAX_ROWS + 1
    assert lines[-1].startswith(f"(only the first {tools_module.MAX_ROWS} rows")
    one = invoke(database, docs, "run_sql", query="/* c */ SELECT NULL AS x, 'é' AS y;")
    assert one.content == "x | y\nNULL | é\n(1 row)"


def test_a_runaway_query_is_stopped(database: Path, docs: dict[str, str]) -> None:
    forever = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT max(x) FROM n"
    run_sql = tools_module.make_tools(database, docs, time_limit=0.05)[2]
    result = asyncio.run(run_sql.invoke({"query": forever}))
    assert result.is_error
    assert "ran longer than 0.05 s and was stopped" in result.content


def test_sql_errors_name_the_tables_to_describe(database: Path, docs: dict[str, str]) -> None:
    unknown = invoke(database, docs, "run_sql", query="SELECT * FROM refunds")
    assert unknown.is_error
    assert "SQLite error: no such table: refunds. Call `list_tables`" in unknown.content


def test_describe_table(database: Path, docs: dict[str, str]) -> None:
    assert invoke(database, docs, "describe_table", name=" Returns ").content == docs["returns"]
    wrong = invoke(database, docs, "describe_table", name="review")
    assert wrong.is_error
    assert "there is no table 'review'; did you mean 'reviews'" in wrong.content
    none = invoke(database, docs, "describe_table", name="zebra")
    assert "there is no table 'zebra'; call `list_tables`" in none.content


def test_docs_carry_types_keys_and_examples(docs: dict[str, str]) -> None:
    orders = docs["orders"]
    assert orders.startswith("Table orders: Orders placed by customers")
    assert "- id INTEGER PRIMARY KEY: Row id." in orders
    assert "- customer_id INTEGER -> customers.id: Who ordered." in orders
    assert "Referenced by: order_items.order_id, payments.order_id" in orders
    assert "- ordered_at TEXT: When the order was placed (YYYY-MM-DD HH:MM:SS). From 2024-" in (
        orders
    )
    assert "Examples: " in docs["customers"]


# ---------------------------------------------------------------------------------------------
# The database and the program


def dump(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        return "\n".join(conn.iterdump())


def test_the_database_is_deterministic_per_seed(tmp_path: Path) -> None:
    create = database_module.create_database
    one, two = create(tmp_path / "a.db"), create(tmp_path / "b.db")
    other = create(tmp_path / "c.db", seed=8)
    assert dump(one) == dump(two)
    assert dump(one) != dump(other)
    with pytest.raises(FileExistsError, match="exists"):
        create(one)


def fits(text: str) -> bool:
    width = main_module.width
    return all(width(line) <= main_module.WIDTH for line in text.splitlines())


def test_the_offline_walkthrough_prints_within_100_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("LOOM_MODEL", raising=False)
    main_module.main(["How many orders?", "--db", str(tmp_path / "shop.db")])
    out = capsys.readouterr().out
    assert out.startswith("OFFLINE WALK-THROUGH")
    assert "(not answering 'How many orders?': that needs a model)" in out
    assert "← list_tables returned:" in out
    assert "answer (3 turns" in out
    assert fits(out)
    assert (tmp_path / "shop.db").is_file()  # a given path is created, and kept


def test_a_configured_model_answers_the_question(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    wire: WireServer,
    database: Path,
) -> None:
    query = json.dumps({"query": "SELECT COUNT(*) AS n FROM orders"})
    wire.script(
        openai_sse(
            [
                openai_chunk(openai_tool_delta(0, id="c1", name="run_sql", arguments=query)),
                openai_chunk({}, finish_reason="tool_calls"),
            ]
        ),
        openai_text("There are 3,200 orders."),
    )
    monkeypatch.setenv("LOOM_MODEL", "shop-model")
    monkeypatch.setenv("OPENAI_BASE_URL", wire.openai_url)
    main_module.main(["How many orders are there?", "--db", str(database)])
    out = capsys.readouterr().out
    assert out.startswith("model: openai:shop-model")
    assert "n\n      3200" in out
    assert "There are 3,200 orders." in out
    assert fits(out)
    first = wire.requests[0].body
    assert first["messages"][-1] == {"role": "user", "content": "How many orders are there?"}
    assert "Table orders:" in json.dumps(first["messages"], ensure_ascii=False)


def test_width_counts_wide_characters_twice() -> None:
    assert main_module.width("ab退货") == 6
    assert unicodedata.east_asian_width("退") == "W"
    assert main_module.fit("退" * 80, indent="").endswith("…")

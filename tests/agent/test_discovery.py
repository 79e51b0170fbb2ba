"""`Discoveries` (issue 16, item 2): the retrieval query of each turn holds what the model
tried and what it got back, and earlier findings while they stay relevant."""

from __future__ import annotations

from pathlib import Path

import pytest

from loomctx import (
    Agent,
    AgentSources,
    ConfigError,
    KnowledgeBase,
    LoomMemory,
    SQLiteStore,
    ToolCall,
    ToolResult,
    tool,
)
from loomctx.agent.discovery import Discoveries
from loomctx.agent.retriever import BaseContextRetriever, Document
from loomctx.testing import ScriptedLLM


def result(call_id: str, name: str, content: str, *, error: bool = False) -> ToolResult:
    return ToolResult(call_id=call_id, name=name, content=content, is_error=error, elapsed_ms=1.0)


def turn(found: Discoveries, n: int, name: str, arguments: dict[str, str], content: str) -> None:
    call = ToolCall(id=f"c{n}", name=name, arguments=arguments)
    found.add(turn=n, calls=[call], results=[result(call.id, name, content)])


def test_the_first_query_is_the_request_alone() -> None:
    assert Discoveries("  How many orders?  ").query() == "How many orders?"


def test_the_query_holds_the_call_with_its_arguments_and_the_result() -> None:
    found = Discoveries("上个月有多少订单被退回？")
    turn(found, 1, "run_sql", {"query": "SELECT COUNT(*) FROM returns r"}, "no such column: r.x")
    assert found.query().splitlines() == [
        "上个月有多少订单被退回？",
        'run_sql {"query": "SELECT COUNT(*) FROM returns r"}',
        "no such column: r.x",
    ]


def test_an_earlier_finding_stays_while_relevant_and_leaves_when_the_run_moves_on() -> None:
    found = Discoveries("reconcile the ledger")
    turn(found, 1, "list_tables", {}, "tables: invoices, payments, refunds, vendors")
    turn(found, 2, "weather", {"city": "Paris"}, "sunny and mild in Paris")
    turn(found, 3, "describe", {"name": "invoices"}, "invoices: id, vendor, payments due")
    query = found.query()
    # Two turns later, the listing shares the run's current focus (invoices, payments, vendor).
    assert "tables: invoices, payments, refunds, vendors" in query
    # The weather, one turn old, shares nothing with it: gone.
    assert "Paris" not in query
    scores = {p.text: s for p, s in found.relevance()}
    assert scores["sunny and mild in Paris"] == 0
    assert scores["tables: invoices, payments, refunds, vendors"] > found.min_relevance
    # Back to the weather: the listing leaves, the weather returns.
    turn(found, 4, "forecast", {"city": "Paris"}, "sunny tomorrow in Paris")
    query = found.query()
    assert "sunny and mild in Paris" in query
    assert "invoices" not in query


def test_the_query_is_bounded() -> None:
    found = Discoveries("q", max_chars=60, max_piece_chars=20)
    turn(found, 1, "read", {"path": "a.txt"}, "alpha " * 50)
    query = found.query()
    assert len(query) <= 60
    assert all(len(line) <= 20 for line in query.splitlines())
    assert found.evidence[1].text == ("alpha " * 50)[:20]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"min_relevance": 1.5}, "`min_relevance` must be a number from 0 to 1"),
        ({"min_relevance": True}, "`min_relevance` must be a number from 0 to 1"),
        ({"max_chars": 0}, "`max_chars` must be an int >= 1"),
        ({"max_piece_chars": "9"}, "`max_piece_chars` must be an int >= 1"),
    ],
)
def test_bad_settings_are_named(options: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Discoveries("q", **options)  # type: ignore[arg-type]


class Recorder(BaseContextRetriever):
    def __init__(self) -> None:
        super().__init__()
        self.queries: list[str] = []

    async def retrieve_for_query(self, query: str, top_k: int = 5) -> list[Document]:
        self.queries.append(query)
        return []


@tool
def grep(pattern: str) -> str:
    """Search the repository.

    Args:
        pattern: What to look for.
    """
    return f"src/billing/{pattern}.py: def {pattern}(invoice): ..."


async def test_the_agent_asks_its_retriever_with_what_the_model_tried() -> None:
    retriever = Recorder()
    llm = ScriptedLLM(
        [
            [ToolCall(id="g1", name="grep", arguments={"pattern": "settle_invoice"})],
            [ToolCall(id="g2", name="grep", arguments={"pattern": "refund_invoice"})],
            "Found both.",
        ]
    )
    agent = Agent(
        llm=llm,
        tools=[grep],
        memory=LoomMemory("d", embedder=None),
        sources=AgentSources(retriever=retriever),
    )
    await agent.run("Where are invoices settled?")
    first, second, third = retriever.queries
    assert first == "Where are invoices settled?"
    assert 'grep {"pattern": "settle_invoice"}' in second
    assert "src/billing/settle_invoice.py" in second
    assert 'grep {"pattern": "refund_invoice"}' in third
    assert "src/billing/settle_invoice.py" in third  # turn 1's finding, still relevant


def test_calls_without_results_blank_pieces_and_an_empty_run() -> None:
    found = Discoveries("q")
    assert found.relevance() == []
    call = ToolCall(id="c1", name="ping", arguments={})
    found.add(turn=1, calls=[call], results=[result("other", "ping", "x")])
    assert found.query() == "q\nping {}"  # the call alone: its result is not among them
    found.add(turn=2, calls=[], results=[result("c9", "ping", "   ")])
    assert [p.text for p in found.evidence] == ["ping {}"]


def test_a_piece_that_would_overflow_the_query_is_left_out_and_smaller_ones_kept() -> None:
    found = Discoveries("ledger", max_chars=40)
    call = ToolCall(id="c1", name="read", arguments={})
    found.add(turn=1, calls=[call], results=[result("c1", "read", "ledger " + "x" * 60)])
    assert found.query() == "ledger\nread {}"


@tool
def lookup_order(order_id: str) -> str:
    """Look an order up.

    Args:
        order_id: The order's id.
    """
    return f"order {order_id}: delivered 2025-06-02, customer asked to send the blender back"


async def test_knowledge_bases_are_searched_again_with_what_the_run_found(
    tmp_path: Path,
) -> None:
    # The request names neither returns nor blenders; the tool's result does. The knowledge
    # base is searched with it on the next turn, so the returns policy is in that window.
    store = SQLiteStore(tmp_path / "kb.db")
    handbook = KnowledgeBase("handbook", store, embedder=None)
    handbook.add_text(
        "Returns: a blender or other appliance can be sent back within 30 days of delivery.",
        document_id="returns",
    )
    handbook.add_text("Shipping: parcels leave the warehouse within two days.", document_id="ship")
    llm = ScriptedLLM(
        [[ToolCall(id="o1", name="lookup_order", arguments={"order_id": "A-17"})], "Yes."]
    )
    agent = Agent(
        llm=llm,
        tools=[lookup_order],
        knowledge_bases=[handbook],
        memory=LoomMemory("kb", embedder=None),
    )
    # More than four content terms: the rewriter (which adds recent words) stays out of it.
    await agent.run("Can support still handle order A-17 that Anna placed last week?")
    first, second = ("\n".join(m.content for m in call.messages) for call in llm.calls)
    assert "within 30 days of delivery" not in first
    assert "within 30 days of delivery" in second
    store.close()

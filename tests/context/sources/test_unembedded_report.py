"""The report says when search was lexical for want of vectors, and for how many records."""

from __future__ import annotations

from loomctx import LoomMemory, MemoryEmbedding, SQLiteStore, Task, TaskStatus
from loomctx.context.orchestrator import ContextOrchestrator
from loomctx.context.report import ContextReport
from loomctx.context.sources import UserInputSource
from loomctx.context.sources.memory import L4SemanticSource
from loomctx.context.sources.retrieval import UnifiedRetrievalSource
from loomctx.memory.enrichment import BackgroundEmbedder
from loomctx.testing.embedders import HashingEmbedder


def note(n: int) -> Task:
    return Task(task_id=f"t{n}", action="note", parameters={"text": f"fact{n} about the roses"},
                status=TaskStatus.COMPLETED)  # fmt: skip


def build(memory: LoomMemory) -> ContextReport:
    orchestrator = ContextOrchestrator(
        sources=[
            UnifiedRetrievalSource(memory, name="retrieved"),
            L4SemanticSource(memory, exclude_recent=False),
            UserInputSource(),
        ],
        model_context_window=3000,
    )
    return orchestrator.build_sync("what about the roses?").report


def test_records_without_vectors_are_counted_in_the_report_until_embedded() -> None:
    memory = LoomMemory(
        "agent", embedder=HashingEmbedder(dim=32), embedding=MemoryEmbedding(in_background=False)
    )
    try:
        memory.add_tasks([note(n) for n in range(7)])
        assert memory.unembedded == 7
        report = build(memory)
        by_name = {s.name: s for s in report.sources}
        for name in ("retrieved", "L4_semantic"):
            assert by_name[name].unembedded == 7
            assert "7 record(s) have no vector yet" in by_name[name].note
            assert "lexical" in by_name[name].note
        assert by_name["user_input"].unembedded == 0
        assert report.summary()["unembedded"] == 7
        assert ContextReport.from_dict(report.to_dict()) == report

        assert memory.background is not None
        memory.background.drain()
        assert memory.unembedded == 0
        report = build(memory)
        assert all(s.unembedded == 0 and "vector" not in s.note for s in report.sources)
        assert report.summary()["unembedded"] == 0
    finally:
        memory.close()


def test_a_memory_without_an_embedder_is_lexical_by_choice_not_missing_vectors() -> None:
    memory = LoomMemory("agent", embedder=None)
    try:
        memory.add_tasks([note(n) for n in range(3)])
        assert memory.unembedded == 0
        assert build(memory).summary()["unembedded"] == 0
    finally:
        memory.close()


def test_a_store_reopened_with_another_model_counts_all_its_records(tmp_path: object) -> None:
    path = f"{tmp_path}/memory.db"
    store = SQLiteStore(path)
    first = LoomMemory(
        "agent",
        store=store,
        embedder=HashingEmbedder(dim=32),
        embedding=MemoryEmbedding(in_background=False),
    )
    first.add_tasks([note(n) for n in range(5)])
    assert first.background is not None
    first.background.drain()
    # Another model (another name): none of the records has a vector of it.
    other = BackgroundEmbedder(store, HashingEmbedder(dim=16), prefix=first.namespace, exact=True)
    assert other.pending == 0  # not counted yet
    assert other.count_pending() == 5
    assert other.pending == 5
    assert other.run_once() == 5
    assert other.pending == 0
    assert other.count_pending() == 0
    first.close()
    store.close()


def test_with_a_fast_embedder_the_note_says_which_vectors_are_missing() -> None:
    from loomctx.embeddings import StaticEmbedder

    slow, fast = HashingEmbedder(dim=32), StaticEmbedder()
    memory = LoomMemory(
        "agent", embedder=slow, embedding=MemoryEmbedding(fast_embedder=fast, in_background=False)
    )
    try:
        memory.add_tasks([note(n) for n in range(7)])
        assert "7 record(s) have no vector yet" in build(memory).sources[0].note
        assert memory.background is not None
        assert memory.background.first is not None
        memory.background.first.drain()
        report = build(memory)
        retrieved = report.sources[0]
        assert retrieved.unembedded == 0  # none is found by its words only
        assert "no vector yet" not in retrieved.note
        assert f"7 record(s) have vectors of {fast.name} but not yet of {slow.name}" in (
            retrieved.note
        )
        memory.background.drain()
        assert "vector" not in build(memory).sources[0].note
    finally:
        memory.close()

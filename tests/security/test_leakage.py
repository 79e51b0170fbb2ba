"""Leakage: write as A, read as B through every public read path, find nothing of A.

DESIGN.md invariant 6: stores filter by exact namespace on every read, and a wider read is
explicit. Each writer's Tasks carry marker words (``leak<writer><n>x``) and every reader's
query names them on purpose, to lure search. The read paths: a memory's restore and tiers
(L1, L2, L3), `search`, the memory sources through a real `ContextOrchestrator.build`
(`L1RecentSource`, `L2ImportantSource`, `L4SemanticSource`, `UnifiedRetrievalSource`,
`InheritedSource`, `SharedPoolSource`), a `ContextController`'s sessions, agent memory and
aggregation, and `KnowledgeBase` queries. Every window is also checked to hold the reader's
own marker and no failed source, so that "nothing leaked" never passes by finding nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from loomctx import (
    ContextController,
    ContextOrchestrator,
    ContextWindow,
    KnowledgeBase,
    LoomMemory,
    MemoryTiers,
    SQLiteStore,
    Task,
    TaskStatus,
    TiktokenCounter,
)
from loomctx.context.sources import (
    InheritedSource,
    L1RecentSource,
    L2ImportantSource,
    L4SemanticSource,
    SharedPoolSource,
    UnifiedRetrievalSource,
    UserInputSource,
)
from loomctx.session import topics
from loomctx.session._layout import SessionLayout
from loomctx.stores.base import BaseStore, Namespace, Record
from tests.session._helpers import Recorder

COUNTER = TiktokenCounter()
MARKER = re.compile(r"\bleak[a-z]+\d+x\b")
TOPIC = "invoice refund payment"


def task(tag: str, n: int, importance: float) -> Task:
    return Task(
        task_id=f"{tag}-{n}",
        action="note",
        parameters={"text": f"leak{tag}{n}x about the {TOPIC} of customer {n}"},
        result=f"leak{tag}{n}x recorded",
        status=TaskStatus.COMPLETED,
        metadata={"importance": importance},
    )


def fill(memory: LoomMemory, tag: str, count: int = 8) -> None:
    """Tasks of `tag` in every tier: L1, L2 (important ones), L3 and L4 (evicted ones)."""
    for n in range(count):
        memory.add_task(task(tag, n, 0.9 if n % 2 else 0.3))
        memory.promote_tasks()


def markers(text: str, tag: str) -> set[str]:
    return {m for m in MARKER.findall(text) if m.startswith(f"leak{tag}")}


def lure(tag: str, count: int = 8) -> str:
    return " ".join(f"leak{tag}{n}x" for n in range(count)) + f" {TOPIC}"


def read_text(window: ContextWindow) -> str:
    """What the sources put in the window: every message but the query itself."""
    assert window.messages[-1].role == "user"
    parts = []
    for m in window.messages[:-1]:
        parts.append(m.content)
        parts += [f"{c.name}({c.arguments_json()})" for c in m.tool_calls]
    return "\n".join(parts)


def ok(window: ContextWindow) -> ContextWindow:
    failed = [(s.name, s.status, s.error) for s in window.report.sources if s.status != "ok"]
    assert failed == []
    return window


async def memory_window(
    memory: LoomMemory, query: str, knowledge: Sequence[KnowledgeBase] = ()
) -> ContextWindow:
    """A window built from every memory source over `memory`."""
    orchestrator = ContextOrchestrator(
        token_counter=COUNTER,
        model_context_window=32_000,
        sources=[
            L1RecentSource(memory),
            L2ImportantSource(memory),
            L4SemanticSource(memory),
            UnifiedRetrievalSource(memory, knowledge),
            InheritedSource(memory),
            SharedPoolSource(memory),
            UserInputSource(),
        ],
    )
    return ok(await orchestrator.build(query))


async def assert_memory_reads_nothing_of(reader: LoomMemory, tag: str, own: str) -> None:
    query = lure(tag) + " " + lure(own)
    tiers = [
        *(t.task_id for t in reader.get_l1_tasks(limit=1000)),
        *(t.task_id for t in reader.get_l2_tasks()),
        *(s.task_id for s in reader.get_l3_summaries()),
    ]
    assert [t for t in tiers if t.startswith(f"{tag}-")] == []
    assert any(t.startswith(f"{own}-") for t in tiers)
    hits = reader.search(query, limit=50)
    assert [h.task.task_id for h in hits if h.task.task_id.startswith(f"{tag}-")] == []
    assert [t.task_id for t in reader.search_tasks(query, limit=50) if t.task_id[0] == tag] == []
    text = read_text(await memory_window(reader, query))
    assert markers(text, tag) == set()
    assert markers(text, own)  # the sources did read: the reader's own tasks are there


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseStore]:
    """The shared store every reader and writer uses: each backend in turn."""
    if request.param == "postgres":
        from loomctx.stores.postgres import PostgresStore

        with PostgresStore(request.getfixturevalue("postgres_url")) as pg:
            yield pg
        return
    with SQLiteStore(tmp_path / "shared.db") as store:
        yield store


# --- memories in nested, sibling and look-alike namespaces ------------------------------------

PAIRS = [
    pytest.param(("acme", "bot", "s1"), ("acme", "bot"), id="child-read-by-parent"),
    pytest.param(("acme", "bot"), ("acme", "bot", "s1"), id="parent-read-by-child"),
    pytest.param(("acme", "bot", "s1"), ("acme", "bot", "s2"), id="sibling"),
    pytest.param(("acme", "bot", "s1"), ("acme",), id="tenant-level-reader"),
    pytest.param(("acme", "bot"), ("acme", "bots"), id="look-alike-name"),
]


@pytest.mark.parametrize(("writer_ns", "reader_ns"), PAIRS)
async def test_a_memory_reads_nothing_of_another_namespace(
    store: BaseStore, writer_ns: Namespace, reader_ns: Namespace
) -> None:
    writer = LoomMemory(
        "writer",
        store=store,
        namespace=writer_ns,
        tiers=MemoryTiers(max_l1_size=3, max_l2_size=2),
        embedder=None,
    )
    fill(writer, "a")
    # Restore: a reader opened after the writes.
    reader = LoomMemory(
        "reader",
        store=store,
        namespace=reader_ns,
        tiers=MemoryTiers(max_l1_size=3, max_l2_size=2),
        embedder=None,
    )
    fill(reader, "b")
    await assert_memory_reads_nothing_of(reader, "a", "b")
    # Catching up: writes made while the reader is open.
    fill(writer, "c")
    await assert_memory_reads_nothing_of(reader, "c", "b")
    # And the other way round.
    await assert_memory_reads_nothing_of(writer, "b", "a")


async def test_a_wider_read_is_explicit_and_reads_only_search(store: BaseStore) -> None:
    fill(LoomMemory("s1", store=store, namespace=("acme", "bot", "s1"), embedder=None), "a")
    wide = LoomMemory(
        "all",
        store=store,
        namespace=("acme", "bot", "all"),
        search_scope=("acme", "bot"),
        embedder=None,
    )
    fill(wide, "b")
    found = {t.task_id for t in wide.search_tasks(lure("a"), limit=50)}
    assert {f"a-{n}" for n in range(8)} <= found
    # Its tiers are its own: a wider search is not a wider memory.
    tiers = [t.task_id for t in wide.get_l1_tasks(100) + wide.get_l2_tasks()]
    tiers += [s.task_id for s in wide.get_l3_summaries()]
    assert not [t for t in tiers if t.startswith("a-")]
    # Tenant-wide, on request.
    tenant = LoomMemory(
        "t", store=store, namespace=("acme", "t"), search_scope=("acme",), embedder=None
    )
    assert {f"a-{n}" for n in range(8)} <= {t.task_id for t in tenant.search_tasks(lure("a"), 50)}


# --- the controller's layout and a standalone memory --------------------------------------------


async def test_a_standalone_memory_reads_nothing_of_a_controllers_sessions(
    store: BaseStore,
) -> None:
    # The defaults: a controller of agent "agent" in tenant "default", and LoomMemory("agent").
    async with ContextController(store, counter=COUNTER) as controller:
        for sid in ("s1", "s2"):
            tiers = MemoryTiers(max_l1_size=3, max_l2_size=2)
            session = await controller.create_session(sid, tiers=tiers)
            for n in range(6):
                await session.add_task(task("a", n if sid == "s1" else n + 10, 0.9))
        await controller.end_session("s2")  # archived into the agent-level memory
        await controller.aggregate_context(["s1"], lure("a"), 2000)  # feeds the agent's L3
        memory = LoomMemory(
            "agent", store=store, tiers=MemoryTiers(max_l1_size=3, max_l2_size=2), embedder=None
        )
        fill(memory, "b")
        await assert_memory_reads_nothing_of(memory, "a", "b")
        # Not even a memory opened on the controller's root namespace itself.
        root = LoomMemory(
            "root",
            store=store,
            namespace=controller.layout.root,
            tiers=MemoryTiers(max_l1_size=3),
            embedder=None,
        )
        fill(root, "c")
        await assert_memory_reads_nothing_of(root, "a", "c")


async def test_a_controllers_sessions_read_nothing_of_a_standalone_memory(
    store: BaseStore,
) -> None:
    fill(LoomMemory("agent", store=store, embedder=None), "a")
    fill(
        LoomMemory("root", store=store, namespace=("default", "agent"), embedder=None), "a", count=4
    )
    async with ContextController(store, counter=COUNTER) as controller:
        for sid in ("s1", "s2"):
            session = await controller.create_session(sid)
            await session.add_task(task("b", 0 if sid == "s1" else 1, 0.9))
        window = ok(await controller.get_session("s1").build_context(lure("a")))
        assert markers(read_text(window), "a") == set()
        window = ok(await controller.aggregate_context(["s1", "s2"], lure("a") + " leakb0x", 4000))
        assert markers(read_text(window), "a") == set()
        assert markers(read_text(window), "b") == {"leakb0x", "leakb1x"}
        agent = controller.memory
        found = [t.task_id for t in agent.search_tasks(lure("a"), limit=50)]
        assert [t for t in found if t.startswith("a-")] == []
        assert agent.get_l1_tasks() == agent.get_l2_tasks() == []
        assert {s.task_id for s in agent.get_l3_summaries()} == {"b-0", "b-1"}


async def test_two_agents_of_one_tenant_never_meet(store: BaseStore) -> None:
    async with (
        ContextController(store, agent_id="x", counter=COUNTER) as x,
        ContextController(store, agent_id="y", counter=COUNTER) as y,
    ):
        archived = Recorder()
        x.bus.subscribe(topics.MEMORY_PERSISTED, archived)
        y.bus.subscribe(topics.MEMORY_PERSISTED, archived)
        for sid in ("s1", "s2"):
            session = await x.create_session(sid)
            for n in range(4):
                await session.add_task(task("a", n, 0.9))
        await x.end_session("s2")
        await archived.wait_for(topics.MEMORY_PERSISTED)  # X's archive holds the a-tasks
        await x.aggregate_context(["s1"], lure("a"), 2000)
        for sid in ("s1", "s2"):  # the same session ids, another agent
            session = await y.create_session(sid)
            await session.add_task(task("b", int(sid[1]), 0.9))
        for sid in ("s1", "s2"):
            window = ok(await y.get_session(sid).build_context(lure("a") + " leakb1x"))
            assert markers(read_text(window), "a") == set()
        window = ok(await y.aggregate_context(["s1", "s2"], lure("a") + " leakb1x", 4000))
        assert markers(read_text(window), "a") == set()
        assert markers(read_text(window), "b")
        await y.end_session("s1")
        await archived.wait_for(topics.MEMORY_PERSISTED, 2)
        assert {t.task_id for t in x.memory.search_tasks(lure("a"), 50)} >= {"a-0", "a-3"}
        found = [t.task_id for t in y.memory.search_tasks(lure("a"), limit=50)]
        assert [t for t in found if t.startswith("a-")] == []
        assert {t.task_id for t in y.memory.search_tasks("leakb1x")} == {"b-1"}
        assert y.session_ids() == ["s1", "s2"]


async def test_records_below_a_controllers_namespaces_are_none_of_its_own(
    store: BaseStore,
) -> None:
    """Whatever is stored below a session's namespaces (by another application, or a layout
    of the future) is not read as the session's records, queue, or list of sessions."""
    layout = SessionLayout("default", "agent")
    secret = task("a", 1, 0.9)
    store.put_many(
        [
            Record(
                namespace=(*layout.sessions, "x"),
                key=layout.session_key("ghost"),
                kind="session",
                data={"session_id": "ghost", "state": "active", "options": {}, "created_at": 0},
            ),
            Record(
                namespace=(*layout.queue("s1"), "x"),
                key=secret.task_id,
                kind="queued",
                data={"task": secret.to_dict()},
            ),
        ]
    )
    below = LoomMemory("x", store=store, namespace=(*layout.memory("s1"), "x"), embedder=None)
    fill(below, "a")
    async with ContextController(store, counter=COUNTER) as controller:
        session = await controller.create_session("s1")
        await session.pause()
        assert controller.session_ids() == ["s1"]
    async with ContextController(store, counter=COUNTER) as controller:  # reopened
        session = controller.get_session("s1")
        assert session.queued == ()
        await session.resume()
        await session.add_task(task("b", 0, 0.9))
        await session.end()  # archives the session into the agent memory
    # (closing the controller let the archiving subscriber finish)
    archive = LoomMemory("agent", store=store, namespace=layout.agent, embedder=None)
    assert [t.task_id for t in archive.search_tasks(lure("a") + " leakb0x", 50)] == ["b-0"]


def test_no_default_namespace_lies_below_another() -> None:
    """The namespaces a controller lays out, a standalone memory's default and a knowledge
    base's: none is a prefix of another, whatever the ids (even equal ones)."""
    ids = ["agent", "default", "session", "sessions", "queue", "memory", "knowledge", "docs"]
    spaces: set[Namespace] = set()
    for tenant in ids:
        for agent in ids:
            layout = SessionLayout(tenant, agent)
            spaces |= {layout.sessions, layout.agent}
            spaces |= {f(sid) for sid in ids for f in (layout.memory, layout.queue)}
    spaces |= {LoomMemory(node, embedder=None).namespace for node in ids}
    spaces |= {KnowledgeBase(name).namespace for name in ids}
    nested = [(a, b) for a in spaces for b in spaces if a != b and b[: len(a)] == a]
    # A knowledge base's namespace is ("knowledge", name): only a tenant of that name nests
    # under it, which no default makes (and every read is exact regardless).
    assert [pair for pair in nested if pair[0][0] != "knowledge"] == []


# --- knowledge bases ----------------------------------------------------------------------------


async def test_a_knowledge_base_reads_exactly_its_namespace(store: BaseStore) -> None:
    docs = KnowledgeBase("docs", store=store)
    docs.add_text(f"leakb0x the handbook on {TOPIC}", document_id="handbook")
    KnowledgeBase("doc", store=store).add_text(f"leaka1x a look-alike base on {TOPIC}")
    # Chunk-like records below the base's namespace are none of its chunks.
    below = (*docs.namespace, "private")
    store.put_many(
        [
            Record(
                namespace=below,
                key="chunk:secret#0",
                kind="kb_chunk",
                text=f"leaka2x private {TOPIC}",
                data={"document_id": "secret", "index": 0, "metadata": {}},
            ),
            Record(
                namespace=below,
                key="doc:secret",
                kind="kb_document",
                data={
                    "document_id": "secret",
                    "content_hash": "x",
                    "chunks": 1,
                    "metadata": {},
                },
            ),
        ]
    )
    # And a controller whose tenant happens to be called "knowledge", agent "docs".
    async with ContextController(
        store, tenant_id="knowledge", agent_id="docs", counter=COUNTER
    ) as controller:
        session = await controller.create_session("s1")
        await session.add_task(task("a", 3, 0.9))
    query = lure("a") + " leakb0x"
    hits = docs.search_sync(query, limit=50)
    assert [h.document_id for h in hits] == ["handbook"]
    assert [d.document_id for d in docs.documents()] == ["handbook"]
    reader = LoomMemory("reader", store=store, namespace=("acme", "reader"), embedder=None)
    fill(reader, "b", count=1)
    text = read_text(await memory_window(reader, query, knowledge=[docs]))
    assert markers(text, "a") == set()
    assert "leakb0x" in text

"""What the commands open from their settings: the embedder, a session's memory, knowledge
bases, and the context reports saved per session (what `loomctx inspect --session` reads).

Everything lives in one store (`Settings.store`: a SQLite file or a PostgreSQL URL, opened
by `loomctx.stores.open_store`): a session's memory where every session's lives
(`loomctx.session._layout`: the default tenant and agent; what an earlier version kept at
``("default", session, "memory")`` moves there when the session is opened), a knowledge base
under ``("knowledge", name)`` (`KnowledgeBase`'s), and a session's window reports under
``("cli", "reports", session)`` as records without text, so search and background embedding
never see them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from loomctx.knowledge import KnowledgeBase
from loomctx.memory.core import LoomMemory
from loomctx.memory.enrichment import BackgroundEmbedder
from loomctx.memory.settings import MemoryEmbedding, MemoryTiers
from loomctx.memory.task import tasks_from_messages
from loomctx.messages import Message
from loomctx.session._layout import SessionLayout, cli_memory_before, session_memory
from loomctx.stores.base import BaseStore, MemoryStore, Put, Record, Scan, Unembedded

if TYPE_CHECKING:
    from loomctx.context.block import ContextSource
    from loomctx.embeddings import Embedder

__all__ = [
    "embed_knowledge",
    "embed_pending",
    "embedder_for",
    "ingest_messages",
    "knowledge_source",
    "latest_report",
    "next_report_turn",
    "open_knowledge",
    "open_memory",
    "pending_embeddings",
    "save_report",
]

Advance = Callable[[int], None]
"""A progress callback: called with how many more items are done."""

_REPORTS: Final = ("cli", "reports")
_BATCH: Final = 256


def embedder_for(setting: str) -> Embedder | None:
    """The embedder a setting names: the offline default, or None for lexical search only."""
    if setting == "none":
        return None
    from loomctx.embeddings import default_embedder

    return default_embedder()


def open_memory(
    store: BaseStore, session: str, embedder: Embedder | None, *, l1_size: int = 50
) -> LoomMemory:
    """A session's memory (`l1_size` recent tasks in L1); its vectors are filled by
    `embed_pending`, or in the background once `memory.background` is started."""
    namespace = session_memory(store, SessionLayout(), session, before=[cli_memory_before(session)])
    return LoomMemory(
        session,
        store=store,
        namespace=namespace,
        embedder=embedder,
        tiers=MemoryTiers(max_l1_size=l1_size),
        embedding=MemoryEmbedding(in_background=False),
    )


def ingest_messages(memory: LoomMemory, messages: Sequence[Message], advance: Advance) -> int:
    """Record a message history as Tasks, in batched durable writes; returns how many.

    Promotion into L2 and L3 is left to the session's first turn (an `Agent` promotes after
    every turn): the summaries it writes are found lexically at once, and their vectors
    follow in the background, so an import embeds each Task once.
    """
    tasks = tasks_from_messages(messages, agent="assistant", session_id=memory.node_id)
    for start in range(0, len(tasks), _BATCH):
        part = tasks[start : start + _BATCH]
        memory.add_tasks(part)
        advance(len(part))
    return len(tasks)


def _embedding(memory: LoomMemory, *, fast_only: bool) -> BackgroundEmbedder | None:
    """What embeds `memory`'s records: its background embedder, or with `fast_only` the
    fast embedder that goes first in it (where there is none, the embedder itself: no
    cheaper vector exists to write first)."""
    background = memory.background
    if background is not None and fast_only and background.first is not None:
        return background.first
    return background


def pending_embeddings(memory: LoomMemory, *, fast_only: bool = False) -> int:
    """How many records of `memory` still lack the embedding model's vector (`fast_only`:
    the fast embedder's; 0 without an embedder)."""
    embedding = _embedding(memory, fast_only=fast_only)
    if embedding is None:
        return 0
    op = Unembedded(model=embedding.embedder.name, prefix=memory.namespace, limit=1_000_000)
    return len(memory.store.batch([op])[0])


def embed_pending(memory: LoomMemory, advance: Advance, *, fast_only: bool = False) -> int:
    """Embed every record of `memory` that lacks a vector, batch by batch (`fast_only`: the
    fast embedder's vectors only, thousands a second, leaving the embedding model's to the
    background of whatever opens the memory next); 0 without an embedder."""
    embedding = _embedding(memory, fast_only=fast_only)
    total = 0
    while embedding is not None and (n := embedding.run_once()):
        total += n
        advance(n)
    return total


def open_knowledge(
    store: MemoryStore, name: str, embedder: Embedder | None, *, background: bool = True
) -> KnowledgeBase:
    """The knowledge base `name` in `store`: its chunks are written with their fast vectors,
    and the `embedder`'s follow in the background, or (``background=False``) when
    `embed_knowledge` is called."""
    return KnowledgeBase(name, store, embedder=embedder, embed_in_background=background)


def embed_knowledge(kb: KnowledgeBase, advance: Advance) -> int:
    """Give every chunk of `kb` its `embedder`'s vector now, batch by batch."""
    total = 0
    while kb.background is not None and (n := kb.background.run_once()):
        total += n
        advance(n)
    return total


def knowledge_source(kb: KnowledgeBase) -> ContextSource:
    """The source that searches `kb` before every model call (seed 003's `RAG_knowledge`)."""
    from loomctx.context.sources.retrieval import UnifiedRetrievalSource

    return UnifiedRetrievalSource(knowledge_bases=[kb], name="RAG_knowledge", min_score=0.4)


def save_report(store: MemoryStore, session: str, turn: int, report: dict[str, Any]) -> None:
    """Keep a window's report (a `ContextReport.to_dict()`) for `loomctx inspect --session`."""
    store.batch(
        [
            Put(
                record=Record(
                    namespace=(*_REPORTS, session),
                    key=f"report:{turn:08d}",
                    kind="context_report",
                    text="",
                    data=report,
                )
            )
        ]
    )


def latest_report(store: MemoryStore, session: str) -> dict[str, Any] | None:
    """The newest report saved for `session`, or None."""
    scan = Scan(prefix=(*_REPORTS, session), kind="context_report", newest_first=True, limit=1)
    found: list[Record] = store.batch([scan])[0]
    return dict(found[0].data) if found else None


def next_report_turn(store: MemoryStore, session: str) -> int:
    """The number the next saved report of `session` gets (1 for the first)."""
    scan = Scan(prefix=(*_REPORTS, session), kind="context_report", newest_first=True, limit=1)
    found: list[Record] = store.batch([scan])[0]
    return int(found[0].key.partition(":")[2]) + 1 if found else 1

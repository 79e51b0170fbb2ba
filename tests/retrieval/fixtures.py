"""Shared material for the retrieval tests: conversations as tasks, small knowledge bases."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from loomctx.embeddings import Embedder
from loomctx.knowledge import KnowledgeBase
from loomctx.memory.core import LoomMemory
from loomctx.memory.task import ASSISTANT_MESSAGE, USER_MESSAGE, Task, TaskStatus
from loomctx.stores.sqlite import SQLiteStore


def turn(task_id: str, role: str, text: str) -> Task:
    """A user or assistant message as a completed task."""
    return Task(
        task_id=task_id,
        source_agent="user" if role == "user" else "agent",
        action=USER_MESSAGE if role == "user" else ASSISTANT_MESSAGE,
        parameters={"content": text},
        status=TaskStatus.COMPLETED,
    )


def remember(memory: LoomMemory, turns: Iterable[tuple[str, str]], *, prefix: str = "m") -> None:
    """Record `(role, text)` turns as tasks ``m0``, ``m1``, ... and embed them."""
    memory.add_tasks(turn(f"{prefix}{i}", role, text) for i, (role, text) in enumerate(turns))
    if memory.background is not None:
        memory.background.drain()


def open_store(tmp_path: Path, name: str = "loom.db") -> SQLiteStore:
    return SQLiteStore(tmp_path / name)


def knowledge(
    store: SQLiteStore,
    name: str,
    docs: Mapping[str, str],
    *,
    embedder: Embedder | None = None,
) -> KnowledgeBase:
    kb = KnowledgeBase(name, store, embedder=embedder, embed_in_background=False)
    for doc_id, text in docs.items():
        kb.add_text(text, document_id=doc_id)
    if kb.background is not None:  # the model's vectors, after the fast ones, in
        kb.background.drain()
    return kb


HANDBOOK = {
    "deploys": "# Deployment\nProduction deploys run every Tuesday after the change review. "
    "A rollback redeploys the previous container image.",
    "oncall": "# On-call\nThe on-call engineer answers pages within fifteen minutes and writes "
    "the incident report the next morning.",
    "expenses": "# Expenses\nSubmit travel expenses within thirty days with the receipts attached.",
}

RUNBOOK = {
    "rollback": "# Rollback runbook\nTo roll back a deploy, run `make rollback` and watch the "
    "error rate for ten minutes.",
    "db-failover": "# Database failover\nPromote the replica, then point the service at it.",
}

CHAT = [
    ("user", "Can we deploy the billing service today?"),
    ("assistant", "Deploys happen on Tuesday; today is Thursday."),
    ("user", "Then plan the rollback steps for Tuesday's deploy."),
    ("assistant", "Noted: rollback plan for the billing deploy on Tuesday."),
    ("user", "Also order pizza for the team lunch."),
]

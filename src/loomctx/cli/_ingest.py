"""`loomctx ingest PATH`: documents into a knowledge base, or a conversation into a session.

A folder, or a file that is not ``.json`` / ``.jsonl``, is read as documents into the
knowledge base `kb` (``--kb``; again only what changed). A ``.json`` or ``.jsonl`` file is
read as a conversation export (OpenAI or Anthropic messages, see `_conversations`) into the
memory of session ``--session`` (default: the file's name), so ``loomctx chat --session`` picks
it up. ``--as documents|conversation`` overrides the guess. Progress goes to stderr, the
summary to stdout (``--json``: as one JSON object).
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from loomctx.cli._common import (
    ConfigOption,
    StoreOption,
    err_console,
    out_console,
    progress_bar,
    settings_from,
)
from loomctx.cli._conversations import CONVERSATION_SUFFIXES, read_conversation
from loomctx.cli._workspace import (
    embed_pending,
    embedder_for,
    ingest_messages,
    open_knowledge,
    open_memory,
    open_store,
    pending_embeddings,
)
from loomctx.knowledge import IngestProgress
from loomctx.stores.sqlite import SQLiteStore

__all__ = ["ingest"]


class Kind(StrEnum):
    """What a path holds."""

    auto = "auto"
    documents = "documents"
    conversation = "conversation"


def _documents(db: SQLiteStore, path: Path, kb_name: str, embedder: Any) -> dict[str, Any]:
    kb = open_knowledge(db, kb_name, embedder)
    if path.is_file():
        doc_id = kb.add_file(path)
        return {"knowledge_base": kb_name, "added_or_updated": [doc_id]}
    with progress_bar(err_console()) as progress:
        task = progress.add_task("documents", total=None)

        def advance(p: IngestProgress) -> None:
            progress.update(task, completed=p.done, total=p.total)

        summary = kb.add_folder(path, progress=advance)
    return {
        "knowledge_base": kb_name,
        "added": list(summary.added),
        "updated": list(summary.updated),
        "unchanged": list(summary.unchanged),
        "deleted": list(summary.deleted),
        "skipped": [{"path": s.path, "reason": s.reason} for s in summary.skipped],
        "chunks": summary.chunks,
    }


def _conversation(db: SQLiteStore, path: Path, session: str, embedder: Any) -> dict[str, Any]:
    messages = read_conversation(path)
    memory = open_memory(db, session, embedder)
    try:
        with progress_bar(err_console()) as progress:
            task = progress.add_task("messages", total=len(messages))
            tasks = ingest_messages(memory, messages, lambda n: progress.advance(task, n))
            progress.update(task, completed=len(messages))
            todo = pending_embeddings(memory)
            if todo:
                vectors = progress.add_task("embedding", total=todo)
                embed_pending(memory, lambda n: progress.advance(vectors, n))
    finally:
        memory.close()
    return {"session": session, "messages": len(messages), "tasks": tasks}


def ingest(
    path: Annotated[
        Path, typer.Argument(help="A folder or file of documents, or a conversation export.")
    ],
    kind: Annotated[
        Kind, typer.Option("--as", help="What PATH holds (default: guess from it).")
    ] = Kind.auto,
    session: Annotated[
        str | None,
        typer.Option("--session", help="The session a conversation goes into (default: its name)."),
    ] = None,
    kb: Annotated[
        str | None, typer.Option("--kb", help="The knowledge base documents go into.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    store: StoreOption = None,
    config: ConfigOption = None,
) -> None:
    """Ingest documents into a knowledge base, or a conversation into a session's memory."""
    if not path.exists():
        raise typer.BadParameter(f"{str(path)!r} does not exist", param_hint="PATH")
    if kind is Kind.auto:
        conversation = path.is_file() and path.suffix in CONVERSATION_SUFFIXES
        kind = Kind.conversation if conversation else Kind.documents
    if kind is Kind.conversation and not path.is_file():
        raise typer.BadParameter("a conversation is a .json or .jsonl file", param_hint="PATH")
    settings = settings_from(config, store=store, kb=kb, session=session)
    with ExitStack() as stack:
        db = open_store(settings.store)
        stack.callback(db.close)
        embedder = embedder_for(settings.embedder)
        if kind is Kind.conversation:
            result = _conversation(db, path, settings.session or path.stem, embedder)
        else:
            result = _documents(db, path, settings.kb, embedder)
    result = {"store": settings.store, "kind": kind.value, **result}
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    console = out_console()
    for key, value in result.items():
        shown = ", ".join(map(str, value)) if isinstance(value, list) else value
        console.print(f"[dim]{key:<18}[/]{shown}", soft_wrap=True, highlight=False)

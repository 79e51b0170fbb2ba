"""`loomctx ingest PATH`: documents into a knowledge base, or a conversation into a session.

A folder, or a file that is not ``.json`` / ``.jsonl``, is read as documents into the
knowledge base `kb` (``--kb``; again only what changed). A ``.json`` or ``.jsonl`` file is
read as a conversation export (OpenAI or Anthropic messages, see `_conversations`) into the
memory of session ``--session`` (default: the file's name), so ``loomctx chat --session`` picks
it up. ``--as documents|conversation`` overrides the guess. Progress goes to stderr, the
summary to stdout (``--json``: as one JSON object). Documents show one bar in chunks (cut,
and embedded with an embedder), with the rate, an estimate of the time left and the files
done; files left out are listed as a short table, those without a loader one row per suffix.

Documents and conversations are searchable when the command returns, and neither waits for
the transformer: with the default embedder each chunk or message gets its fast (static)
vector, thousands a second, and the transformer's vectors, a few chunks or some tens of
messages a second, follow in the background of whatever opens the knowledge base or the
session next (``loomctx chat``, ``loomctx serve``); the summary says how many wait
(``vectors_pending``). ``--wait`` computes them before returning, with a bar of their own.

A folder may be a repository nobody has checked: symbolic links out of it are not followed
(each is listed under ``skipped`` with its target), files over ``--max-file-size`` are skipped,
and more than ``--max-files`` files or ``--max-total-size`` in all stop the ingest before
anything is written (`IngestLimitError`, exit code 1), naming the option to raise.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

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
    embed_knowledge,
    embed_pending,
    embedder_for,
    ingest_messages,
    open_knowledge,
    open_memory,
    pending_embeddings,
)
from loomctx.errors import IngestLimitError
from loomctx.knowledge import (
    DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_FILES,
    DEFAULT_MAX_TOTAL_BYTES,
    IngestProgress,
    KnowledgeBase,
)
from loomctx.stores import open_store
from loomctx.stores.base import BaseStore

__all__ = ["ingest"]


class Kind(StrEnum):
    """What a path holds."""

    auto = "auto"
    documents = "documents"
    conversation = "conversation"


_SIZE = re.compile(r"(\d+)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_SHOWN_SKIPS = 10  # rows of the skipped table before "... and N more"
_OPTIONS = {
    "max_files": "--max-files",
    "max_file_bytes": "--max-file-size",
    "max_total_bytes": "--max-total-size",
}


def _size(text: str) -> int:
    """Bytes from ``"512"``, ``"10k"``, ``"10MB"``, ``"1GiB"``, ... (binary multiples)."""
    found = _SIZE.fullmatch(text.strip())
    if found is None or int(found[1]) < 1:
        raise typer.BadParameter(
            f"{text!r} is not a size; write bytes, or a number with k, M, G or T, such as 20M"
        )
    return int(found[1]) * _UNITS[found[2].lower()]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Limits:
    """The bounds of a folder ingest, from the command line."""

    max_files: int
    max_file_bytes: int
    max_total_bytes: int


def _chunk_bar(console: Console) -> Progress:
    """One bar in chunks, with the rate, the time left and the files done."""
    return Progress(
        TextColumn("  {task.description:<14}"),
        BarColumn(bar_width=30),
        MofNCompleteColumn(),
        TextColumn("chunks  {task.fields[info]}"),
        console=console,
    )


def _info(p: IngestProgress) -> str:
    """Rate, time left and files: ``"41.2/s  0:01:05 left  12/139 files"``."""
    eta = "" if p.eta is None else f"{_clock(p.eta)} left  "
    return f"{p.rate:,.1f}/s  {eta}{p.done}/{p.total} files"


def _clock(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def _track(progress: Progress, what: str) -> Callable[[IngestProgress], None]:
    task = progress.add_task(what, total=None, info="")

    def advance(p: IngestProgress) -> None:
        progress.update(task, completed=p.chunks, total=p.chunks_total or None, info=_info(p))

    return advance


def _documents(
    db: BaseStore, path: Path, kb_name: str, embedder: Any, limits: _Limits, *, wait: bool
) -> dict[str, Any]:
    kb = open_knowledge(db, kb_name, embedder, background=False)
    try:
        found = _add_documents(kb, path, limits)
        if kb.background is not None:
            kb.background.count_pending()  # exactly (chunks kept may have their vectors)
        if wait and kb.unembedded:
            with progress_bar(err_console()) as progress:
                task = progress.add_task("vectors", total=kb.unembedded)
                embed_knowledge(kb, lambda n: progress.advance(task, n))
        return {**found, "vectors_pending": kb.unembedded}
    finally:
        kb.close()


def _add_documents(kb: KnowledgeBase, path: Path, limits: _Limits) -> dict[str, Any]:
    kb_name = kb.name
    if path.is_file():
        with _chunk_bar(err_console()) as progress:
            doc_id = kb.add_file(path, progress=_track(progress, "document"))
        return {"knowledge_base": kb_name, "added_or_updated": [doc_id]}
    with _chunk_bar(err_console()) as progress:
        advance = _track(progress, "documents")
        try:
            summary = kb.add_folder(
                path,
                progress=advance,
                max_files=limits.max_files,
                max_file_bytes=limits.max_file_bytes,
                max_total_bytes=limits.max_total_bytes,
            )
        except IngestLimitError as exc:
            option = _OPTIONS.get(exc.limit, exc.limit)
            raise IngestLimitError(
                f"{exc} (on the command line: `{option}`)",
                limit=exc.limit,
                allowed=exc.allowed,
                found=exc.found,
            ) from exc
    return {
        "knowledge_base": kb_name,
        "added": list(summary.added),
        "updated": list(summary.updated),
        "unchanged": list(summary.unchanged),
        "deleted": list(summary.deleted),
        "skipped": [{"path": s.path, "reason": s.reason, "kind": s.kind} for s in summary.skipped],
        "chunks": summary.chunks,
    }


def _skipped_table(skipped: list[dict[str, str]]) -> Table:
    """What was left out, short: files without a loader one row per suffix, the others one
    row each up to `_SHOWN_SKIPS`, then how many more (``--json`` lists every one)."""
    table = Table("skipped", "why", box=None, padding=(0, 2, 0, 0), show_edge=False)
    suffixes = Counter(
        Path(s["path"]).suffix.lower() or "(none)" for s in skipped if s["kind"] == "no_loader"
    )
    for suffix, count in sorted(suffixes.items(), key=lambda item: (-item[1], item[0])):
        files = f"{count} file{'s' if count > 1 else ''}"
        table.add_row(escape(f"*{suffix} ({files})"), f"no loader for {escape(suffix)} files")
    others = [s for s in skipped if s["kind"] != "no_loader"]
    for s in others[:_SHOWN_SKIPS]:
        table.add_row(escape(s["path"]), escape(s["reason"]))
    if len(others) > _SHOWN_SKIPS:
        table.add_row(f"... {len(others) - _SHOWN_SKIPS} more", "--json lists every one")
    return table


def _conversation(
    db: BaseStore, path: Path, session: str, embedder: Any, *, wait: bool
) -> dict[str, Any]:
    messages = read_conversation(path)
    memory = open_memory(db, session, embedder)
    try:
        with progress_bar(err_console()) as progress:
            task = progress.add_task("messages", total=len(messages))
            tasks = ingest_messages(memory, messages, lambda n: progress.advance(task, n))
            progress.update(task, completed=len(messages))
            todo = pending_embeddings(memory, fast_only=not wait)
            if todo:
                vectors = progress.add_task("vectors" if wait else "fast vectors", total=todo)
                embed_pending(memory, lambda n: progress.advance(vectors, n), fast_only=not wait)
        pending = pending_embeddings(memory)
    finally:
        memory.close()
    return {
        "session": session,
        "messages": len(messages),
        "tasks": tasks,
        "vectors_pending": pending,
    }


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
    max_files: Annotated[
        int,
        typer.Option(
            "--max-files", min=1, help="Stop (before writing) if a folder has more files to read."
        ),
    ] = DEFAULT_MAX_FILES,
    max_file_size: Annotated[
        str,
        typer.Option(
            "--max-file-size", help="Skip files larger than this (bytes, or 10k, 20M, 1G)."
        ),
    ] = f"{DEFAULT_MAX_FILE_BYTES // 2**20}M",
    max_total_size: Annotated[
        str,
        typer.Option(
            "--max-total-size", help="Stop (before writing) if a folder holds more than this."
        ),
    ] = f"{DEFAULT_MAX_TOTAL_BYTES // 2**20}M",
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Compute the embedding model's vectors before returning (they follow in the "
            "background of `chat` and `serve` otherwise).",
        ),
    ] = False,
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
    limits = _Limits(
        max_files=max_files,
        max_file_bytes=_size(max_file_size),
        max_total_bytes=_size(max_total_size),
    )
    settings = settings_from(config, store=store, kb=kb, session=session)
    with ExitStack() as stack:
        db = open_store(settings.store)
        stack.callback(db.close)
        embedder = embedder_for(settings.embedder)
        if kind is Kind.conversation:
            name = settings.session or path.stem
            result = _conversation(db, path, name, embedder, wait=wait)
        else:
            result = _documents(db, path, settings.kb, embedder, limits, wait=wait)
    result = {"store": settings.store, "kind": kind.value, **result}
    if result.get("vectors_pending"):
        pending = result["vectors_pending"]
        if kind is Kind.conversation:
            what, where = f"{pending} messages", f"`loomctx chat --session {result['session']}`"
        else:
            what, where = f"{pending} chunks", "`loomctx chat` or `loomctx serve`"
        err_console().print(
            f"{what} are searched by their fast vectors until the embedding model's follow: "
            f"in the background of {where}, or now with `loomctx ingest --wait`",
            style="dim",
            markup=False,
        )
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    console = out_console()
    skipped = result.pop("skipped", [])
    if skipped:
        result["skipped"] = f"{len(skipped)} file{'s' if len(skipped) > 1 else ''} (below)"
    for key, value in result.items():
        shown = ", ".join(map(str, value)) if isinstance(value, list) else value
        console.print(f"[dim]{key:<18}[/]{escape(str(shown))}", soft_wrap=True, highlight=False)
    if skipped:
        console.print()
        console.print(_skipped_table(skipped))

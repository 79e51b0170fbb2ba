"""`loomctx demo`: watch Loom build a context window before every model call, offline.

It ingests the bundled conversation (eight weeks of a project, a few hundred messages, with
tool calls) into a session's memory and a small knowledge base into the same SQLite file,
embeds both with the offline default embedder, then asks a handful of questions as an agent
would. For each turn it shows the window Loom built: tokens per source, what was dropped or
summarized and why, and the tokens sent against sending the whole history, which grows with
every turn while the window stays flat.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import tempfile
from contextlib import ExitStack
from importlib import resources
from pathlib import Path
from typing import IO, Annotated, Final

import typer
from rich.console import Console
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from loomctx.agent.executor import Agent
from loomctx.agent.settings import AgentSources, AgentWindow
from loomctx.cli._agent import RecordingLLM, ask, choose_llm
from loomctx.cli._common import out_console, progress_bar
from loomctx.cli._render import report_view
from loomctx.cli._reports import next_turn, save_window
from loomctx.cli._workspace import (
    embed_knowledge,
    embed_pending,
    embedder_for,
    ingest_messages,
    knowledge_source,
    open_knowledge,
    open_memory,
    pending_embeddings,
)
from loomctx.context.billing import ANTHROPIC
from loomctx.knowledge import IngestProgress, KnowledgeBase
from loomctx.memory.core import LoomMemory
from loomctx.messages import Message, from_openai
from loomctx.stores import open_store, redact_url
from loomctx.tokens import TiktokenCounter

__all__ = ["QUESTIONS", "demo"]

SESSION: Final = "demo"
WINDOW: Final = 4000
RESERVE: Final = 0.2
L1_SIZE: Final = 30  # recent tasks kept whole; older ones are found through L2 and L4
INSTRUCTIONS: Final = (
    "You are the project assistant of the Lantern team at Tidewater Books. Answer in one or "
    "two sentences from the conversation and the reference context; if they do not say, say so."
)
QUESTIONS: Final = (
    "Which database did we choose for the inventory service, and why?",
    "Who owns the payments integration?",
    "What was the root cause of the checkout outage?",
    "What is the launch date now, and why did it move?",
    "How do we refund a book that arrived damaged?",
)


def _data() -> resources.abc.Traversable:
    return resources.files("loomctx").joinpath("_data", "demo")


def _conversation() -> list[Message]:
    text = _data().joinpath("conversation.jsonl").read_text(encoding="utf-8")
    return from_openai([json.loads(line) for line in text.splitlines() if line.strip()])


def _ingest(
    console: Console, memory: LoomMemory, kb: KnowledgeBase, history: list[Message]
) -> None:
    fresh = not memory.get_l1_tasks(1)
    with progress_bar(console) as progress:
        if fresh:
            tasks = progress.add_task("conversation", total=len(history))
            ingest_messages(memory, history, lambda n: progress.advance(tasks, n))
            progress.update(tasks, completed=len(history))
            todo = pending_embeddings(memory)
            if todo:
                vectors = progress.add_task("embedding", total=todo)
                embed_pending(memory, lambda n: progress.advance(vectors, n))
        docs = progress.add_task("knowledge", total=None)

        def advance(p: IngestProgress) -> None:
            progress.update(docs, completed=p.done, total=p.total)

        with resources.as_file(_data().joinpath("knowledge")) as folder:
            summary = kb.add_folder(folder, progress=advance)
        if kb.unembedded:  # now, so that every window of the demo is searched alike
            chunks = progress.add_task("knowledge vectors", total=kb.unembedded)
            embed_knowledge(kb, lambda n: progress.advance(chunks, n))
    if not fresh:
        console.print("  the conversation was ingested into this store before: reusing it")
    files = len(summary.added) + len(summary.updated) + len(summary.unchanged)
    console.print(f"  knowledge: {files} documents, {summary.chunks} chunks written", style="dim")


def _billed(cached: int, total: int) -> int:
    """Input tokens billed at Anthropic's cache prices (`loomctx.context.billing`), as a
    client marks a prompt: reads 0.1x, the rest written 1.25x."""
    return round(ANTHROPIC.billed_marked_at_end(prompt=total, cached=cached))


def _summary(
    console: Console, rows: list[tuple[int, int, int, int, int, int]], kept: str | None
) -> None:
    """The cost table, then where to look next: `kept` is the store the user gave (as it may
    be shown: a URL's password redacted), None for the temporary one."""
    table = Table(title="cost per turn", title_justify="left", header_style="bold")
    for name in ("turn", "sent by Loom", "cached", "billed", "whole history", "billed"):
        table.add_column(name, justify="right")
    for turn, sent, cached, billed, full, full_cached in rows:
        table.add_row(
            str(turn),
            f"{sent:,}",
            f"{cached:,}",
            f"{billed:,}",
            f"{full:,}",
            f"{_billed(full_cached, full):,}",
        )
    console.print(table)
    where = shlex.quote(kept) if kept is not None else "demo.db"
    keep = "Keep this store with `--store demo.db`, then see" if kept is None else "See"
    console.print(
        "Loom's window stays within its budget however long the conversation grows; the whole "
        "history grows with every turn. Billed: input tokens at Anthropic's prompt-cache prices "
        "(what repeats the last prompt read at 0.1x, the rest written at 1.25x up to the last "
        "cache breakpoint and billed at 1x after it, where Loom's retrieved tail is); over a "
        "long conversation "
        f"`loomctx bench cost` measures both. {keep} every window in a browser with "
        f"`loomctx inspect --web --store {where}`, or go on with "
        f"`loomctx chat --store {where} --session demo` and `/context`.",
        style="dim",
    )


async def _turns(
    console: Console,
    agent: Agent,
    history: list[Message],
    events: IO[str] | None,
    kept: str | None,
) -> None:
    counter = agent.counter
    store = agent.memory.store
    first = next_turn(store, SESSION)  # a kept store counts on from its earlier runs
    rows: list[tuple[int, int, int, int, int, int]] = []
    previous_full = 0
    for turn, question in enumerate(QUESTIONS, 1):
        console.print(Rule(f"turn {turn}", style="dim"))
        console.print(Text.assemble(("you   ", "bold cyan"), question))
        history.append(Message.user(question))
        answer = await ask(agent, question, events=events)
        for call, sent in enumerate(answer.calls, 1):  # what `loomctx inspect` shows
            save_window(
                store,
                session=SESSION,
                turn=first + turn - 1,
                call=call,
                prompt=question,
                report=sent.report,
                messages=sent.messages,
                tools=sent.tools,
                usage=sent.usage,
            )
        console.print(Text.assemble(("loom  ", "bold green"), answer.text))
        full = counter.count_messages([Message.system(INSTRUCTIONS), *history])
        history.append(Message.assistant(answer.text))
        console.print(report_view(answer.report, width=console.width, full_history=full))
        report = answer.report
        # Loom's window as Loom marks it: its dynamic tail after the last breakpoint (plain).
        billed = round(
            ANTHROPIC.billed(
                cached=report.predicted_cached,
                written=report.predicted_written,
                plain=report.predicted_plain,
            )
        )
        rows.append(
            (turn, report.token_count, report.predicted_cached, billed, full, previous_full)
        )
        previous_full = full  # the next request repeats this one, the reply after it is new
    console.print(Rule(style="dim"))
    _summary(console, rows, kept)


def demo(
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            help="Keep the demo's store here: a SQLite file (or sqlite:///PATH) or a "
            "postgresql:// URL (default: a temporary SQLite file).",
        ),
    ] = None,
    offline: Annotated[
        bool, typer.Option("--offline", help="Use the offline responder even if a model is set.")
    ] = False,
    lexical: Annotated[
        bool, typer.Option("--lexical", help="Lexical search only: skip the embedding step.")
    ] = False,
    events: Annotated[
        Path | None,
        typer.Option("--events", help="Write every agent event to this file as JSON lines."),
    ] = None,
) -> None:
    """Ingest a long conversation, ask questions, and show each context window Loom built."""
    console = out_console()
    llm, described = choose_llm(None, os.environ, offline=offline)
    with ExitStack() as stack:
        if store is None:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="loom-demo-"))
            path: str | Path = Path(folder) / "demo.db"
            where = f"{path} (temporary; keep it with --store PATH)"
        else:
            path, where = store, redact_url(store)
        db = open_store(path)
        stack.callback(db.close)
        embedder = None if lexical else embedder_for("default")
        memory = open_memory(db, SESSION, embedder, l1_size=L1_SIZE)
        stack.callback(memory.close)
        kb = open_knowledge(db, SESSION, embedder, background=False)
        stack.callback(kb.close)
        search = "lexical only" if embedder is None else f"lexical + dense ({embedder.name})"
        console.print(Text("Loom demo: the context window built before every model call", "bold"))
        for label, value in (
            ("store", where),
            ("search", search),
            ("model", described),
            ("window", f"{WINDOW:,} tokens, {int(WINDOW * RESERVE):,} kept for the reply"),
        ):
            console.print(Text.assemble((f"  {label:<8}", "dim"), value))
        history = _conversation()
        full = TiktokenCounter().count_messages(history)
        console.print(
            Text(
                f"\n1. ingest: {len(history)} messages of a project chat ({full:,} tokens)", "bold"
            )
        )
        _ingest(console, memory, kb, history)
        console.print(Text(f"\n2. ask {len(QUESTIONS)} questions", "bold"))
        agent = Agent(
            RecordingLLM(llm),  # each window is saved with the exact messages sent
            system_instructions=INSTRUCTIONS,
            memory=memory,
            name="assistant",
            window=AgentWindow(model_context_window=WINDOW, output_reserve_ratio=RESERVE),
            sources=AgentSources(extra=[knowledge_source(kb)]),
        )
        log = stack.enter_context(events.open("w", encoding="utf-8")) if events else None
        asyncio.run(_turns(console, agent, history, log, None if store is None else where))

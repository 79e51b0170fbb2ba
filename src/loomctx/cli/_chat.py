"""`loomctx chat`: an interactive agent with persistent memory, tools and a knowledge folder.

Memory lives in the store under the session's id: ``loomctx chat --session ID`` resumes it (the
id is printed when a new session starts). ``--tools FILE_OR_MODULE`` gives the agent the
`Tool`s it defines; ``--knowledge FOLDER`` ingests a folder (again only what changed) and
searches it before every model call. In the chat, ``/context`` shows the last window's
report, ``/context --json`` prints it as JSON, ``/help`` lists the commands, ``/exit`` (or
end of input) leaves. Each window's report is also saved in the store, for
``loomctx inspect --session ID``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Final

import typer
from rich.console import Console
from rich.text import Text

from loomctx.agent.events import AgentEvent, ToolCallEvent, ToolResultEvent
from loomctx.agent.executor import Agent
from loomctx.agent.settings import AgentLoop, AgentSources, AgentWindow
from loomctx.cli._agent import RecordingLLM, ask, choose_llm
from loomctx.cli._common import ConfigOption, StoreOption, out_console, progress_bar, settings_from
from loomctx.cli._render import report_view
from loomctx.cli._reports import next_turn, save_window
from loomctx.cli._tools import load_tools
from loomctx.cli._workspace import (
    embedder_for,
    knowledge_source,
    open_knowledge,
    open_memory,
)
from loomctx.context.block import ContextSource
from loomctx.context.report import ContextReport
from loomctx.errors import ConfigError, LoomError
from loomctx.knowledge import IngestProgress
from loomctx.session import topics
from loomctx.session.bus import open_bus
from loomctx.stores import open_store
from loomctx.stores.base import BaseStore

if TYPE_CHECKING:
    from loomctx.embeddings import Embedder

__all__ = ["chat"]

HELP: Final = (
    "/context          the last window: what went in, what did not, and why\n"
    "/context --json   the same as JSON\n"
    "/help             this list\n"
    "/exit             leave (so does end of input)"
)


def _read(console: Console) -> str | None:
    try:
        return console.input("[bold cyan]you>[/] ")
    except EOFError:
        return None


class _Printer:
    """Streams a turn: the reply's text after ``loom>``, wrapped at word boundaries to the
    console's width as it arrives, and each tool call and result on a line of its own."""

    PROMPT: Final = "loom> "

    def __init__(self, console: Console) -> None:
        self.console = console
        self.column: int | None = None  # None: not inside the reply's text
        self.space = ""  # whitespace held back until the next word shows where it goes

    def text(self, piece: str) -> None:
        if self.column is None:
            self.console.print(Text(self.PROMPT, style="bold green"), end="")
            self.column = len(self.PROMPT)
            self.space = ""
        for word in re.findall(r"\n|[^\S\n]+|\S+", piece):
            if word == "\n":
                self.console.print()
                self.column, self.space = 0, ""
            elif word.isspace():
                self.space = word if self.column else ""
            else:
                if self.column + len(self.space) + len(word) > self.console.width:
                    self.console.print()
                    self.column, self.space = 0, ""
                self.console.print(self.space + word, end="", markup=False, highlight=False)
                self.column += len(self.space) + len(word)
                self.space = ""

    def event(self, event: AgentEvent) -> None:
        if isinstance(event, ToolCallEvent):
            line = f"  → {event.call.name}({event.call.arguments_json()})"
        elif isinstance(event, ToolResultEvent):
            line = f"  {'✗' if event.is_error else '←'} {event.content[:200]}"
        else:
            return
        self.end()
        self.console.print(line, style="dim", markup=False, soft_wrap=True)

    def end(self) -> None:
        if self.column is not None:
            self.console.print()
            self.column = None


def _knowledge(
    console: Console,
    db: BaseStore,
    name: str,
    folder: str | None,
    embedder: Embedder | None,
    stack: ExitStack,
) -> tuple[list[ContextSource], str]:
    """The knowledge source (if the knowledge base has documents) and a line about it; the
    knowledge base's background embedding stops when `stack` closes."""
    kb = open_knowledge(db, name, embedder)
    stack.callback(kb.close)
    if folder is not None:
        if not Path(folder).is_dir():
            raise ConfigError(f"the knowledge folder {folder!r} is not a folder; check the path")
        with progress_bar(console) as progress:
            task = progress.add_task("knowledge", total=None)

            def advance(p: IngestProgress) -> None:
                progress.update(task, completed=p.done, total=p.total)

            kb.add_folder(folder, progress=advance)
    documents = kb.documents()
    if not documents:
        return [], ""
    return [knowledge_source(kb)], f"{name} ({len(documents)} documents)"


class _Chat:
    def __init__(
        self, console: Console, agent: Agent, session: str, turn: int, bus: str | None = None
    ) -> None:
        self.console = console
        self.agent = agent
        self.session = session
        self.turn = turn
        self.last: ContextReport | None = None
        # The `bus` setting: each turn's window is announced there (``context.assembled``),
        # for whatever other process follows the conversation. Unset: no bus at all.
        self.bus = open_bus(bus) if bus else None

    def command(self, line: str) -> bool:
        """Run a /command; False to leave."""
        name, _, rest = line.partition(" ")
        if name in ("/exit", "/quit"):
            return False
        if name == "/context":
            if self.last is None:
                self.console.print("no window yet: say something first", style="dim")
            elif rest.strip() == "--json":
                self.console.print(json.dumps(self.last.to_dict(), indent=2), markup=False)
            else:
                self.console.print(report_view(self.last, width=self.console.width))
        elif name == "/help":
            self.console.print(HELP, markup=False)
        else:
            self.console.print(f"unknown command {name!r}; /help lists them", markup=False)
        return True

    async def run(self, events: IO[str] | None) -> None:
        try:
            await self._turns(events)
        finally:
            if self.bus is not None:
                await self.bus.close()

    async def _turns(self, events: IO[str] | None) -> None:
        store = self.agent.memory.store
        while (line := await asyncio.to_thread(_read, self.console)) is not None:
            line = line.strip()
            if not line:
                continue
            if line.startswith("/"):
                if not self.command(line):
                    break
                continue
            printer = _Printer(self.console)
            try:
                answer = await ask(
                    self.agent, line, on_text=printer.text, on_event=printer.event, events=events
                )
            except LoomError as exc:  # a failed turn (the provider, say): the chat goes on
                printer.end()
                self.console.print(f"error: {exc}", style="red", markup=False, soft_wrap=True)
                continue
            printer.end()
            self.last = answer.report
            for n, sent in enumerate(answer.calls, 1):
                save_window(
                    store,
                    session=self.session,
                    turn=self.turn,
                    call=n,
                    prompt=line,
                    report=sent.report,
                    messages=sent.messages,
                    tools=sent.tools,
                    usage=sent.usage,
                )
            if self.bus is not None:
                await self.bus.publish(
                    topics.CONTEXT_ASSEMBLED,
                    {
                        "session_ids": [self.session],
                        "query": line,
                        "strategy": None,
                        "report": answer.report.summary(),
                    },
                    source=f"chat:{self.session}",
                )
            self.turn += 1


def chat(
    session: Annotated[
        str | None,
        typer.Option("--session", help="Resume this session (default: start a new one)."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="provider/model, e.g. openai/gpt-4o-mini (env LOOM_MODEL)."),
    ] = None,
    tools: Annotated[
        str | None,
        typer.Option("--tools", help="A .py file or module whose tools the agent may call."),
    ] = None,
    knowledge: Annotated[
        str | None,
        typer.Option("--knowledge", help="A folder of documents to search before every call."),
    ] = None,
    window: Annotated[
        int | None, typer.Option("--window", help="The model's context window, in tokens.")
    ] = None,
    offline: Annotated[
        bool, typer.Option("--offline", help="Use the offline responder even if a model is set.")
    ] = False,
    events: Annotated[
        Path | None,
        typer.Option("--events", help="Append every agent event to this file as JSON lines."),
    ] = None,
    kb: Annotated[
        str | None, typer.Option("--kb", help="The knowledge base to search (default: default).")
    ] = None,
    store: StoreOption = None,
    config: ConfigOption = None,
) -> None:
    """Chat with an agent whose context window Loom rebuilds before every model call."""
    settings = settings_from(
        config,
        session=session,
        model=model,
        tools=tools,
        knowledge=knowledge,
        window=window,
        store=store,
        kb=kb,
    )
    console = out_console()
    llm, described = choose_llm(settings.model, os.environ, offline=offline)
    llm = RecordingLLM(llm)  # each window is saved with the exact messages sent
    agent_tools = load_tools(settings.tools) if settings.tools else []
    session_id = settings.session or f"chat-{uuid.uuid4().hex[:8]}"
    with ExitStack() as stack:
        db = open_store(settings.store)
        stack.callback(db.close)
        embedder = embedder_for(settings.embedder)
        memory = open_memory(db, session_id, embedder)
        stack.callback(memory.close)
        sources, about_kb = _knowledge(
            console, db, settings.kb, settings.knowledge, embedder, stack
        )
        if memory.background is not None:
            memory.background.start()
        agent = Agent(
            llm,
            system_instructions=settings.instructions,
            tools=agent_tools,
            memory=memory,
            name="assistant",
            window=AgentWindow(
                model_context_window=settings.window, output_reserve_ratio=settings.output_reserve
            ),
            sources=AgentSources(extra=sources),
            loop=AgentLoop(max_turns=settings.max_turns),
        )
        resumed = bool(memory.get_l1_tasks(1))
        lines = [
            ("session", f"{session_id} " + ("(resumed)" if resumed else
                                            f"(new; resume with --session {session_id})")),
            ("model", described),
            ("store", settings.store),
            ("knowledge", about_kb),
            ("tools", ", ".join(t.name for t in agent_tools)),
        ]  # fmt: skip
        for label, value in lines:
            if value:
                console.print(Text.assemble((f"{label:<10}", "dim"), value))
        console.print("/help for commands, /exit to leave", style="dim")
        log = stack.enter_context(events.open("a", encoding="utf-8")) if events else None
        turn = next_turn(db, session_id)
        asyncio.run(_Chat(console, agent, session_id, turn, settings.bus).run(log))

"""Every code snippet in README.md and docs/**/*.md runs as written.

Snippets are found by glob, so a new page is checked without changing this file. For each
fenced block:

- ``python``: executed in a fresh temporary folder (the working directory), top-level
  ``await`` included (compiled with `ast.PyCF_ALLOW_TOP_LEVEL_AWAIT` and run with
  `asyncio.run`). Model calls go over real HTTP to a local scripted OpenAI-compatible server
  (`tests.agent._servers.WireServer`): ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` point the
  official SDK there, so ``OpenAIChatLLM("gpt-4o-mini")`` works as written, offline.
- ``sh`` / ``bash`` / ``console``: every line that runs ``loomctx`` (after optional
  ``NAME=value`` assignments) is run, in order, in one temporary folder, through the CLI's
  runner, offline, with ``LOOM_EMBEDDER=none`` (lexical search: the embedder's speed is
  measured in `bench/`, not here) and ``/exit`` as the input of an interactive ``chat``.
  Other lines (``make demo``, ``pip install``) are not run.

A snippet may need something the page does not show. Say so in an HTML comment on the line
right before its opening fence (invisible on GitHub, visible in the source):

- ``<!-- snippet: uses NAME, NAME -->``: the test provides these before running it. A path
  (``handbook/``, ``notes.md``, ``export.json``, ``my_tools.py``, ``report.json``,
  ``run.jsonl``, ``requests.jsonl``, ``docs/``, the session ``chat-1a2b3c4d``) is created in
  the folder; a Python name (``messages``, ``client``, ``TicketService``) is defined.
  `PROVIDED` lists them all: add one there when a new page needs it.
- ``<!-- snippet: compile-only: REASON -->``: it genuinely cannot run offline (it needs a
  real API key, a server, or data and minutes a test does not have). It is still checked:
  Python must compile, and each ``loomctx`` command must be accepted by the CLI with
  ``--help`` appended (every subcommand and option exists). Keep these rare.
- ``<!-- snippet: needs: MODULE -->``: it needs an optional extra's package (an agent
  framework): it runs where MODULE is installed (the ``dev`` extra installs them all) and is
  skipped, compiled only, where it is not.

A block in another language (``toml``, ``text``, none) is not code to run.
"""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import json
import os
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from loomctx.agent.llm import allow_model_requests
from loomctx.cli import app
from loomctx.messages import Message
from loomctx.testing import ScriptedLLM
from tests.agent._servers import JSONReply, WireServer, openai_text

ROOT = Path(__file__).parents[1]
PAGES = sorted([ROOT / "README.md", *ROOT.glob("docs/**/*.md")])
_FENCE = re.compile(r"^(`{3,}|~{3,})\s*([\w+-]*)\s*$")
_MARKER = re.compile(r"^<!--\s*snippet:\s*(uses|compile-only|needs)\s*:?\s*(.*?)\s*-->$")
_LANGUAGES = {"python": "python", "py": "python", "sh": "shell", "bash": "shell",
              "console": "shell", "shell": "shell"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Snippet:
    """One fenced block of a page, with what its markers say."""

    page: Path
    line: int
    language: str
    code: str
    uses: tuple[str, ...]
    compile_only: str | None
    needs: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"


def snippets(page: Path) -> list[Snippet]:
    """The Python and shell blocks of `page`, with the markers right above each."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Snippet] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, language = opening.groups()
        end = next(
            (j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence)),
            len(lines),
        )
        uses: list[str] = []
        needs: list[str] = []
        compile_only = None
        k = i - 1
        while k >= 0 and (marker := _MARKER.match(lines[k].strip())):
            if marker[1] == "uses":
                uses += [u.strip() for u in marker[2].split(",") if u.strip()]
            elif marker[1] == "needs":
                needs += [u.strip() for u in marker[2].split(",") if u.strip()]
            else:
                compile_only = marker[2] or "(no reason given)"
            k -= 1
        if language.lower() in _LANGUAGES:
            found.append(
                Snippet(
                    page=page,
                    line=i + 1,
                    language=_LANGUAGES[language.lower()],
                    code="\n".join(lines[i + 1 : end]) + "\n",
                    uses=tuple(uses),
                    compile_only=compile_only,
                    needs=tuple(needs),
                )
            )
        i = end + 1
    return found


SNIPPETS = [s for page in PAGES for s in snippets(page)]
PYTHON = [s for s in SNIPPETS if s.language == "python"]
SHELL = [s for s in SNIPPETS if s.language == "shell"]


# --- what snippets may use ----------------------------------------------------------------------


@dataclass
class Setting:
    """What a snippet runs in: its folder, the local model server, the CLI runner."""

    folder: Path
    wire: WireServer
    runner: CliRunner
    env: dict[str, str]

    def cli(self, args: list[str], env: dict[str, str] | None = None) -> Any:
        result = self.runner.invoke(app, args, env={**self.env, **(env or {})}, input="/exit\n")
        assert result.exit_code == 0, f"loomctx {shlex.join(args)}\n{result.output}"
        return result


def _write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


HANDBOOK = {
    "refunds.md": "# Refunds\n\nA damaged book is refunded in full within 5 days of the report.\n",
    "shipping.md": "# Shipping\n\nParcels leave the warehouse every weekday at 16:00.\n",
}


def _handbook(s: Setting) -> None:
    _write(s.folder / "handbook", HANDBOOK)


def _docs(s: Setting) -> None:
    _write(s.folder / "docs", HANDBOOK)


def _notes(s: Setting) -> None:
    _write(s.folder, {"notes.md": "# Notes\n\nThe office wifi password changes on Mondays.\n"})


def _export(s: Setting) -> None:
    messages = [
        {"role": "user", "content": "My parcel is late."},
        {"role": "assistant", "content": "It left the warehouse yesterday."},
    ]
    _write(s.folder, {"export.json": json.dumps(messages)})


def _requests(s: Setting) -> None:
    from tests.evaluation.replay_data import write_log

    write_log(s.folder / "requests.jsonl", turns=12)


def _tools(s: Setting) -> None:
    _write(
        s.folder,
        {
            "my_tools.py": "import loomctx\n\n\n@loomctx.tool\ndef order_status(order: str) -> str:"
            '\n    """Where an order is."""\n    return f"{order}: shipped"\n'
        },
    )


def _run_log(s: Setting) -> None:
    s.cli(["demo", "--lexical", "--store", "runs.db", "--events", "run.jsonl"])


def _report(s: Setting) -> None:
    from loomctx import ContextOrchestrator, TiktokenCounter
    from loomctx.context.sources import PromptSource, UserInputSource

    orchestrator = ContextOrchestrator(
        token_counter=TiktokenCounter(),
        sources=[PromptSource("You are a support agent."), UserInputSource()],
        model_context_window=4000,
    )
    window = asyncio.run(orchestrator.build(query="Where is my parcel?"))
    _write(s.folder, {"report.json": json.dumps(window.report.to_dict())})


def _chat_session(s: Setting) -> None:
    result = s.runner.invoke(
        app,
        ["chat", "--session", "chat-1a2b3c4d"],
        env=s.env,
        input="Hello\n" * 7 + "/exit\n",  # docs/cli.md inspects its turn 7
    )
    assert result.exit_code == 0, result.output


class TicketService:
    """The service `OpenTicketsSource` (docs/extending.md) reads."""

    async def open_for(self, session_id: str | None) -> list[Any]:
        return []


def _openai_client(s: Setting) -> Any:
    import openai

    s.wire.script(
        JSONReply(
            body={
                "id": "c1",
                "object": "chat.completion",
                "created": 0,
                "model": "gpt-4o",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "On its way."},
                    }
                ],
            }
        )
    )
    return openai.OpenAI(base_url=s.wire.openai_url, api_key="test-key", max_retries=0)


FILES: dict[str, Callable[[Setting], None]] = {
    "handbook/": _handbook,
    "docs/": _docs,
    "notes.md": _notes,
    "export.json": _export,
    "my_tools.py": _tools,
    "run.jsonl": _run_log,
    "requests.jsonl": _requests,
    "report.json": _report,
    "chat-1a2b3c4d": _chat_session,
}
NAMES: dict[str, Callable[[Setting], Any]] = {
    "messages": lambda s: [Message.user("I ordered a book."), Message.assistant("Order 1042?")],
    "client": _openai_client,
    "TicketService": lambda s: TicketService,
    "llm": lambda s: ScriptedLLM([]),  # made, never called (docs/concepts.md's budgets)
    "instructions": lambda s: "You answer questions about the shop's orders.",
}
PROVIDED = {*FILES, *NAMES}


@pytest.fixture
def setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Setting]:
    for name in list(os.environ):
        if name.startswith(("LOOM_", "OPENAI_", "ANTHROPIC_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.chdir(tmp_path)
    wire = WireServer().start()
    monkeypatch.setenv("OPENAI_BASE_URL", wire.openai_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    env = {"LOOM_EMBEDDER": "none", "COLUMNS": "100"}
    try:
        with allow_model_requests():
            yield Setting(folder=tmp_path, wire=wire, runner=CliRunner(), env=env)
    finally:
        wire.stop()
    assert wire.unexpected == 0, "a snippet called the model more often than scripted"


def _namespace(snippet: Snippet, s: Setting) -> dict[str, Any]:
    unknown = sorted(set(snippet.uses) - PROVIDED)
    assert not unknown, f"{snippet.id} uses {unknown}; add them to `PROVIDED` in {__name__}"
    namespace: dict[str, Any] = {"__name__": "__snippet__"}
    for use in snippet.uses:
        if use in FILES:
            FILES[use](s)
        else:
            namespace[use] = NAMES[use](s)
    return namespace


# --- the tests ----------------------------------------------------------------------------------


def test_pages_are_found_and_hold_snippets() -> None:
    assert {p.name for p in PAGES} >= {"README.md", "cli.md", "extending.md", "security.md"}
    assert len(PYTHON) >= 10
    assert len(SHELL) >= 5


def test_markers_are_read(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n<!-- snippet: uses messages, client -->\n<!-- snippet: compile-only: needs "
        "OPENAI_API_KEY -->\n```python\nprint(1)\n```\n\n```toml\nx = 1\n```\n",
        encoding="utf-8",
    )
    (found,) = snippets(page)
    assert (found.line, found.uses, found.compile_only) == (
        4,
        ("messages", "client"),
        "needs OPENAI_API_KEY",
    )
    assert found.code == "print(1)\n"


def test_a_needs_marker_is_read(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- snippet: needs: agents, langgraph -->\n```python\nprint(1)\n```\n", encoding="utf-8"
    )
    (found,) = snippets(page)
    assert (found.needs, found.compile_only) == (("agents", "langgraph"), None)


@pytest.mark.parametrize("snippet", PYTHON, ids=[s.id for s in PYTHON])
def test_python_snippet_runs(snippet: Snippet, setting: Setting) -> None:
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    code = compile(snippet.code, snippet.id, "exec", flags=flags, dont_inherit=True)
    if snippet.compile_only is not None:
        return
    missing = [m for m in snippet.needs if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (an optional extra)")
    namespace = _namespace(snippet, setting)
    setting.wire.script(*[openai_text("A damaged book is refunded in full.")] * 8)
    result = eval(code, namespace)  # a coroutine when the snippet awaits at top level
    if asyncio.iscoroutine(result):
        asyncio.run(result)


def _commands(code: str) -> Iterator[tuple[dict[str, str], list[str]]]:
    """(environment, arguments) of every ``loomctx`` line of a shell block."""
    for line in code.replace("\\\n", " ").splitlines():  # continued lines are one command
        words = shlex.split(line, comments=True)
        env = {}
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        if words and words[0] == "loomctx":
            yield env, words[1:]


def _shell_param(snippet: Snippet) -> Any:
    # `loomctx demo` embeds its data with the default model (a minute or two on 2 cores).
    slow = snippet.compile_only is None and "loomctx demo" in snippet.code
    return pytest.param(snippet, id=snippet.id, marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("snippet", [_shell_param(s) for s in SHELL])
def test_shell_snippet_runs(snippet: Snippet, setting: Setting) -> None:
    commands = list(_commands(snippet.code))
    if snippet.compile_only is not None:
        for _, args in commands:
            setting.cli([*args, "--help"])
        return
    _namespace(snippet, setting)
    for env, args in commands:
        # These run until stopped: run here, the test would hang instead of failing.
        assert args[:1] not in (["serve"], ["mcp"]) or "--hash-key" in args, (
            f"{snippet.id}: `loomctx {args[0]}` runs until it is stopped; mark the block "
            "`<!-- snippet: compile-only: ... -->`"
        )
        setting.cli(args, env)

"""`loomctx ingest`: documents into a knowledge base, conversation exports into a session."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from loomctx.cli import app
from loomctx.cli._conversations import read_conversation
from loomctx.cli._workspace import open_knowledge, open_memory
from loomctx.errors import ConfigError, MessageFormatError
from loomctx.messages import Message, ToolCall
from loomctx.stores import open_store

OPENAI = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Which port does the staging proxy use?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "lookup", "arguments": '{"host": "staging"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "port 8443"},
    {"role": "assistant", "content": "The staging proxy listens on port 8443."},
]
ANTHROPIC = {
    "system": "You are terse.",
    "messages": [
        {"role": "user", "content": "Which port does the staging proxy use?"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "c1", "name": "lookup", "input": {"host": "staging"}}
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "port 8443"}],
        },
        {"role": "assistant", "content": "The staging proxy listens on port 8443."},
    ],
}
EXPECTED = [
    Message.system("You are terse."),
    Message.user("Which port does the staging proxy use?"),
    Message.assistant(tool_calls=[ToolCall(id="c1", name="lookup", arguments={"host": "staging"})]),
    Message.tool("port 8443", tool_call_id="c1"),
    Message.assistant("The staging proxy listens on port 8443."),
]


def _write(path: Path, data: Any, *, lines: bool = False) -> Path:
    if lines:
        path.write_text("".join(json.dumps(item) + "\n\n" for item in data))
    else:
        path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("name", "data", "lines"),
    [
        ("openai.json", OPENAI, False),
        ("wrapped.json", {"messages": OPENAI}, False),
        ("anthropic.json", ANTHROPIC, False),
        ("openai.jsonl", OPENAI, True),
        ("conversations.jsonl", [{"messages": OPENAI[:2]}, {"messages": OPENAI[2:]}], True),
        ("anthropic.jsonl", [ANTHROPIC], True),
    ],
)
def test_every_export_shape_reads_to_the_same_messages(
    tmp_path: Path, name: str, data: Any, lines: bool
) -> None:
    messages = read_conversation(_write(tmp_path / name, data, lines=lines))
    assert [(m.role, m.content, m.tool_calls, m.tool_call_id) for m in messages] == [
        (m.role, m.content, m.tool_calls, m.tool_call_id) for m in EXPECTED
    ]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("a.json", "[{", r"'.*a.json': not JSON"),
        ("b.jsonl", '{"role": "user", "content": "hi"}\n{oops\n', r"'.*b.jsonl' line 2: not JSON"),
        ("c.json", '"hello"', r"expected a list of messages or an object with `messages`, got str"),
        ("d.json", '[{"content": "no role"}]', r"'.*d.json': OpenAI message 0: .*no `role`"),
        ("e.jsonl", '{"messages": 3}\n', r"'.*e.jsonl' line 1: expected a list of messages"),
    ],
)
def test_malformed_exports_name_the_file_and_place(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(MessageFormatError, match=message):
        read_conversation(path)


def test_ingest_a_conversation_into_a_session(
    runner: CliRunner, tmp_path: Path, lexical: None
) -> None:
    _write(tmp_path / "support.json", OPENAI)
    result = runner.invoke(app, ["ingest", "support.json", "--store", "x.db", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary == {
        "store": "x.db",
        "kind": "conversation",
        "session": "support",
        "messages": 5,
        "tasks": 3,
        "vectors_pending": 0,
    }
    store = open_store(tmp_path / "x.db")
    memory = open_memory(store, "support", None)
    found = [t.action for t in memory.search_tasks("staging proxy port", limit=3)]
    assert "assistant_message" in found
    assert [t.action for t in memory.get_l1_tasks(10)] == [
        "user_message",
        "lookup",
        "assistant_message",
    ]
    memory.close()
    store.close()


def test_an_ingested_conversation_is_searchable_before_the_models_vectors(
    runner: CliRunner, tmp_path: Path
) -> None:
    from loomctx.embeddings import default_embedder
    from loomctx.stores.base import Unembedded

    _write(tmp_path / "chat.jsonl", OPENAI, lines=True)
    result = runner.invoke(
        app, ["ingest", "chat.jsonl", "--session", "s9", "--store", "x.db", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["vectors_pending"] == 3
    assert "searched by their fast vectors" in result.stderr
    assert "loomctx chat --session s9" in result.stderr
    store = open_store(tmp_path / "x.db")
    memory = open_memory(store, "s9", default_embedder())
    assert memory.fast_embedder is not None
    model, fast = default_embedder().name, memory.fast_embedder.name
    left = {
        m: len(store.batch([Unembedded(model=m, prefix=memory.namespace)])[0])
        for m in (fast, model)
    }
    assert left == {fast: 0, model: 3}
    hits = memory.search("staging proxy port", limit=3)
    assert hits
    assert all(h.vector_score is not None for h in hits)  # by the fast vectors
    memory.close()
    store.close()

    waited = runner.invoke(
        app, ["ingest", "chat.jsonl", "--session", "s10", "--store", "x.db", "--wait"]
    )
    assert waited.exit_code == 0, waited.output
    assert "session           s10" in waited.stdout
    assert "vectors" in waited.stderr
    assert "searched by their fast vectors" not in waited.stderr
    store = open_store(tmp_path / "x.db")
    memory = open_memory(store, "s10", None)
    assert store.batch([Unembedded(model=model, prefix=memory.namespace)])[0] == []
    memory.close()
    store.close()


def test_ingest_a_folder_of_documents_then_again(
    runner: CliRunner, tmp_path: Path, lexical: None
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Deploys\n\nDeploy staging with `make deploy ENV=staging`.\n")
    (docs / "b.txt").write_text("Backups run nightly at 02:00.\n")
    (docs / "c.bin").write_bytes(b"\x00\x01")
    first = runner.invoke(app, ["ingest", "docs", "--kb", "handbook", "--json"])
    assert first.exit_code == 0, first.output
    summary = json.loads(first.stdout)
    assert summary["kind"] == "documents"
    assert summary["knowledge_base"] == "handbook"
    assert summary["added"] == ["a.md", "b.txt"]
    assert [s["path"] for s in summary["skipped"]] == ["c.bin"]
    assert summary["store"] == ".loom/loom.db"
    again = runner.invoke(app, ["ingest", "docs", "--kb", "handbook"])
    assert again.exit_code == 0
    assert "unchanged         a.md, b.txt" in again.stdout
    store = open_store(tmp_path / ".loom" / "loom.db")
    kb = open_knowledge(store, "handbook", None)
    hits = kb.search_sync("when do backups run")
    assert hits[0].document_id == "b.txt"
    store.close()


def test_ingested_documents_are_searchable_before_the_models_vectors(
    runner: CliRunner, tmp_path: Path
) -> None:
    from loomctx.embeddings import default_embedder
    from loomctx.stores.base import Unembedded

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Deploys\n\nDeploy staging with `make deploy ENV=staging`.\n")
    (docs / "b.txt").write_text("Backups run nightly at 02:00.\n")
    first = runner.invoke(app, ["ingest", "docs", "--kb", "handbook", "--json"])
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout)["vectors_pending"] == 2
    assert "searched by their fast vectors" in first.stderr
    store = open_store(tmp_path / ".loom" / "loom.db")
    kb = open_knowledge(store, "handbook", default_embedder(), background=False)
    assert kb.unembedded == 2
    assert kb.search_sync("when do backups run")[0].vector_score is not None  # the fast vector
    kb.close()
    store.close()
    waited = runner.invoke(app, ["ingest", "docs", "--kb", "handbook", "--wait", "--json"])
    assert waited.exit_code == 0, waited.output
    assert json.loads(waited.stdout)["vectors_pending"] == 0
    assert "vectors" in waited.stderr
    store = open_store(tmp_path / ".loom" / "loom.db")
    op = Unembedded(model=default_embedder().name, prefix=("knowledge", "handbook"))
    assert store.batch([op])[0] == []
    store.close()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX links")
def test_ingest_does_not_follow_links_out_of_the_folder_and_says_so(
    runner: CliRunner, tmp_path: Path, lexical: None
) -> None:
    (tmp_path / "secret.md").write_text("The root password is hunter2.\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.md").write_text("Build the widget with make.\n")
    (repo / "leak.md").symlink_to(tmp_path / "secret.md")
    result = runner.invoke(app, ["ingest", "repo"])
    assert result.exit_code == 0, result.output
    assert "added             a.md\n" in result.stdout
    assert "skipped           1 file (below)\n" in result.stdout
    table = " ".join(result.stdout.split("(below)", 1)[1].split())
    assert table.startswith(
        f"skipped why leak.md a symbolic link to a file outside the folder "
        f"(`{tmp_path / 'secret.md'}`): not followed"
    )
    as_json = json.loads(runner.invoke(app, ["ingest", "repo", "--json"]).stdout)
    assert [s["path"] for s in as_json["skipped"]] == ["leak.md"]


def test_ingest_limits_are_options_and_errors_name_them(
    runner: CliRunner, tmp_path: Path, lexical: None
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"p{i}.md").write_text(f"Page {i} " * 50)
    many = runner.invoke(app, ["ingest", "docs", "--max-files", "2"])
    assert many.exit_code == 1
    assert "has more than 2 files to ingest (the `max_files` limit)" in many.stderr
    assert "(on the command line: `--max-files`)" in many.stderr
    big = runner.invoke(app, ["ingest", "docs", "--max-total-size", "1k"])
    assert big.exit_code == 1
    assert "(on the command line: `--max-total-size`)" in big.stderr
    skip = runner.invoke(app, ["ingest", "docs", "--max-file-size", "100", "--json"])
    assert skip.exit_code == 0, skip.output
    assert [s["path"] for s in json.loads(skip.stdout)["skipped"]] == ["p0.md", "p1.md", "p2.md"]
    ok = runner.invoke(app, ["ingest", "docs", "--max-file-size", "1MiB", "--json"])
    assert json.loads(ok.stdout)["added"] == ["p0.md", "p1.md", "p2.md"]
    bad = runner.invoke(app, ["ingest", "docs", "--max-file-size", "lots"])
    assert bad.exit_code == 2
    assert "'lots' is not a size" in bad.output


def test_ingest_one_document_file(runner: CliRunner, tmp_path: Path, lexical: None) -> None:
    (tmp_path / "notes.md").write_text("The office wifi password changes every Monday.\n")
    result = runner.invoke(app, ["ingest", "notes.md", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["kind"] == "documents"
    assert summary["added_or_updated"] == ["notes.md"]


def test_a_json_file_can_be_ingested_as_a_document(
    runner: CliRunner, tmp_path: Path, lexical: None
) -> None:
    _write(tmp_path / "data.json", {"a": 1})
    result = runner.invoke(app, ["ingest", "data.json", "--as", "documents", "--json"])
    assert result.exit_code == 1
    assert "error: no loader for `data.json`" in result.stderr


def test_ingest_usage_and_format_errors(runner: CliRunner, tmp_path: Path, lexical: None) -> None:
    missing = runner.invoke(app, ["ingest", "nope"])
    assert missing.exit_code == 2
    assert "'nope' does not exist" in missing.output
    (tmp_path / "folder").mkdir()
    folder = runner.invoke(app, ["ingest", "folder", "--as", "conversation"])
    assert folder.exit_code == 2
    assert "a conversation is a .json or .jsonl file" in folder.output
    (tmp_path / "bad.json").write_text('[{"role": "robot", "content": "beep"}]')
    bad = runner.invoke(app, ["ingest", "bad.json"])
    assert bad.exit_code == 1
    assert "error: 'bad.json': OpenAI message 0" in bad.stderr


def test_a_store_path_that_is_a_folder_is_refused(
    runner: CliRunner, tmp_path: Path, lexical: None
) -> None:
    (tmp_path / "notes.md").write_text("hello\n")
    (tmp_path / "db").mkdir()
    result = runner.invoke(app, ["ingest", "notes.md", "--store", "db"])
    assert result.exit_code == 1
    assert "the store 'db' is a folder" in result.output


def test_odd_but_valid_shapes(tmp_path: Path) -> None:
    path = _write(tmp_path / "odd.json", ["not a message"])
    with pytest.raises(MessageFormatError, match="OpenAI message 0"):
        read_conversation(path)
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(ConfigError, match=r"cannot read '.*dir\.json'"):
        read_conversation(tmp_path / "dir.json")


def test_anthropic_tool_blocks_are_recognised_without_a_system(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.json", ANTHROPIC["messages"])
    assert read_conversation(path) == EXPECTED[1:]


def test_ingest_lists_what_it_skipped_as_a_short_table(
    runner: CliRunner, tmp_path: Path, lexical: None
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Deploys\n\nDeploy with make.\n")
    for i in range(30):
        (docs / f"img{i:02}.png").write_bytes(b"\x89PNG")
    (docs / "logo.svg").write_bytes(b"<svg/>")
    for i in range(12):
        (docs / f"big{i:02}.md").write_text("x" * 200)
    result = runner.invoke(app, ["ingest", "docs", "--max-file-size", "100"])
    assert result.exit_code == 0, result.output
    assert "skipped           43 files (below)\n" in result.stdout
    rows = [" ".join(line.split()) for line in result.stdout.split("(below)", 1)[1].splitlines()]
    rows = [row for row in rows if row]
    assert rows[:3] == [
        "skipped why",
        "*.png (30 files) no loader for .png files",
        "*.svg (1 file) no loader for .svg files",
    ]
    assert rows[3].startswith("big00.md 200 bytes, more than `max_file_bytes` (100)")
    assert rows[-1] == "... 2 more --json lists every one"
    assert "1/1 chunks" in result.stderr
    assert "32/32 files" in result.stderr  # the 12 too large are left out by the walk

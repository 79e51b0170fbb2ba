"""Files and folders: loaders, skipped files, progress, incremental folder ingest."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from loomctx.errors import ConfigError
from loomctx.knowledge import (
    IngestProgress,
    IngestSummary,
    KnowledgeBase,
    SkippedFile,
    read_text,
)
from loomctx.stores.sqlite import SQLiteStore
from loomctx.testing.embedders import HashingEmbedder

from .corpus import DOCS


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def read_rst(path: Path) -> str:
    """A loader for reStructuredText: its underlined titles become Markdown headings."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for line, below in zip(lines, [*lines[1:], ""], strict=True):
        if below and set(below) == {"="}:
            out.append(f"# {line}")
        elif line and set(line) == {"="}:
            continue
        else:
            out.append(line)
    return "\n".join(out)


# --- one file --------------------------------------------------------------------------------


def test_add_file_reads_text_and_markdown(tmp_path: Path) -> None:
    write(tmp_path, {"guide.md": DOCS["deploy.md"], "notes.txt": "\ufeffPlain notes here.\r\n"})
    kb = KnowledgeBase("docs")
    assert kb.add_file(tmp_path / "guide.md") == (tmp_path / "guide.md").as_posix()
    notes = kb.add_file(str(tmp_path / "notes.txt"), document_id="notes", metadata={"k": 1})
    docs = {d.document_id: d for d in kb.documents()}
    assert docs[notes].metadata == {"source": str(tmp_path / "notes.txt"), "k": 1, "title": "notes"}
    assert docs[(tmp_path / "guide.md").as_posix()].metadata["title"] == "Deployment"
    (hit,) = kb.search_sync("plain notes")
    assert hit.text == "Plain notes here."  # the byte-order mark and line ending are gone


def test_a_loader_for_another_format(tmp_path: Path) -> None:
    write(tmp_path, {"intro.rst": "Welcome\n=======\n\nThe reST intro explains widgets.\n"})
    kb = KnowledgeBase("docs", loaders={".RST": read_rst})
    kb.add_file(tmp_path / "intro.rst", document_id="intro")
    (hit,) = kb.search_sync("widgets")
    assert hit.text == "Welcome\n\nThe reST intro explains widgets."
    assert hit.metadata["headings"] == "Welcome"


def _failing(path: Path) -> str:
    raise RuntimeError("the converter crashed")


def _not_text(path: Path) -> str:
    return path.read_bytes()  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("name", "content", "loaders", "match"),
    [
        ("missing.md", None, None, "is not a file"),
        ("folder", "dir", None, "is not a file .*use `add_folder`"),
        ("book.epub", b"PK", None, r"no loader for `.*book\.epub` \(suffix '\.epub'"),
        ("scan.pdf", b"%PDF-1.7", None, r"could not convert `.*scan\.pdf` to text .*valid \.pdf"),
        ("Makefile", "all:", None, "suffix 'none'"),
        ("latin.txt", "café".encode("latin-1"), None, r"`.*latin\.txt` is not UTF-8 text"),
        ("bad.rst", "x", {".rst": _failing}, "the loader for '.rst' failed on .*converter crashed"),
        ("bytes.rst", "x", {".rst": _not_text}, "returned bytes"),
    ],
)
def test_add_file_refuses_what_it_cannot_read(
    tmp_path: Path,
    name: str,
    content: str | bytes | None,
    loaders: dict[str, object] | None,
    match: str,
) -> None:
    if content == "dir":
        (tmp_path / name).mkdir()
    elif content is not None:
        write(tmp_path, {name: content})
    kb = KnowledgeBase("docs", loaders=loaders)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=match):
        kb.add_file(tmp_path / name)
    assert kb.documents() == []


def test_bad_paths_are_refused(tmp_path: Path) -> None:
    kb = KnowledgeBase("docs")
    for call in (lambda: kb.add_file(""), lambda: kb.add_folder(3)):  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="`path` must be a non-empty str or Path"):
            call()
    with pytest.raises(ConfigError, match=r"`.*` is not a folder"):
        kb.add_folder(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="`pattern` must be a non-empty glob"):
        kb.add_folder(tmp_path, pattern="")
    with pytest.raises(ConfigError, match="is not a relative glob"):
        kb.add_folder(tmp_path, pattern="/etc/*")


def test_read_text_names_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read `.*`: .*check that it is a readable"):
        read_text(tmp_path)  # a folder: reading it fails


# --- folders -----------------------------------------------------------------------------------

TREE: dict[str, str | bytes] = {
    "deploy.md": DOCS["deploy.md"],
    "auth.markdown": DOCS["auth.md"],
    "billing.txt": DOCS["billing.txt"],
    "zh/backup.md": DOCS["backup.md"],
    "zh/cache.md": DOCS["cache.md"],
    "intro.rst": "Welcome\n=======\n\nThe reST intro explains widgets.\n",
    "scan.pdf": b"%PDF-1.7 binary",
    "old.txt": "caf\xe9".encode("latin-1"),
    ".git/config": "[core]",
    "notes/.draft.md": "# Draft",
    "empty.txt": "",
}


def test_a_folder_is_ingested_with_progress_and_skips(tmp_path: Path) -> None:
    write(tmp_path, TREE)
    seen: list[IngestProgress] = []
    kb = KnowledgeBase("docs", embedder=HashingEmbedder(256), loaders={".rst": read_rst})
    summary = kb.add_folder(tmp_path, progress=seen.append)
    chunks = [p for p in seen if p.kind == "chunks"]
    seen = [p for p in seen if p.kind == "file"]
    files = [
        "auth.markdown",
        "billing.txt",
        "deploy.md",
        "empty.txt",
        "intro.rst",
        "old.txt",
        "scan.pdf",
        "zh/backup.md",
        "zh/cache.md",
    ]
    assert [p.path for p in seen] == files  # hidden files and folders are left out
    assert [p.done for p in seen] == list(range(1, 10))
    assert {p.total for p in seen} == {9}
    assert {p.path: p.status for p in seen}["scan.pdf"] == "skipped"
    assert summary.added == tuple(f for f in files if f not in ("old.txt", "scan.pdf"))
    assert summary.updated == summary.unchanged == summary.deleted == ()
    assert [s.path for s in summary.skipped] == ["old.txt", "scan.pdf"]
    assert "is not UTF-8 text" in summary.skipped[0].reason
    assert "could not convert" in summary.skipped[1].reason  # a broken PDF
    assert summary.chunks == sum(d.chunks for d in kb.documents()) == 11
    # All 11 chunks fit in one batch of the embedder, embedded once every file is cut.
    assert [(p.chunks, p.chunks_total, p.path) for p in chunks] == [(11, 11, "zh/cache.md")]
    empty = next(d for d in kb.documents() if d.document_id == "empty.txt")
    assert (empty.chunks, empty.metadata["title"]) == (0, "empty")
    hits = kb.search_sync("数据库备份保留多少天？", limit=1)
    assert hits[0].document_id == "zh/backup.md"
    assert hits[0].metadata["source"] == str(tmp_path / "zh" / "backup.md")


def test_a_second_ingest_does_only_what_changed(tmp_path: Path) -> None:
    write(tmp_path, TREE)
    with SQLiteStore(tmp_path.parent / "kb.db") as store:
        kb = KnowledgeBase("docs", store, embedder=HashingEmbedder(256))
        kb.add_folder(tmp_path, pattern="**/*.md")
        again = KnowledgeBase("docs", store, embedder=HashingEmbedder(256))
        assert again.add_folder(tmp_path, pattern="**/*.md") == IngestSummary(
            unchanged=("deploy.md", "zh/backup.md", "zh/cache.md")
        )
        (tmp_path / "zh" / "cache.md").unlink()
        (tmp_path / "deploy.md").write_text("# Deployment\n\nWe deploy on Fridays now.")
        write(tmp_path, {"new.md": "# New\n\nA new page about onboarding."})
        summary = again.add_folder(tmp_path, pattern="**/*.md")
        assert summary == IngestSummary(
            added=("new.md",),
            updated=("deploy.md",),
            unchanged=("zh/backup.md",),
            deleted=("zh/cache.md",),
            chunks=2,
        )
        assert [d.document_id for d in again.documents()] == [
            "deploy.md",
            "new.md",
            "zh/backup.md",
        ]
        assert again.search_sync("Redis 缓存") == []
        assert again.search_sync("rollback previous tag") == []


def test_deleting_is_limited_to_the_folder_and_can_be_turned_off(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    write(one, {"a.md": "Alpha page."})
    write(two, {"b.md": "Beta page."})
    kb = KnowledgeBase("docs")
    kb.add_folder(one)
    kb.add_folder(two)
    kb.add_text("Gamma text.", document_id="gamma")
    (one / "a.md").unlink()
    (two / "b.md").unlink()
    assert kb.add_folder(two, delete_missing=False) == IngestSummary()
    assert kb.add_folder(two).deleted == ("b.md",)
    assert [d.document_id for d in kb.documents()] == ["a.md", "gamma"]


def test_a_failing_loader_skips_the_file_and_ingest_goes_on(tmp_path: Path) -> None:
    write(tmp_path, {"a.rst": "one", "b.md": "Beta page."})
    kb = KnowledgeBase("docs", loaders={".rst": _failing})
    summary = kb.add_folder(tmp_path)
    assert summary.added == ("b.md",)
    assert summary.skipped == (
        SkippedFile(
            path="a.rst",
            reason=f"the loader for '.rst' failed on `{tmp_path / 'a.rst'}`: "
            "RuntimeError('the converter crashed')",
        ),
    )


def test_large_folders_are_written_in_batches(tmp_path: Path) -> None:
    write(
        tmp_path, {f"page{i:03}.md": f"# Page {i}\n\nPage {i} covers item{i}." for i in range(150)}
    )
    seen: list[int] = []
    kb = KnowledgeBase("docs", embedder=HashingEmbedder(256))
    summary = kb.add_folder(
        tmp_path, progress=lambda p: seen.append(p.done) if p.kind == "file" else None
    )
    assert len(summary.added) == summary.chunks == 150
    assert seen == list(range(1, 151))
    assert [h.document_id for h in kb.search_sync("item149", limit=1)] == ["page149.md"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX paths")
def test_document_ids_are_posix_paths_relative_to_the_folder(tmp_path: Path) -> None:
    write(tmp_path, {"a/b/c.md": "Deep page."})
    kb = KnowledgeBase("docs")
    assert kb.add_folder(tmp_path).added == ("a/b/c.md",)

"""A folder ingest on a repository nobody checked: links that leave the folder are not
followed, link loops end, the walk is bounded, odd names and texts are refused cleanly."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from loomctx.errors import ConfigError, IngestLimitError
from loomctx.knowledge import (
    DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_FILES,
    DEFAULT_MAX_TOTAL_BYTES,
    KnowledgeBase,
    SkippedFile,
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX links and names")

SECRET = "The root password is hunter2."


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A cloned repository in `repo/`, next to files it must not reach."""
    write(tmp_path, {"outside/secret.md": SECRET, "outside/more/keys.md": SECRET})
    repo = tmp_path / "repo"
    write(repo, {"README.md": "# Readme\n\nHow to build the widget.", "docs/guide.md": "Guide."})
    return repo


def ids(kb: KnowledgeBase) -> list[str]:
    return [d.document_id for d in kb.documents()]


def test_links_out_of_the_folder_are_not_followed_and_are_reported(
    repo: Path, tmp_path: Path
) -> None:
    (repo / "leak.md").symlink_to(tmp_path / "outside" / "secret.md")
    (repo / "docs" / "absolute.md").symlink_to("/etc/passwd")
    (repo / "vendor").symlink_to(tmp_path / "outside")  # a folder
    (repo / "docs" / "up.md").symlink_to("../../outside/secret.md")  # relative, still out
    kb = KnowledgeBase("docs")
    summary = kb.add_folder(repo)
    assert ids(kb) == ["README.md", "docs/guide.md"]
    assert kb.search_sync("root password hunter2") == []
    assert [s.path for s in summary.skipped] == [
        "docs/absolute.md",
        "docs/up.md",
        "leak.md",
        "vendor/",
    ]
    leak = next(s for s in summary.skipped if s.path == "leak.md")
    assert leak.reason.startswith(
        f"a symbolic link to a file outside the folder (`{tmp_path / 'outside' / 'secret.md'}`): "
        "not followed"
    )
    assert "a symbolic link to a folder outside" in summary.skipped[-1].reason


def test_a_pattern_cannot_lead_out_of_the_folder(repo: Path) -> None:
    kb = KnowledgeBase("docs")
    with pytest.raises(ConfigError, match=r"'\.\.' would lead out of the folder"):
        kb.add_folder(repo, pattern="../outside/*.md")
    with pytest.raises(ConfigError, match="`pattern` must be a non-empty glob"):
        kb.add_folder(repo, pattern="./")
    assert ids(kb) == []


def test_links_inside_the_folder_are_followed_once(repo: Path) -> None:
    write(repo, {"deep/notes/n.md": "Notes.", ".hidden/h.md": "Behind a dot."})
    (repo / "alias.md").symlink_to("docs/guide.md")  # a file inside: ingested under its name
    (repo / "a-shortcut").symlink_to(repo / "deep" / "notes")  # walked by its real path only
    (repo / "visible").symlink_to(".hidden")  # the only way in: followed
    kb = KnowledgeBase("docs")
    summary = kb.add_folder(repo)
    assert ids(kb) == [
        "README.md",
        "alias.md",
        "deep/notes/n.md",
        "docs/guide.md",
        "visible/h.md",
    ]
    assert summary.skipped == ()


def test_link_loops_end(repo: Path) -> None:
    (repo / "docs" / "again").symlink_to(repo)  # a folder loop
    (repo / "docs" / "self").symlink_to(".")
    (repo / "a.md").symlink_to("b.md")  # a file loop: a -> b -> a
    (repo / "b.md").symlink_to("a.md")
    (repo / "gone.md").symlink_to("nowhere.md")
    kb = KnowledgeBase("docs")
    summary = kb.add_folder(repo)
    assert ids(kb) == ["README.md", "docs/guide.md"]
    assert [s.path for s in summary.skipped] == ["a.md", "b.md", "gone.md"]
    assert all("a symbolic link that leads nowhere" in s.reason for s in summary.skipped)


def test_too_many_files_stop_before_anything_is_written(tmp_path: Path) -> None:
    write(tmp_path, {f"p{i}.md": f"Page {i}." for i in range(5)})
    write(tmp_path, {f"blob{i}.bin": "no loader" for i in range(20)})
    kb = KnowledgeBase("docs")
    with pytest.raises(IngestLimitError) as caught:
        kb.add_folder(tmp_path, max_files=4)
    error = caught.value
    assert (error.limit, error.allowed, error.found) == ("max_files", 4, 5)
    assert str(error) == (
        f"`{tmp_path}` has more than 4 files to ingest (the `max_files` limit) matching "
        "'**/*'; ingest a narrower folder or `pattern`, or raise `max_files`"
    )
    assert ids(kb) == []
    summary = kb.add_folder(tmp_path, max_files=5)  # files without a loader do not count
    assert len(summary.added) == 5
    assert len(summary.skipped) == 20


def test_too_many_bytes_in_all_stop_before_anything_is_written(tmp_path: Path) -> None:
    write(tmp_path, {"a.md": "a" * 100, "b.md": "b" * 100, "c.md": "c" * 100})
    kb = KnowledgeBase("docs")
    with pytest.raises(IngestLimitError, match=r"more than 250 bytes \(the `max_total_bytes`"):
        kb.add_folder(tmp_path, max_total_bytes=250)
    assert ids(kb) == []
    assert len(kb.add_folder(tmp_path, max_total_bytes=300).added) == 3


def test_a_file_over_the_size_limit_is_skipped_with_the_reason(tmp_path: Path) -> None:
    write(tmp_path, {"small.md": "Small page.", "dump.txt": "x" * 2000})
    kb = KnowledgeBase("docs")
    summary = kb.add_folder(tmp_path, max_file_bytes=1000)
    assert summary.added == ("small.md",)
    assert summary.skipped == (
        SkippedFile(
            path="dump.txt",
            reason="2,000 bytes, more than `max_file_bytes` (1,000); raise `max_file_bytes` "
            "to ingest it",
            kind="too_large",
        ),
    )


@pytest.mark.parametrize("name", ["max_files", "max_file_bytes", "max_total_bytes"])
@pytest.mark.parametrize("value", [0, -1, 1.5, True, "10"])
def test_limits_are_checked(tmp_path: Path, name: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"`{name}` must be an int >= 1"):
        KnowledgeBase("docs").add_folder(tmp_path, **{name: value})  # type: ignore[arg-type]


def test_the_defaults_are_sensible() -> None:
    assert DEFAULT_MAX_FILES == 10_000
    assert DEFAULT_MAX_FILE_BYTES == 10 * 2**20
    assert DEFAULT_MAX_TOTAL_BYTES == 512 * 2**20


def test_a_name_that_is_not_utf8_is_skipped_not_a_crash(tmp_path: Path) -> None:
    write(tmp_path, {"ok.md": "Fine."})
    fd = os.open(os.fsencode(tmp_path) + b"/caf\xe9.md", os.O_CREAT | os.O_WRONLY)
    os.write(fd, b"Latin-1 name.")
    os.close(fd)
    kb = KnowledgeBase("docs")
    summary = kb.add_folder(tmp_path)
    assert summary.added == ("ok.md",)
    (skipped,) = summary.skipped
    assert skipped.path == "caf\ufffd.md"
    assert skipped.reason.startswith("its name is not valid UTF-8")


def test_pipes_are_not_read(tmp_path: Path) -> None:
    write(tmp_path, {"ok.md": "Fine."})
    os.mkfifo(tmp_path / "pipe.md")  # reading it would block forever
    assert KnowledgeBase("docs").add_folder(tmp_path).added == ("ok.md",)


def test_patterns_match_segment_by_segment(tmp_path: Path) -> None:
    write(
        tmp_path,
        {"a.md": "A.", "x/b.md": "B.", "x/y/c.md": "C.", "x/y/d.txt": "D.", "z/e.md": "E."},
    )
    cases = {
        "*.md": ["a.md"],
        "**/*.md": ["a.md", "x/b.md", "x/y/c.md", "z/e.md"],
        "x/**/*.md": ["x/b.md", "x/y/c.md"],
        "x/**": ["x/b.md", "x/y/c.md", "x/y/d.txt"],
        "./x/*/?.*": ["x/y/c.md", "x/y/d.txt"],
        "[xz]/*.md": ["x/b.md", "z/e.md"],
    }
    for pattern, expected in cases.items():
        kb = KnowledgeBase("docs")
        assert list(kb.add_folder(tmp_path, pattern=pattern).added) == expected, pattern


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any folder")
def test_an_unreadable_folder_is_skipped_with_the_reason(tmp_path: Path) -> None:
    write(tmp_path, {"ok.md": "Fine.", "locked/x.md": "Locked."})
    (tmp_path / "locked").chmod(0)
    try:
        summary = KnowledgeBase("docs").add_folder(tmp_path)
    finally:
        (tmp_path / "locked").chmod(0o755)
    assert summary.added == ("ok.md",)
    assert summary.skipped[0].path == "locked/"
    assert summary.skipped[0].reason.startswith("cannot read the folder")


# --- text that is not valid Unicode ---------------------------------------------------------


def _surrogates(path: Path) -> str:
    return path.read_bytes().decode("utf-8", "surrogateescape")


def test_a_loader_returning_surrogates_is_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "a.rst").write_bytes(b"caf\xe9")
    write(tmp_path, {"b.md": "Fine."})
    kb = KnowledgeBase("docs", loaders={".rst": _surrogates})
    with pytest.raises(ConfigError, match=r"the loader for '\.rst' returned for `.*a\.rst` holds"):
        kb.add_file(tmp_path / "a.rst")
    summary = kb.add_folder(tmp_path)
    assert summary.added == ("b.md",)
    assert summary.skipped[0].path == "a.rst"
    assert "surrogate code point '\\udce9' at position 3" in summary.skipped[0].reason


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda kb: kb.add_text("caf\udce9"), "`text` holds the surrogate code point"),
        (lambda kb: kb.add_text("ok", document_id="d\ud800"), "`document_id` holds"),
        (lambda kb: kb.add_text("ok", metadata={"k": "\udc80"}), "`metadata` holds"),
    ],
)
def test_add_text_refuses_surrogates(call: object, match: str) -> None:
    kb = KnowledgeBase("docs")
    with pytest.raises(ConfigError, match=match):
        call(kb)  # type: ignore[operator]
    assert ids(kb) == []

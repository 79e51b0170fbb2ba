"""Which files a folder ingest reads: the pattern, hidden files, links, and bounds.

`find_files` walks the folder itself rather than with `Path.glob`, because an ingest may run on
a repository nobody has checked (``loomctx ingest ./some-clone``), and the glob can neither
refuse links that leave the folder nor stop early:

- **Links stay inside.** A symbolic link (to a file or a folder) whose target lies outside the
  folder is not followed: otherwise a repository could make Loom ingest, and then serve to a
  model, ``~/.ssh/id_rsa`` or ``/etc/passwd``. Each such link is reported as a skipped file with
  its target. Links whose target is inside are followed. A folder is walked once: by its real
  path first, through links only if it was not reached otherwise, so link loops end.
- **Hidden files and folders** (a name starting with ``.``) are not entered at all, and neither
  is a folder inside which the pattern cannot match (``.git`` may hold many thousands of files).
- **Bounds.** Files larger than `max_file_bytes` are skipped with the reason: one generated dump
  should not stop a whole folder. More than `max_files` files to read, or more than
  `max_total_bytes` in all, raise `IngestLimitError` as soon as the walk finds them, before
  anything is read or written: that is a wrong folder (a home directory, ``node_modules``) more
  often than a big knowledge base, and a partial ingest would hide it. Only files a loader can
  read count; files without one are listed as skipped, as before.
- **Names** that are not valid UTF-8 (Python decodes them with surrogates) cannot be document ids
  and are skipped with the reason.

The pattern is a relative glob matched segment by segment, like `Path.glob`: ``*``, ``?`` and
``[...]`` within one name, ``**`` for any number of folders (``**/*.md``: Markdown at any depth).
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Final

from loomctx.errors import ConfigError, IngestLimitError, check_int
from loomctx.knowledge._loaders import Loader
from loomctx.knowledge._types import SkipKind, SkippedFile
from loomctx.messages import surrogate_at, valid_text

__all__ = [
    "DEFAULT_MAX_FILES",
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_TOTAL_BYTES",
    "FoundFiles",
    "find_files",
]

DEFAULT_MAX_FILES: Final = 10_000
"""At most this many files to read in one folder ingest (files without a loader do not count)."""
DEFAULT_MAX_FILE_BYTES: Final = 10 * 2**20
"""Files larger than this (10 MiB) are skipped, with the reason in the summary."""
DEFAULT_MAX_TOTAL_BYTES: Final = 512 * 2**20
"""At most this much (512 MiB) to read in one folder ingest."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FoundFiles:
    """What a walk found: the files to hand to the loaders, as ``(relative path, path)`` in
    order, their sizes, and what it left out, with why."""

    files: tuple[tuple[str, Path], ...]
    skipped: tuple[SkippedFile, ...]
    sizes: tuple[int, ...]  # the bytes of each of `files` (0 for one without a loader)


def _segments(pattern: object) -> tuple[str, ...]:
    if not isinstance(pattern, str) or not pattern:
        raise ConfigError(f"`pattern` must be a non-empty glob such as '**/*.md', got {pattern!r}")
    if PurePosixPath(pattern).is_absolute() or PureWindowsPath(pattern).is_absolute():
        raise ConfigError(
            f"`pattern` {pattern!r} is not a relative glob (such as '**/*.md'): it must name "
            "files inside the folder"
        )
    parts = tuple(p for p in pattern.replace("\\", "/").split("/") if p not in ("", "."))
    if ".." in parts:
        raise ConfigError(
            f"`pattern` {pattern!r} is not a relative glob (such as '**/*.md'): '..' would "
            "lead out of the folder; ingest the folder above instead"
        )
    if not parts:
        raise ConfigError(f"`pattern` must be a non-empty glob such as '**/*.md', got {pattern!r}")
    return parts


def _closure(states: set[int], pattern: Sequence[str]) -> frozenset[int]:
    """`states` (positions in `pattern`) with every position a run of ``**`` may skip to."""
    out = set(states)
    for state in states:
        while state < len(pattern) and pattern[state] == "**":
            state += 1
            out.add(state)
    return frozenset(out)


def _step(states: frozenset[int], name: str, pattern: Sequence[str]) -> frozenset[int]:
    """The positions in `pattern` after matching one more path segment, `name`."""
    after: set[int] = set()
    for state in states:
        if state == len(pattern):
            continue
        if pattern[state] == "**":
            after.add(state)  # `**` takes this segment and may take more
        elif fnmatch.fnmatch(name, pattern[state]):
            after.add(state + 1)
    return _closure(after, pattern)


def _inside(path: str, root: Path) -> bool:
    return Path(path).is_relative_to(root)


@dataclass(slots=True)
class _Walk:
    """The state of one walk: what was found so far and the running totals."""

    folder: Path
    pattern: tuple[str, ...]
    loaders: Mapping[str, Loader]
    max_files: int
    max_file_bytes: int
    max_total_bytes: int
    files: list[tuple[tuple[str, ...], Path, int]]
    skipped: list[SkippedFile]
    count: int = 0
    total: int = 0

    def could_hold_matches(self, states: frozenset[int]) -> bool:
        return any(s < len(self.pattern) for s in states)

    def matches(self, states: frozenset[int]) -> bool:
        return len(self.pattern) in states

    def skip(
        self, parts: tuple[str, ...], reason: str, kind: SkipKind, *, folder: bool = False
    ) -> None:
        path = valid_text("/".join(parts)) + ("/" if folder else "")
        self.skipped.append(SkippedFile(path=path, reason=reason, kind=kind))

    def add(self, parts: tuple[str, ...], path: Path, size: int) -> None:
        """Take a regular file the pattern matches, within the bounds."""
        rel = "/".join(parts)
        at = surrogate_at(rel)
        if at is not None:
            self.skip(
                parts,
                f"its name is not valid UTF-8 (an undecodable byte at position {at}), so it "
                "cannot be a document id; rename it",
                "bad_name",
            )
            return
        if path.suffix.lower() not in self.loaders:
            self.files.append((parts, path, 0))  # reported as skipped by the ingest, as before
            return
        if size > self.max_file_bytes:
            self.skip(
                parts,
                f"{size:,} bytes, more than `max_file_bytes` ({self.max_file_bytes:,}); raise "
                "`max_file_bytes` to ingest it",
                "too_large",
            )
            return
        self.count += 1
        self.total += size
        if self.count > self.max_files:
            raise IngestLimitError(
                f"`{self.folder}` has more than {self.max_files:,} files to ingest (the "
                f"`max_files` limit) matching {'/'.join(self.pattern)!r}; ingest a narrower "
                "folder or `pattern`, or raise `max_files`",
                limit="max_files",
                allowed=self.max_files,
                found=self.count,
            )
        if self.total > self.max_total_bytes:
            raise IngestLimitError(
                f"the files to ingest under `{self.folder}` add up to more than "
                f"{self.max_total_bytes:,} bytes (the `max_total_bytes` limit; "
                f"{self.total:,} bytes in the first {self.count:,} files); ingest a narrower "
                "folder or `pattern`, or raise `max_total_bytes`",
                limit="max_total_bytes",
                allowed=self.max_total_bytes,
                found=self.total,
            )
        self.files.append((parts, path, size))


def find_files(
    folder: Path,
    pattern: object,
    loaders: Mapping[str, Loader],
    *,
    max_files: int,
    max_file_bytes: int,
    max_total_bytes: int,
) -> FoundFiles:
    """The files under `folder` that match `pattern`, sorted by path, and those left out; see
    the module docstring. Raises `IngestLimitError` past `max_files` or `max_total_bytes`."""
    walk = _Walk(
        folder=folder,
        pattern=_segments(pattern),
        loaders=loaders,
        max_files=check_int(max_files, "`max_files`", minimum=1),
        max_file_bytes=check_int(max_file_bytes, "`max_file_bytes`", minimum=1),
        max_total_bytes=check_int(max_total_bytes, "`max_total_bytes`", minimum=1),
        files=[],
        skipped=[],
    )
    root = folder.resolve()
    start = _closure({0}, walk.pattern)
    seen = {_identity(folder)}
    # Real folders first; folders reached through a link wait until the real tree is walked,
    # so that a folder reachable both ways is ingested under its real path.
    stack: list[tuple[Path, tuple[str, ...], frozenset[int]]] = [(folder, (), start)]
    linked: list[tuple[tuple[str, ...], Path, frozenset[int]]] = []
    while stack or linked:
        if not stack:
            linked.sort(key=lambda item: item[0], reverse=True)
            parts, path, states = linked.pop()
            identity = _identity(path)
            if identity is not None and identity not in seen:
                seen.add(identity)
                stack.append((path, parts, states))
            continue
        here, parts, states = stack.pop()
        for entry in _entries(here, parts, walk):
            _visit(entry, parts, states, root, walk, stack, linked, seen)
    walk.files.sort(key=lambda item: item[0])
    walk.skipped.sort(key=lambda s: s.path)
    return FoundFiles(
        files=tuple(("/".join(parts), path) for parts, path, _ in walk.files),
        skipped=tuple(walk.skipped),
        sizes=tuple(size for _, _, size in walk.files),
    )


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _entries(here: Path, parts: tuple[str, ...], walk: _Walk) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(here) as entries:
            return sorted(entries, key=lambda e: e.name)
    except OSError as error:
        if parts:  # the folder itself was checked by the caller
            walk.skip(
                parts,
                f"cannot read the folder: {error.strerror or error}",
                "unreadable",
                folder=True,
            )
        return []


def _visit(
    entry: os.DirEntry[str],
    parent: tuple[str, ...],
    parent_states: frozenset[int],
    root: Path,
    walk: _Walk,
    stack: list[tuple[Path, tuple[str, ...], frozenset[int]]],
    linked: list[tuple[tuple[str, ...], Path, frozenset[int]]],
    seen: set[tuple[int, int] | None],
) -> None:
    """Place one folder entry: walk it, take it, report it, or pass over it."""
    if entry.name.startswith("."):
        return
    parts = (*parent, entry.name)
    states = _step(parent_states, entry.name, walk.pattern)
    deeper, here = walk.could_hold_matches(states), walk.matches(states)
    if not (deeper or here):
        return
    path = Path(entry.path)
    try:
        info = entry.stat()  # follows links
    except OSError:
        info = None
    if entry.is_symlink():
        if _placed_link(entry, parts, states, info, root, walk, linked):
            return
    elif info is not None and stat.S_ISDIR(info.st_mode):
        if deeper:
            identity = (info.st_dev, info.st_ino)
            if identity not in seen:
                seen.add(identity)
                stack.append((path, parts, states))
        return
    if info is None:
        if here:
            walk.skip(
                parts,
                "cannot read its details (`stat` failed); check its permissions",
                "unreadable",
            )
        return
    if here and stat.S_ISREG(info.st_mode):  # not a pipe, socket or device: reading may block
        walk.add(parts, path, info.st_size)


def _placed_link(
    entry: os.DirEntry[str],
    parts: tuple[str, ...],
    states: frozenset[int],
    info: os.stat_result | None,
    root: Path,
    walk: _Walk,
    linked: list[tuple[tuple[str, ...], Path, frozenset[int]]],
) -> bool:
    """Place a symbolic link (`info`: what it leads to, None if nothing): report it, or
    queue the folder it leads to. False for a link to a file inside the folder, which the
    caller takes like any file."""
    deeper, here = walk.could_hold_matches(states), walk.matches(states)
    target = os.path.realpath(entry.path)
    is_dir = info is not None and stat.S_ISDIR(info.st_mode)
    if info is None:
        if here:
            walk.skip(
                parts,
                f"a symbolic link that leads nowhere (`{target}`: missing, or a loop)",
                "link",
            )
        return True
    if not _inside(target, root):
        if (is_dir and deeper) or (not is_dir and here):
            kind = "a folder" if is_dir else "a file"
            walk.skip(
                parts,
                f"a symbolic link to {kind} outside the folder (`{target}`): not followed, "
                "so that a repository cannot make Loom read files elsewhere; copy the file "
                "into the folder to ingest it",
                "link",
                folder=is_dir,
            )
        return True
    if is_dir:
        if deeper:
            linked.append((parts, Path(entry.path), states))
        return True
    return False

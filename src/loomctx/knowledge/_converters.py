"""Loaders beyond plain text: reStructuredText and code built in, PDF, Word and HTML converted.

- **reStructuredText** (``.rst``) is read as text with its section titles (a line under- or
  over- and underlined with one punctuation character, levels in the order the document
  first uses each style, as reST defines them) turned into Markdown headings, so chunks carry
  their section path like Markdown's. Nothing else changes: reST reads well as it is.
- **Code** (`CODE_SUFFIXES`) is read as text and cut at its top-level blocks: a line at the
  left margin after a blank line starts one (a definition with its decorators and comments,
  in most languages), shown as a section titled by its first line, the code itself fenced
  so that a ``#`` comment is never read as a heading. A block longer than a chunk is cut at
  line breaks by the chunker.
- **PDF, Word, HTML** (`CONVERTED_SUFFIXES`) go through Microsoft's `markitdown`, in the
  `loaders` extra (``pip install 'loomctx[loaders]'``), which turns each into Markdown
  (headings, lists, tables). Chosen by measurement against docling and unstructured (the
  `loaders` extra in ``pyproject.toml`` says how): the only one of the three without
  PyTorch, and fast enough to be no bottleneck beside the embedder. Without the extra,
  these suffixes still have a loader, which raises `MissingExtraError` naming the extra.

Plain UTF-8 text is read here too (`read_text`), since every reader above starts from it.

Every converted text goes through the same chunker as Markdown, so the chunks' token limit
holds, counted on the text that is stored.
"""

from __future__ import annotations

import importlib
import re
import threading
from pathlib import Path
from typing import Any, Final

from loomctx.errors import ConfigError, MissingExtraError

__all__ = [
    "CODE_SUFFIXES",
    "CONVERTED_SUFFIXES",
    "code_to_markdown",
    "read_code",
    "read_converted",
    "read_rst",
    "read_text",
    "rst_to_markdown",
]

_CODE: Final = (
    ".py .pyi .js .mjs .cjs .jsx .ts .tsx .go .rs .java .kt .scala .c .h .cc .cpp .hpp .cs "
    ".rb .php .swift .sh .bash .sql .lua .r .jl .ex .exs .erl .hs .ml .dart .vue .svelte"
)
CODE_SUFFIXES: Final = frozenset(_CODE.split())
"""Suffixes read as code."""
CONVERTED_SUFFIXES: Final = frozenset({".pdf", ".docx", ".html", ".htm"})
"""Suffixes converted to Markdown by `markitdown` (the `loaders` extra)."""

_ADORNMENT: Final = re.compile(r"([!-/:-@\[-`{-~])\1+")  # one punctuation character, repeated
_LANGUAGE: Final = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".ts": "typescript",
    ".rs": "rust",
    ".rb": "ruby",
}
_TITLE_CHARS: Final = 80


def read_text(path: Path) -> str:
    """The file as UTF-8 text, or `ConfigError` naming it when it is unreadable or not UTF-8."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"`{path}` is not UTF-8 text (invalid byte at offset {error.start}); convert it to "
            f"UTF-8, or register a loader for {path.suffix or 'such'!r} files in `loaders`"
        ) from error
    except OSError as error:
        raise ConfigError(
            f"cannot read `{path}`: {error.strerror or error}; check that it is a readable file"
        ) from error


# --- reStructuredText ---------------------------------------------------------------------------


def _adornment(line: str) -> str | None:
    """The character of a section adornment line (``=====``), or None."""
    stripped = line.rstrip()
    return stripped[0] if stripped and _ADORNMENT.fullmatch(stripped) else None


def rst_to_markdown(text: str) -> str:
    """`text` with its reST section titles as Markdown headings (``#`` by level)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    styles: list[tuple[str, bool]] = []  # (character, overlined), in order of first use
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        over = _adornment(line)
        if (
            over is not None
            and i + 2 < len(lines)
            and lines[i + 1].strip()
            and _adornment(lines[i + 2]) == over
        ):
            title, style, i = lines[i + 1].strip(), (over, True), i + 3
        elif (
            line.strip()
            and not line[0].isspace()
            and over is None
            and i + 1 < len(lines)
            and (under := _adornment(lines[i + 1])) is not None
            and len(lines[i + 1].rstrip()) >= len(line.strip())
        ):
            title, style, i = line.strip(), (under, False), i + 2
        else:
            out.append(line)
            i += 1
            continue
        if style not in styles:
            styles.append(style)
        level = min(styles.index(style) + 1, 6)
        out.append(f"{'#' * level} {title}")
    return "\n".join(out)


def read_rst(path: Path) -> str:
    """A ``.rst`` file as Markdown-headed text (see `rst_to_markdown`)."""
    return rst_to_markdown(read_text(path))


# --- code ---------------------------------------------------------------------------------------


def code_to_markdown(code: str, suffix: str) -> str:
    """`code` as one fenced section per top-level block, titled by the block's first line."""
    lines = code.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    blocks: list[list[str]] = []
    blank = True
    for line in lines:
        starts = blank and line.strip() != "" and not line[0].isspace()
        if starts or not blocks:
            blocks.append([])
        blocks[-1].append(line)
        blank = not line.strip()
    language = _LANGUAGE.get(suffix, suffix.lstrip("."))
    parts: list[str] = []
    for block in blocks:
        body = "\n".join(block).strip("\n")
        if not body.strip():
            continue
        first = next(line.strip() for line in block if line.strip())
        title = first if len(first) <= _TITLE_CHARS else first[: _TITLE_CHARS - 3] + "..."
        ticks = max((len(run) for run in re.findall(r"`+", body)), default=0)
        fence = "`" * max(3, ticks + 1)
        parts.append(f"## {title}\n\n{fence}{language}\n{body}\n{fence}")
    return "\n\n".join(parts)


def read_code(path: Path) -> str:
    """A code file as Markdown, cut at its top-level blocks (see `code_to_markdown`)."""
    return code_to_markdown(read_text(path), path.suffix.lower())


# --- markitdown ---------------------------------------------------------------------------------

_CONVERTERS: Final = {
    ".pdf": "PdfConverter",
    ".docx": "DocxConverter",
    ".html": "HtmlConverter",
    ".htm": "HtmlConverter",
}
_made: dict[str, Any] = {}
_made_lock = threading.Lock()


def _converter(suffix: str) -> Any:
    """markitdown's converter for `suffix`, made once. The format's own converter is called,
    not `MarkItDown.convert`, which guesses the type from the bytes and falls back to reading
    a broken PDF as plain text: a file that cannot be converted is skipped, with the reason."""
    with _made_lock:
        if suffix not in _made:
            try:
                module = importlib.import_module("markitdown.converters")
            except ImportError as exc:
                raise MissingExtraError(
                    feature="Reading PDF, Word and HTML files",
                    extra="loaders",
                    module="markitdown",
                ) from exc
            _made[suffix] = getattr(module, _CONVERTERS[suffix])()
        return _made[suffix]


def read_converted(path: Path) -> str:
    """A PDF, Word (``.docx``) or HTML file as Markdown, by `markitdown`."""
    suffix = path.suffix.lower()
    converter = _converter(suffix)
    from markitdown import StreamInfo

    info = StreamInfo(extension=suffix, filename=path.name, local_path=str(path))
    try:
        with path.open("rb") as stream:
            result = converter.convert(stream, info)
    except OSError as error:
        raise ConfigError(
            f"cannot read `{path}`: {error.strerror or error}; check that it is a readable file"
        ) from error
    except Exception as error:
        raise ConfigError(
            f"could not convert `{path}` to text ({type(error).__name__}: {error}); check that "
            f"it is a valid {suffix} file"
        ) from error
    return str(result.markdown or "")

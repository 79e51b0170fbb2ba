"""Markdown-aware chunking: headings first, then paragraphs packed to a token limit, with overlap.

A document is cut in three steps:

1. Sections. An ATX heading (``#`` to ``######`` and a space, outside fenced code) starts a
   section, whose heading path (``("Guide", "Install")``) every chunk of it carries, shown as
   a one-line prefix ``Guide > Install`` so that lexical and dense search see the section
   title. Heading lines are not repeated in the body. Setext (underlined) headings are text.
2. Units. A paragraph (blank-line separated; a fenced code block stays whole) that fits in a
   chunk is one unit. A longer one is cut into sentences: after ``. ! ?`` and a space, after
   ``。！？；`` (Chinese needs no space), and at line breaks; a sentence still too long is cut
   on token boundaries (`TokenCounter.truncate`), at a space when one is near the end.
3. Packing. Units fill a chunk up to `chunk_tokens`, its prefix included. The next chunk of
   the same section first repeats up to `overlap_tokens` of the previous chunk's last whole
   sentences (never part of one, and at most half a chunk), so a passage across the boundary
   is found from either side.

A chunk is counted once more as a whole before it is kept (tokens can merge across the joins,
so a sum of parts is an estimate): no chunk's `search_text` exceeds `chunk_tokens`, and the
bodies of the chunks hold every non-whitespace character of the sections' text, once, in order.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from loomctx.errors import ConfigError
from loomctx.tokens import TokenCounter

__all__ = ["MIN_CHUNK_TOKENS", "Chunk", "check_chunk_sizes", "chunk_text", "iter_chunks"]

MIN_CHUNK_TOKENS: Final = 16
"""Room for a heading prefix (at most a quarter of a chunk) and a few words of body."""

_HEADING: Final = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*")
_CLOSING_HASHES: Final = re.compile(r"(?:^|[ \t]+)#+$")
_FENCE: Final = re.compile(r" {0,3}(`{3,}|~{3,})")
# Where a sentence ends: Western punctuation before a space, Chinese punctuation anywhere
# (with its closing quotes), or a line break.
_SENTENCE_END: Final = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s)|[。！？；]+[”’」』）]*|\n")
_PARAGRAPH: Final = "\n\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class Chunk:
    """One piece of a document.

    `headings` is the full heading path, `prefix` its one-line form (cut to a quarter of the
    chunk), `overlap` what is repeated from the previous chunk and `body` what is new here.
    `search_text` (prefix, overlap, body) is what is indexed and embedded; `text` (prefix and
    body) is what a search shows, so adjacent chunks shown together never repeat text.
    """

    headings: tuple[str, ...]
    prefix: str
    overlap: str
    body: str

    @property
    def search_text(self) -> str:
        """Prefix, overlap and body: what search indexes; at most `chunk_tokens`."""
        return _PARAGRAPH.join(part for part in (self.prefix, self.overlap, self.body) if part)

    @property
    def text(self) -> str:
        """Prefix and body: what a search hit shows."""
        return _PARAGRAPH.join(part for part in (self.prefix, self.body) if part)


@dataclass(frozen=True, slots=True)
class _Unit:
    """Text that is never cut further when packed; `sep` joins it to the unit before it."""

    text: str
    sep: str
    tokens: int


def check_chunk_sizes(chunk_tokens: int, overlap_tokens: int) -> None:
    """Raise `ConfigError` unless both are ints with ``0 <= overlap < chunk`` and the chunk
    at least `MIN_CHUNK_TOKENS`."""
    for name, value in (("chunk_tokens", chunk_tokens), ("overlap_tokens", overlap_tokens)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"`{name}` must be an int, got {value!r}")
    if chunk_tokens < MIN_CHUNK_TOKENS:
        raise ConfigError(
            f"`chunk_tokens` must be at least {MIN_CHUNK_TOKENS}, got {chunk_tokens!r}; "
            f"a few hundred tokens suits most documents"
        )
    if not 0 <= overlap_tokens < chunk_tokens:
        raise ConfigError(
            f"`overlap_tokens` must be >= 0 and smaller than `chunk_tokens` ({chunk_tokens}), "
            f"got {overlap_tokens!r}; about a sixth of the chunk is usual"
        )


def chunk_text(
    text: str, *, counter: TokenCounter, chunk_tokens: int = 400, overlap_tokens: int = 60
) -> list[Chunk]:
    """`text` (Markdown or plain) cut into chunks of at most `chunk_tokens` by `counter`,
    as the module docstring describes; ``[]`` for a text with no content."""
    return [
        chunk
        for chunk, _ in iter_chunks(
            text, counter=counter, chunk_tokens=chunk_tokens, overlap_tokens=overlap_tokens
        )
    ]


def iter_chunks(
    text: str, *, counter: TokenCounter, chunk_tokens: int = 400, overlap_tokens: int = 60
) -> Iterator[tuple[Chunk, float]]:
    """The chunks of `chunk_text`, one at a time, each with the share (0..1) of the text's
    paragraphs cut so far: a 28 MB file takes seconds to cut, and an ingest reports its
    progress (and estimates its total) as it goes."""
    check_chunk_sizes(chunk_tokens, overlap_tokens)
    sections = _sections(text.replace("\r\n", "\n").replace("\r", "\n"))
    total = sum(len(p) for _, paragraphs in sections for p in paragraphs) or 1
    done = 0
    for headings, paragraphs in sections:
        size = sum(len(p) for p in paragraphs)
        packer = _Packer(headings, counter, chunk_tokens, overlap_tokens)
        for chunk, share in packer.pack(paragraphs):
            yield chunk, (done + size * share) / total
        done += size


# --- sections and paragraphs -----------------------------------------------------------------


def _heading(line: str) -> tuple[int, str] | None:
    """The level and title of an ATX heading line, or None."""
    match = _HEADING.fullmatch(line)
    if match is None:
        return None
    title = _CLOSING_HASHES.sub("", match.group(2) or "").strip()
    return len(match.group(1)), title


def _sections(text: str) -> list[tuple[tuple[str, ...], list[str]]]:
    """(heading path, paragraphs) per section, in order; sections without text included."""
    sections: list[tuple[tuple[str, ...], list[str]]] = [((), [])]
    stack: list[tuple[int, str]] = []
    lines: list[str] = []
    fence: str | None = None  # the opening fence while inside fenced code

    def end_paragraph() -> None:
        if lines:
            sections[-1][1].append("\n".join(lines).rstrip())
            lines.clear()

    for line in text.split("\n"):
        if fence is not None:
            lines.append(line)
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                fence = None
            continue
        opening = _FENCE.match(line)
        heading = None if opening else _heading(line)
        if opening is not None:
            fence = opening.group(1)
            lines.append(line)
        elif heading is not None:
            end_paragraph()
            level, title = heading
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            sections.append((tuple(t for _, t in stack if t), []))
        elif line.strip():
            lines.append(line)
        else:
            end_paragraph()
    end_paragraph()
    return sections


def _sentences(text: str) -> list[tuple[str, str]]:
    """(sentence, separator before it) for the sentences of `text`, stripped; the first
    separator is ``""``."""
    out: list[tuple[str, str]] = []
    start = end = 0
    cuts = [m.end() for m in _SENTENCE_END.finditer(text)]
    for cut in [*cuts, len(text)]:
        piece = text[start:cut]
        core = piece.strip()
        if core:
            core_start = start + len(piece) - len(piece.lstrip())
            out.append((core, _gap(text[end:core_start]) if out else ""))
            end = core_start + len(core)
        start = cut
    return out


def _gap(whitespace: str) -> str:
    """How two pieces that were apart by `whitespace` are joined again."""
    if "\n" in whitespace:
        return "\n"
    return " " if whitespace else ""


def _hard_split(text: str, budget: int, counter: TokenCounter) -> list[tuple[str, str]]:
    """(piece, separator before it): `text` cut on token boundaries into pieces of at most
    `budget` tokens, at a space when one is in the second half of a piece."""
    out: list[tuple[str, str]] = []
    rest, sep = text.strip(), ""
    while rest:
        # Truncating a window, not the whole rest, keeps a huge unbroken text linear.
        window = max(64, budget * 8)
        piece = counter.truncate(rest[:window], budget)
        while piece == rest[:window] and window < len(rest):
            window *= 4
            piece = counter.truncate(rest[:window], budget)
        if not piece:
            piece = rest[0]  # one code point: a few tokens at most, always progress
        elif len(piece) < len(rest):
            cut = max(piece.rfind(" "), piece.rfind("\n"))
            if cut > len(piece) // 2:
                piece = piece[:cut]
        core = piece.rstrip()
        tail = rest[len(core) :]
        rest = tail.lstrip()
        out.append((core, sep))
        sep = _gap(tail[: len(tail) - len(rest)])
    return out


# --- packing ---------------------------------------------------------------------------------


class _Packer:
    """Packs the paragraphs of one section into chunks."""

    def __init__(
        self, headings: tuple[str, ...], counter: TokenCounter, limit: int, overlap: int
    ) -> None:
        prefix = " > ".join(headings)
        if counter.count(prefix) > limit // 4:
            prefix = counter.truncate(prefix, limit // 4).rstrip()
        self.headings = headings
        self.prefix = prefix
        self.counter = counter
        self.limit = limit
        # A join costs about one token; the prefix is joined to the rest by one.
        self.budget = limit - (counter.count(prefix) + 1 if prefix else 0)
        self.overlap_budget = min(overlap, self.budget // 2)

    def pack(self, paragraphs: list[str]) -> Iterator[tuple[Chunk, float]]:
        """The chunks, each with the share of the section's units packed so far."""
        pending = deque(u for p in paragraphs for u in self._units(p))
        units = len(pending) or 1
        carry: list[_Unit] = []
        while pending:
            body = self._fill(pending, carry)
            chunk = self._chunk(carry, body)
            while self.counter.count(chunk.search_text) > self.limit:
                carry, body = self._shrink(carry, body, pending, chunk)
                chunk = self._chunk(carry, body)
            yield chunk, max(0.0, 1 - len(pending) / units)
            carry = self._overlap(body)

    def _fill(self, pending: deque[_Unit], carry: list[_Unit]) -> list[_Unit]:
        """Take units from `pending` while they fit after `carry` (dropping the oldest of
        `carry`, in place, if even the first does not fit)."""
        body: list[_Unit] = []
        used = _cost(carry)
        while pending:
            unit = pending[0]
            if not body:
                while carry and used + 1 + unit.tokens > self.budget:
                    del carry[0]
                    used = _cost(carry)
            add = unit.tokens + (1 if body or carry else 0)
            if body and used + add > self.budget:
                break
            body.append(pending.popleft())
            used += add
        return body

    def _shrink(
        self, carry: list[_Unit], body: list[_Unit], pending: deque[_Unit], chunk: Chunk
    ) -> tuple[list[_Unit], list[_Unit]]:
        """A smaller chunk when the exact count is over the estimate: less overlap, else one
        unit less (back to `pending`), else the one unit cut shorter."""
        if carry:
            return carry[1:], body
        if len(body) > 1:
            pending.appendleft(body[-1])
            return carry, body[:-1]
        unit = body[0]
        excess = self.counter.count(chunk.search_text) - self.limit
        pieces = _hard_split(unit.text, max(1, unit.tokens - excess), self.counter)
        units = [
            _Unit(text, unit.sep if i == 0 else sep, self.counter.count(text))
            for i, (text, sep) in enumerate(pieces)
        ]
        pending.extendleft(reversed(units[1:]))
        return carry, units[:1]

    def _units(self, paragraph: str) -> list[_Unit]:
        tokens = self.counter.count(paragraph)
        if tokens <= self.budget:
            return [_Unit(paragraph, _PARAGRAPH, tokens)]
        out: list[_Unit] = []
        for sentence, sep in _sentences(paragraph):
            join = sep if out else _PARAGRAPH
            tokens = self.counter.count(sentence)
            if tokens <= self.budget:
                out.append(_Unit(sentence, join, tokens))
                continue
            for i, (piece, piece_sep) in enumerate(
                _hard_split(sentence, self.budget, self.counter)
            ):
                out.append(_Unit(piece, join if i == 0 else piece_sep, self.counter.count(piece)))
        return out

    def _overlap(self, body: list[_Unit]) -> list[_Unit]:
        """The last whole sentences of `body` that fit in the overlap budget."""
        taken: list[_Unit] = []
        used = 0
        for unit in reversed(body):
            if used + 1 + unit.tokens <= self.overlap_budget:
                parts = [unit]
            else:
                sentences = _sentences(unit.text)
                parts = [
                    _Unit(text, unit.sep if i == 0 else sep, self.counter.count(text))
                    for i, (text, sep) in enumerate(sentences)
                ]
            for part in reversed(parts):
                add = part.tokens + (1 if taken else 0)
                if used + add > self.overlap_budget:
                    return self._trim(taken)
                taken.insert(0, part)
                used += add
        return self._trim(taken)

    def _trim(self, carry: list[_Unit]) -> list[_Unit]:
        """`carry` without its oldest units while, counted whole, it is over budget."""
        while carry and self.counter.count(_join(carry)) > self.overlap_budget:
            carry = carry[1:]
        return carry

    def _chunk(self, carry: list[_Unit], body: list[_Unit]) -> Chunk:
        return Chunk(
            headings=self.headings, prefix=self.prefix, overlap=_join(carry), body=_join(body)
        )


def _cost(units: list[_Unit]) -> int:
    """The estimated tokens of `units` joined: their own, plus one per join."""
    return sum(u.tokens for u in units) + max(0, len(units) - 1)


def _join(units: list[_Unit]) -> str:
    return "".join((u.sep if i else "") + u.text for i, u in enumerate(units))

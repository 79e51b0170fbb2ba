"""What images, audio and PDFs cost, by the providers' published rules, read from their data.

`loomctx.parts` holds the parts themselves and re-exports the public names here; this module
knows the rules and the file headers they need, and nothing about messages.

- OpenAI, ``detail: "low"``: 85 tokens. ``"high"`` or ``"auto"``: the image is scaled to fit
  2048 x 2048, then so that its shortest side is at most 768 px; it costs 170 tokens per
  512-px tile it covers, plus 85.
- Anthropic: about ``width * height / 750`` tokens, after the image is scaled to a long edge
  of at most 1568 px and at most about 1.15 megapixels (so at most 1600 tokens).

The size is read from the header of base64 data (PNG, JPEG, GIF, WebP). An image whose size
is not known (a URL, or a format not read) costs the most its rule allows: 1445 tokens for
OpenAI's high detail (a 768 x 2048 image, 8 tiles), 85 for low, 1600 for Anthropic. A PDF
costs `PDF_PAGE_TOKENS` per page (`pdf_pages` counts them in its data; one page when it is
not known).

Audio is billed by OpenAI in audio tokens by duration (`AUDIO_TOKENS_PER_SECOND` a second).
`audio_seconds` reads the duration from a WAV header (its data size over its byte rate), or
from an MP3's first frame header (its bit rate, over the data's size); audio whose duration
cannot be read is taken at `AUDIO_FALLBACK_BYTES_PER_SECOND` (8 kB/s: 64 kbit/s, lower than
most recordings use, so the estimate errs high).
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
from typing import Final

__all__ = [
    "AUDIO_FALLBACK_BYTES_PER_SECOND",
    "AUDIO_TOKENS_PER_SECOND",
    "PDF_PAGE_TOKENS",
    "anthropic_image_tokens",
    "audio_seconds",
    "image_size",
    "openai_image_tokens",
    "pdf_pages",
]

PDF_PAGE_TOKENS: Final = 3000
"""What one PDF page is counted as: Anthropic bills 1,500 to 3,000 tokens a page (its text,
plus the page as an image); the upper end keeps a budget on the safe side."""

AUDIO_TOKENS_PER_SECOND: Final = 10
"""What a second of input audio is counted as (OpenAI: one audio token per 100 ms)."""

AUDIO_FALLBACK_BYTES_PER_SECOND: Final = 8000
"""The data rate assumed for audio whose duration cannot be read (64 kbit/s)."""


# --- image sizes ----------------------------------------------------------------------------

_JPEG_SCAN: Final = 1_400_000  # base64 characters: about 1 MB


def _jpeg_size(raw: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 < len(raw):
        if raw[i] != 0xFF:
            return None
        marker = raw[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # start of frame
            height, width = struct.unpack(">HH", raw[i + 5 : i + 9])
            return width, height
        i += 2 + struct.unpack(">H", raw[i + 2 : i + 4])[0]
    return None


def _webp_size(raw: bytes) -> tuple[int, int] | None:
    chunk = raw[12:16]
    if chunk == b"VP8 " and len(raw) >= 30:
        w, h = struct.unpack("<HH", raw[26:30])
        return w & 0x3FFF, h & 0x3FFF
    if chunk == b"VP8L" and len(raw) >= 25:
        b = raw[21:25]
        w = 1 + (((b[1] & 0x3F) << 8) | b[0])
        h = 1 + (((b[3] & 0x0F) << 10) | (b[2] << 2) | ((b[1] & 0xC0) >> 6))
        return w, h
    if chunk == b"VP8X" and len(raw) >= 30:
        w = 1 + int.from_bytes(raw[24:27], "little")
        h = 1 + int.from_bytes(raw[27:30], "little")
        return w, h
    return None


def _header_size(raw: bytes) -> tuple[int, int] | None:
    if raw.startswith(b"\x89PNG\r\n\x1a\n") and len(raw) >= 24:
        w, h = struct.unpack(">II", raw[16:24])
        return w, h
    if raw[:6] in (b"GIF87a", b"GIF89a") and len(raw) >= 10:
        w, h = struct.unpack("<HH", raw[6:10])
        return w, h
    if raw.startswith(b"RIFF") and raw[8:12] == b"WEBP":
        return _webp_size(raw)
    if raw.startswith(b"\xff\xd8"):
        return _jpeg_size(raw)
    return None


_SPACES: Final = (" ", "\n", "\r", "\t")


def _decoded(data: str, chars: int | None = None) -> bytes:
    """The bytes of base64 `data` (its first `chars` characters only, if given); b"" when it
    is not base64. Characters outside the alphabet (line breaks) are skipped."""
    if chars is not None:
        data = data[: chars + 256]
        if any(space in data for space in _SPACES):  # rare: line-wrapped base64
            data = re.sub(r"\s+", "", data)
        data = data[: min(chars, len(data) - len(data) % 4)]
    try:
        return base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError):
        return b""


def image_size(data: str) -> tuple[int, int] | None:
    """(width, height) of a base64 PNG, JPEG, GIF or WebP image, from its header; None for
    another format or data that cannot be read. Only the first bytes are decoded; a JPEG's
    frame header may follow its metadata, so up to its first 1 MB."""
    size = _header_size(_decoded(data, 4096))
    if size is None and data.lstrip()[:4] == "/9j/":  # JPEG: the frame may follow EXIF
        size = _jpeg_size(_decoded(data, _JPEG_SCAN))
    if size is None or size[0] <= 0 or size[1] <= 0:
        return None
    return size


# --- token rules ----------------------------------------------------------------------------

_OPENAI_LOW: Final = 85
_OPENAI_TILE: Final = 170
_ANTHROPIC_MAX: Final = 1600


def openai_image_tokens(size: tuple[int, int] | None, detail: str | None = None) -> int:
    """OpenAI's published cost of an image of `size` (None: unknown, the most the rule
    allows) at `detail` (None means ``auto``)."""
    if detail == "low":
        return _OPENAI_LOW
    if size is None:
        return _OPENAI_TILE * 8 + _OPENAI_LOW  # 768 x 2048: 2 x 4 tiles
    w, h = float(size[0]), float(size[1])
    if max(w, h) > 2048:
        scale = 2048 / max(w, h)
        w, h = w * scale, h * scale
    if min(w, h) > 768:
        scale = 768 / min(w, h)
        w, h = w * scale, h * scale
    tiles = math.ceil(round(w, 6) / 512) * math.ceil(round(h, 6) / 512)
    return _OPENAI_TILE * tiles + _OPENAI_LOW


def anthropic_image_tokens(size: tuple[int, int] | None) -> int:
    """Anthropic's published cost of an image of `size` (None: unknown, the most the rule
    allows): ``width * height / 750`` after its resize (long edge <= 1568 px, ~1.15 MP)."""
    if size is None:
        return _ANTHROPIC_MAX
    w, h = float(size[0]), float(size[1])
    if max(w, h) > 1568:
        scale = 1568 / max(w, h)
        w, h = w * scale, h * scale
    return min(_ANTHROPIC_MAX, math.ceil(w * h / 750))


# --- audio and PDFs -------------------------------------------------------------------------


_MP3_BITRATES: Final = (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320)


def _wav_seconds(raw: bytes, size: int) -> float | None:
    """A WAV's duration: its ``data`` chunk's size (or the rest of the file) over the byte
    rate of its ``fmt `` chunk."""
    if not (raw.startswith(b"RIFF") and raw[8:12] == b"WAVE"):
        return None
    i, rate = 12, 0
    while i + 8 <= len(raw):
        chunk, length = raw[i : i + 4], struct.unpack("<I", raw[i + 4 : i + 8])[0]
        if chunk == b"fmt " and i + 20 <= len(raw):
            rate = struct.unpack("<I", raw[i + 16 : i + 20])[0]
        elif chunk == b"data":
            return min(length, size - i - 8) / rate if rate else None
        i += 8 + length + (length & 1)
    return None


def _mp3_seconds(raw: bytes, size: int) -> float | None:
    """An MP3's duration at the bit rate of its first frame (an ID3 tag skipped)."""
    start = 0
    if raw.startswith(b"ID3") and len(raw) >= 10:
        start = 10 + ((raw[6] << 21) | (raw[7] << 14) | (raw[8] << 7) | raw[9])
    head = raw[start : start + 4]
    if len(head) < 4 or head[0] != 0xFF or head[1] & 0xE0 != 0xE0:
        return None
    index = head[2] >> 4
    if (head[1] >> 3) & 3 != 3 or not 0 < index < len(_MP3_BITRATES):  # MPEG-1 table
        return None
    return (size - start) * 8 / (_MP3_BITRATES[index] * 1000)


def audio_seconds(data: str, fmt: str) -> float:
    """The duration of base64 audio `data` in `fmt` (``wav`` or ``mp3``), read from its
    header, else estimated at `AUDIO_FALLBACK_BYTES_PER_SECOND`."""
    size = len(data.strip()) * 3 // 4  # decoded bytes, near enough
    raw = _decoded(data, 65_536)
    seconds = _wav_seconds(raw, size) if fmt == "wav" else _mp3_seconds(raw, size)
    if seconds is None or seconds <= 0:
        return size / AUDIO_FALLBACK_BYTES_PER_SECOND
    return seconds


_PAGE_COUNT = re.compile(rb"/Type\s*/Pages\b[^>]{0,200}?/Count\s+(\d{1,6})")


def pdf_pages(data: str) -> int:
    """Pages of a base64 PDF: its page objects, or its page tree's `/Count` when larger
    (page objects may sit in compressed streams); 1 when neither is readable."""
    raw = _decoded(data)
    if not raw.startswith(b"%PDF"):
        return 1
    objects = sum(raw.count(b"/Type" + sep + b"/Page") for sep in (b"", b" ", b"\n", b"\r"))
    objects -= sum(raw.count(b"/Type" + sep + b"/Pages") for sep in (b"", b" ", b"\n", b"\r"))
    counts = [
        int(n) for n in _PAGE_COUNT.findall(raw[:65_536]) + _PAGE_COUNT.findall(raw[-65_536:])
    ]
    return max(1, objects, *counts)

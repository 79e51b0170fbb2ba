"""Content parts beyond text: images and files inside a message, their wire forms and costs.

A `Message` (`loomctx.messages`) holds its text in `content`. A user message may also hold
`parts`: its whole content in order, `TextPart`, `ImagePart`, `FilePart` and `AudioPart`
values, so that a screenshot, a document or a recording travels with the words around it; a
tool result may hold text, images and files (a screenshot a tool took). `content` is then the
text of its text parts, which is what search, memory and most code read.

Wire forms (`part_from_openai`, `part_to_openai`, `part_from_anthropic`, `part_to_anthropic`):

- OpenAI chat completions: ``image_url`` (``{"url", "detail"}``; a ``data:`` URL carries
  base64 data and its media type), ``file`` (``{"file_data", "file_id", "filename"}``) and
  ``input_audio`` (``{"data", "format"}``); the Responses API's ``input_text``,
  ``input_image`` and ``input_file`` are read too.
- Anthropic: ``image`` and ``document`` blocks with a ``base64``, ``url``, ``text`` or
  ``file`` source (a document's ``title`` is kept as its file name). Anthropic's API takes no
  audio: `part_to_anthropic` refuses an `AudioPart`.

**What a part costs** (`part_tokens`): an image, audio or a PDF by its provider's published
rules (`loomctx._media_tokens` states them: OpenAI's tiles, Anthropic's ``width * height /
750``, the most a rule allows when the size is not known, `PDF_PAGE_TOKENS` a page), a text
document what its text costs.

Audio (`audio_tokens`) is billed by OpenAI in audio tokens by duration: the estimate is
`AUDIO_TOKENS_PER_SECOND` (10: one token per 100 ms, OpenAI's published rate for user audio)
per second, rounded up. The duration is read from a WAV header (its data size over its byte
rate), or from an MP3's first frame header (its bit rate, over the data's size); audio whose
duration cannot be read is taken at `AUDIO_FALLBACK_BYTES_PER_SECOND` (8 kB/s: 64 kbit/s,
lower than most recordings use, so the estimate errs high).
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from loomctx._media_tokens import (
    AUDIO_FALLBACK_BYTES_PER_SECOND,
    AUDIO_TOKENS_PER_SECOND,
    PDF_PAGE_TOKENS,
    anthropic_image_tokens,
    audio_seconds,
    image_size,
    openai_image_tokens,
    pdf_pages,
)
from loomctx.errors import MessageFormatError

__all__ = [
    "ANTHROPIC",
    "AUDIO_FALLBACK_BYTES_PER_SECOND",
    "AUDIO_TOKENS_PER_SECOND",
    "OPENAI",
    "PDF_PAGE_TOKENS",
    "AudioPart",
    "FilePart",
    "ImagePart",
    "ImageRule",
    "Part",
    "TextPart",
    "anthropic_image_tokens",
    "audio_seconds",
    "audio_tokens",
    "fewer_parts",
    "image_size",
    "openai_image_tokens",
    "part_from_anthropic",
    "part_from_openai",
    "part_to_anthropic",
    "part_to_openai",
    "part_tokens",
    "settle_parts",
    "stand_in",
]

Detail = Literal["auto", "low", "high"]
_DETAILS: Final = ("auto", "low", "high")

ImageRule = Literal["openai", "anthropic"]
OPENAI: Final = "openai"
ANTHROPIC: Final = "anthropic"


@dataclass(frozen=True, slots=True, kw_only=True)
class TextPart:
    """Text, in its place among the other parts."""

    text: str


def _check_source(kind: str, sources: dict[str, str | None]) -> None:
    given = [k for k, v in sources.items() if v is not None]
    if len(given) != 1:
        names = ", ".join(f"`{k}`" for k in sources)
        raise MessageFormatError(
            f"an {kind} part needs exactly one of {names}, got "
            f"{', '.join(f'`{k}`' for k in given) or 'none'}"
        )
    for name in given:
        value = sources[name]
        if not isinstance(value, str) or not value:
            raise MessageFormatError(
                f"the `{name}` of an {kind} part must be a non-empty string, got {value!r:.60}"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class ImagePart:
    """An image: a `url`, or base64 `data` with its `media_type` (``image/png``, ...).

    `detail` is OpenAI's (``auto``, ``low``, ``high``; None when the client sent none).
    `size` is (width, height) in pixels, read once from the data's header (None when not
    known): a window build counts an image many times.
    """

    url: str | None = None
    data: str | None = None
    media_type: str | None = None
    detail: Detail | None = None
    size: tuple[int, int] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_source("image", {"url": self.url, "data": self.data})
        if self.data is not None and not self.media_type:
            raise MessageFormatError(
                "an image part with base64 `data` needs its `media_type` (such as `image/png`)"
            )
        if self.detail is not None and self.detail not in _DETAILS:
            raise MessageFormatError(
                f"an image's `detail` must be `auto`, `low` or `high`, got {self.detail!r:.40}"
            )
        if self.data is not None:
            object.__setattr__(self, "size", image_size(self.data))


@dataclass(frozen=True, slots=True, kw_only=True)
class FilePart:
    """A file (a PDF, a text document): base64 `data`, plain `text`, a `url` or a provider's
    `file_id`, with its `media_type` and `filename` when known."""

    data: str | None = None
    text: str | None = None
    url: str | None = None
    file_id: str | None = None
    media_type: str | None = None
    filename: str | None = None
    _pages: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_source(
            "file", {"data": self.data, "text": self.text, "url": self.url, "file_id": self.file_id}
        )

    @property
    def pages(self) -> int:
        """How many pages a PDF's data holds (1 when not known), read on first use and kept:
        a window build counts a file many times, and reading a large one takes a while."""
        if not self._pages:
            object.__setattr__(self, "_pages", 1 if self.data is None else pdf_pages(self.data))
        return self._pages


@dataclass(frozen=True, slots=True, kw_only=True)
class AudioPart:
    """A recording: base64 `data` in `format` (``wav`` or ``mp3``, as OpenAI's
    ``input_audio`` takes them). `seconds` is its duration, read once from the data (an
    estimate when it cannot be read: `audio_seconds`)."""

    data: str
    format: str
    seconds: float = field(default=0.0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.data, str) or not self.data:
            raise MessageFormatError(
                f"an audio part needs its base64 `data`, got {self.data!r:.60}"
            )
        if self.format not in _AUDIO_FORMATS:
            raise MessageFormatError(
                f"an audio part's `format` must be `wav` or `mp3`, got {self.format!r:.40}"
            )
        object.__setattr__(self, "seconds", audio_seconds(self.data, self.format))


_AUDIO_FORMATS: Final = ("wav", "mp3")

Part = TextPart | ImagePart | FilePart | AudioPart


def settle_parts(role: str, content: Any, parts: Any) -> tuple[Any, tuple[Part, ...]]:
    """A message's checked `(content, parts)` from what it was given: `content` becomes the
    text of the text parts (or, given beside parts without text, their first part); parts
    that are all text fold into `content`; only a user message may hold other parts, and a
    tool result images and files."""
    parts = tuple(parts)
    for part in parts:
        if not isinstance(part, TextPart | ImagePart | FilePart | AudioPart):
            raise MessageFormatError(
                f"`parts` must hold `TextPart`, `ImagePart`, `FilePart` or `AudioPart` values, "
                f"got {type(part).__name__}"
            )
    texts = [p.text for p in parts if isinstance(p, TextPart)]
    if len(texts) == len(parts):
        parts = ()  # text only: `content` says it all
    elif role == "tool" and any(isinstance(p, AudioPart) for p in parts):
        raise MessageFormatError(
            "a `tool` result cannot carry audio (no provider takes it there); describe it in "
            "text, or send it in a user message"
        )
    elif role not in ("user", "tool"):
        raise MessageFormatError(
            f"a `{role}` message cannot carry images or files; only `user` messages and "
            "`tool` results do"
        )
    if not texts:
        if isinstance(content, str) and content and parts:
            parts = (TextPart(text=content), *parts)
        return content, parts
    if content and content != "".join(texts):
        raise MessageFormatError(
            "`content` and the text of `parts` differ; give the text in one of them"
        )
    return "".join(texts), parts


def audio_tokens(part: AudioPart) -> int:
    """What `part` is counted as: `AUDIO_TOKENS_PER_SECOND` per second, rounded up."""
    return max(1, math.ceil(round(part.seconds * AUDIO_TOKENS_PER_SECOND, 6)))


def part_tokens(part: Part, rule: ImageRule, count: Callable[[str], int]) -> int:
    """What `part` costs under `rule` (``openai`` or ``anthropic``); `count` counts text."""
    if isinstance(part, TextPart):
        return count(part.text)
    if isinstance(part, ImagePart):
        if rule == ANTHROPIC:
            return anthropic_image_tokens(part.size)
        return openai_image_tokens(part.size, part.detail)
    if isinstance(part, AudioPart):
        return audio_tokens(part)
    if part.text is not None:
        return count(part.text)
    return PDF_PAGE_TOKENS * part.pages


def stand_in(part: Part) -> str:
    """The text that stands for `part` where only text is kept (memory, search): the text
    itself, or a label such as ``[image: image/png 800x600]``."""
    if isinstance(part, TextPart):
        return part.text
    if isinstance(part, ImagePart):
        size = part.size
        facts = [part.media_type or "", f"{size[0]}x{size[1]}" if size else ""]
        if part.url is not None and not part.url.startswith("data:"):
            facts.append(part.url[:200])
        return "[image: " + " ".join(f for f in facts if f).strip() + "]"
    if isinstance(part, AudioPart):
        return f"[audio: {part.format} {part.seconds:.1f} s]"
    facts = [part.filename or "", part.media_type or ""]
    return "[file: " + (" ".join(f for f in facts if f) or "attached") + "]"


def fewer_parts(messages: Sequence[Any]) -> str:
    """A hint to add to "shorten the messages" when `messages` (`Message` values) hold images
    or files, which count by the providers' rules: "" when they hold none."""
    held = sum(not isinstance(p, TextPart) for m in messages for p in m.parts)
    if not held:
        return ""
    return (
        f", or send fewer or smaller images and files (it holds {held}; an image with "
        '`detail: "low"` costs an OpenAI model 85 tokens)'
    )


# --- wire forms -----------------------------------------------------------------------------

_DATA_URL = re.compile(r"data:([\w.+-]+/[\w.+-]+)?(?:;[^,;]*)*;base64,", re.ASCII)


def _split_data_url(url: str) -> tuple[str | None, str | None]:
    """(media type, base64 data) of a base64 ``data:`` URL, else (None, None)."""
    found = _DATA_URL.match(url)
    if found is None:
        return None, None
    return found.group(1) or "application/octet-stream", url[found.end() :]


def _field(raw: Mapping[str, Any], key: str, what: str) -> Any:
    value = raw.get(key)
    if value is not None and not isinstance(value, str):
        raise MessageFormatError(f"{what} `{key}` must be a string, got {type(value).__name__}")
    return value


def _image_from_url(url: Any, detail: Any) -> ImagePart:
    if not isinstance(url, str) or not url:
        raise MessageFormatError(
            f"an image part needs its `url` (an https URL or a base64 data URL), got {url!r:.60}"
        )
    media_type, data = _split_data_url(url)
    if data is not None:
        return ImagePart(data=data, media_type=media_type, detail=detail)
    if not url.startswith(("https://", "http://")):
        raise MessageFormatError(
            f"an image's `url` must be an http(s) URL or a base64 data URL "
            f"(`data:image/png;base64,...`), got {url!r:.60}"
        )
    return ImagePart(url=url, detail=detail)


def part_from_openai(j: int, raw: Mapping[str, Any]) -> Part:
    """An OpenAI content part (chat completions or Responses input) as a `Part`."""
    kind = raw.get("type")
    if kind in ("text", "input_text"):
        text = raw.get("text")
        if not isinstance(text, str):
            raise MessageFormatError(f"text part {j} needs a string `text`, got {text!r:.60}")
        return TextPart(text=text)
    if kind == "image_url":
        image = raw.get("image_url")
        if isinstance(image, str):
            return _image_from_url(image, None)
        if not isinstance(image, Mapping):
            raise MessageFormatError(
                f'image part {j} needs `image_url`: {{"url": ..., "detail": ...}}, got '
                f"{image!r:.60}"
            )
        return _image_from_url(image.get("url"), image.get("detail"))
    if kind == "input_image":
        if raw.get("file_id") is not None:
            raise MessageFormatError(
                f"image part {j} names an uploaded file (`file_id`); send the image itself as "
                "`image_url` (an https URL or a base64 data URL)"
            )
        return _image_from_url(raw.get("image_url"), raw.get("detail"))
    if kind in ("file", "input_file"):
        spec = raw.get("file") if kind == "file" else raw
        if not isinstance(spec, Mapping):
            raise MessageFormatError(
                f'file part {j} needs `file`: {{"file_data" or "file_id", "filename"}}'
            )
        what = f"file part {j}'s"
        file_data = _field(spec, "file_data", what)
        media_type, data = _split_data_url(file_data) if file_data else (None, None)
        if file_data and data is None:  # bare base64, as some clients send it
            data = file_data
        return FilePart(
            data=data,
            url=_field(spec, "file_url", what),
            file_id=_field(spec, "file_id", what),
            media_type=media_type,
            filename=_field(spec, "filename", what),
        )
    if kind == "input_audio":
        audio = raw.get("input_audio")
        if not isinstance(audio, Mapping):
            raise MessageFormatError(
                f'audio part {j} needs `input_audio`: {{"data": ..., "format": "wav" or "mp3"}}'
            )
        recording: Any = audio.get("data")
        fmt: Any = audio.get("format")
        return AudioPart(data=recording, format=fmt)
    raise MessageFormatError(
        f"content part {j} has type `{kind}`; Loom carries `text`, `image_url`, `file` and "
        "`input_audio` parts: describe it in text, or drop it"
    )


def part_to_openai(part: Part) -> dict[str, Any]:
    """`part` as an OpenAI chat-completions content part."""
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        url = part.url or f"data:{part.media_type};base64,{part.data}"
        image: dict[str, Any] = {"url": url}
        if part.detail is not None:
            image["detail"] = part.detail
        return {"type": "image_url", "image_url": image}
    if isinstance(part, AudioPart):
        return {"type": "input_audio", "input_audio": {"data": part.data, "format": part.format}}
    spec: dict[str, Any] = {}
    if part.data is not None:
        spec["file_data"] = f"data:{part.media_type or 'application/pdf'};base64,{part.data}"
    elif part.text is not None:
        raw = base64.b64encode(part.text.encode("utf-8")).decode("ascii")
        spec["file_data"] = f"data:{part.media_type or 'text/plain'};base64,{raw}"
    elif part.file_id is not None:
        spec["file_id"] = part.file_id
    else:
        spec["file_url"] = part.url
    if part.filename is not None:
        spec["filename"] = part.filename
    return {"type": "file", "file": spec}


def part_from_anthropic(j: int, block: Mapping[str, Any]) -> Part:
    """An Anthropic ``text``, ``image`` or ``document`` block as a `Part`."""
    kind = block.get("type")
    if kind == "text":
        text = block.get("text")
        if not isinstance(text, str):
            raise MessageFormatError(f"text part {j} needs a string `text`, got {text!r:.60}")
        return TextPart(text=text)
    source = block.get("source")
    if not isinstance(source, Mapping):
        raise MessageFormatError(f"{kind} block {j} needs a `source` object, got {source!r:.60}")
    what = f"the source of {kind} block {j}:"
    via = source.get("type")
    media_type = _field(source, "media_type", what)
    if kind == "image":
        if via == "base64":
            return ImagePart(data=_field(source, "data", what), media_type=media_type)
        if via == "url":
            return ImagePart(url=_field(source, "url", what))
        raise MessageFormatError(
            f"image block {j} has a `{via}` source; Loom carries `base64` and `url` images"
        )
    title = _field(block, "title", what)
    sources = {"base64": "data", "text": "text", "url": "url", "file": "file_id"}
    if via not in sources:
        raise MessageFormatError(
            f"document block {j} has a `{via}` source; Loom carries `base64`, `text`, `url` "
            "and `file` documents"
        )
    key = sources[via]
    value = _field(source, "data" if via in ("base64", "text") else key, what)
    return FilePart(media_type=media_type, filename=title, **{key: value})


def part_to_anthropic(part: Part) -> dict[str, Any]:
    """`part` as an Anthropic content block (`MessageFormatError` for audio)."""
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        if part.data is not None:
            source = {"type": "base64", "media_type": part.media_type, "data": part.data}
        else:
            source = {"type": "url", "url": part.url}
        return {"type": "image", "source": source}
    if isinstance(part, AudioPart):
        raise MessageFormatError(
            "Anthropic's API takes no audio: send this recording to an OpenAI audio model, or "
            "its transcript as text"
        )
    if part.data is not None:
        media_type = part.media_type or "application/pdf"
        source = {"type": "base64", "media_type": media_type, "data": part.data}
    elif part.text is not None:
        source = {"type": "text", "media_type": part.media_type or "text/plain", "data": part.text}
    elif part.file_id is not None:
        source = {"type": "file", "file_id": part.file_id}
    else:
        source = {"type": "url", "url": part.url}
    block: dict[str, Any] = {"type": "document", "source": source}
    if part.filename is not None:
        block["title"] = part.filename
    return block

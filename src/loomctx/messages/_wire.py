"""Reading wire-format payloads: the checks and error context both providers' converters share."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from loomctx.errors import MessageFormatError

__all__ = ["joined_text", "located", "mapping", "not_text", "text_part"]


@contextmanager
def located(where: str) -> Iterator[None]:
    """Prefix any format error raised inside with the payload item it concerns."""
    try:
        yield
    except MessageFormatError as exc:
        raise MessageFormatError(f"{where}: {exc}") from exc


def mapping(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        raise MessageFormatError(f"{what} is missing")
    if not isinstance(value, Mapping):
        raise MessageFormatError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def not_text(j: int, kind: object, allowed: str = "`text`") -> MessageFormatError:
    return MessageFormatError(
        f"content part {j} has type `{kind}`, but this message carries text only "
        f"(here: {allowed} parts); replace it with a text description, or drop it, before "
        "converting"
    )


def text_part(j: int, raw: Any) -> str:
    part = mapping(raw, f"content part {j}")
    if part.get("type") != "text":
        raise not_text(j, part.get("type"))
    text = part.get("text")
    if not isinstance(text, str):
        raise MessageFormatError(f"text part {j} needs a string `text`, got {text!r}")
    return text


def joined_text(content: Any, what: str, sep: str = "") -> str:
    """Text of `content` given as a string, None, or a list of `text` parts joined with `sep`."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, Sequence):
        raise MessageFormatError(
            f"{what} must be a string or a list of content parts, got {type(content).__name__}"
        )
    return sep.join(text_part(j, raw) for j, raw in enumerate(content))

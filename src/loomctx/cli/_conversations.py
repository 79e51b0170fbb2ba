"""Reading conversation exports: OpenAI or Anthropic message JSON, or JSONL.

Accepted shapes, in a ``.json`` file or one per line of a ``.jsonl`` file:

- a list of messages (``[{"role": "user", "content": "..."}, ...]``);
- an object with ``"messages"`` (and, Anthropic style, ``"system"``): one conversation;
- in JSONL, either one message per line (the lines form one conversation) or one such
  object per line (each line a conversation; they are read in order, one after another).

The format is recognised per conversation: Anthropic when it has a ``system`` key or content
blocks of type ``tool_use`` / ``tool_result``, OpenAI otherwise (plain text messages read the
same either way). Anything else raises `MessageFormatError` naming the file and the place.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from loomctx.errors import ConfigError, MessageFormatError
from loomctx.messages import Message, from_anthropic, from_openai

__all__ = ["CONVERSATION_SUFFIXES", "read_conversation"]

CONVERSATION_SUFFIXES = (".json", ".jsonl")


def _is_anthropic(conversation: Mapping[str, Any], messages: Sequence[Any]) -> bool:
    if "system" in conversation:
        return True
    for m in messages:
        content = m.get("content") if isinstance(m, Mapping) else None
        if isinstance(content, list) and any(
            isinstance(b, Mapping) and b.get("type") in ("tool_use", "tool_result") for b in content
        ):
            return True
    return False


def _convert(item: Any, where: str) -> list[Message]:
    """One conversation: a list of messages, or an object holding them."""
    holder: Mapping[str, Any] = {}
    if isinstance(item, Mapping) and "messages" in item:
        holder, messages = item, item["messages"]
    else:
        messages = item
    if not isinstance(messages, list):
        raise MessageFormatError(
            f"{where}: expected a list of messages or an object with `messages`, got "
            f"{type(messages).__name__}"
        )
    try:
        if _is_anthropic(holder, messages):
            return from_anthropic(messages, system=holder.get("system"))
        return from_openai(messages)
    except MessageFormatError as exc:
        raise MessageFormatError(f"{where}: {exc}") from None


def read_conversation(path: Path) -> list[Message]:
    """The messages of a conversation export at `path` (see the module docstring)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {str(path)!r}: {exc}") from None
    if path.suffix == ".jsonl":
        items = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    items.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise MessageFormatError(f"{str(path)!r} line {n}: not JSON ({exc})") from None
        if items and all(isinstance(i, Mapping) and "role" in i for i in items):
            return _convert(items, repr(str(path)))
        out: list[Message] = []
        for n, item in enumerate(items, 1):
            out += _convert(item, f"{str(path)!r} line {n}")
        return out
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MessageFormatError(f"{str(path)!r}: not JSON ({exc})") from None
    return _convert(data, repr(str(path)))

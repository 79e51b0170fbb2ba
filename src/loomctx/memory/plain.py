"""The plain path into memory: `LoomMemory.add(messages)` and `LoomMemory.recall(query)`.

What a user who has a message list and a question needs, in the shapes they already have:

- `messages_of(payload)` reads what `add` accepts: Loom `Message`s, OpenAI chat messages,
  Anthropic messages (``tool_use`` / ``tool_result`` blocks), plain ``{"role", "content"}``
  dicts, or one string (a user message). The format is told from the payload, or named.
- `Recalled` and `Recall` are what `recall` returns: frozen values with `to_dict()` (JSON
  types only), not `Task`s. `Recall.search` says how the query was searched ("hybrid" or
  "lexical") and `Recall.note` says why it is lexical, or that some items were not embedded
  yet and were found by their words only: a result never hides that dense search could not
  see everything.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from loomctx.errors import ConfigError
from loomctx.memory.task import (
    ASSISTANT_MESSAGE,
    USER_MESSAGE,
    Task,
    task_body,
    task_line,
)
from loomctx.messages import Message, from_anthropic, from_openai

__all__ = ["MessageFormat", "Recall", "Recalled", "messages_of", "recalled_of"]

MessageFormat = Literal["auto", "openai", "anthropic"]
SearchMode = Literal["hybrid", "lexical"]

_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking"})


def _is_anthropic(payload: Sequence[Mapping[str, Any]]) -> bool:
    """Anthropic's format shows in its content blocks; plain text messages read the same in
    both formats."""
    for m in payload:
        content = m.get("content")
        if isinstance(content, list) and any(
            isinstance(b, Mapping) and b.get("type") in _ANTHROPIC_BLOCKS for b in content
        ):
            return True
    return False


def messages_of(payload: object, *, format: MessageFormat = "auto") -> list[Message]:
    """Loom messages for what `LoomMemory.add` was given (see the module docstring)."""
    if format not in ("auto", "openai", "anthropic"):
        raise ConfigError(f"`format` must be 'auto', 'openai' or 'anthropic', got {format!r}")
    if isinstance(payload, str):
        return [Message.user(payload)]
    if isinstance(payload, Message):
        return [payload]
    if isinstance(payload, Mapping) or not isinstance(payload, Sequence):
        raise ConfigError(
            f"`add` takes a list of messages (Loom `Message`s, OpenAI or Anthropic message "
            f"dicts) or one string, got {type(payload).__name__}"
        )
    items = list(payload)
    if all(isinstance(m, Message) for m in items):
        return items
    if not all(isinstance(m, Mapping) for m in items):
        kinds = sorted({type(m).__name__ for m in items})
        raise ConfigError(
            f"`add` takes messages of one kind: all Loom `Message`s or all dicts, got {kinds}"
        )
    if format == "anthropic" or (format == "auto" and _is_anthropic(items)):
        return from_anthropic(items)
    return from_openai(items)


@dataclass(frozen=True, slots=True, kw_only=True)
class Recalled:
    """One remembered item: who said it (`role`: user, assistant, or tool), what (`text`, as
    the model would read it; `content`, the message or result alone), when (`said_at`, ISO
    8601), how well it matches (`score`, 0..1) and how it was found (`via`)."""

    id: str
    role: Literal["user", "assistant", "tool"]
    text: str
    content: str
    said_at: str
    score: float
    via: tuple[str, ...]
    session_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON types only."""
        return {
            "id": self.id,
            "role": self.role,
            "text": self.text,
            "content": self.content,
            "said_at": self.said_at,
            "score": self.score,
            "via": list(self.via),
            "session_id": self.session_id,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Recall:
    """What `LoomMemory.recall` found for `query`, best first (iterate it, or read `items`).

    `search` is "hybrid" (words and vectors) or "lexical" (words only); `note` says why
    it is lexical, or which items vectors could not see yet ("" when there is nothing to say).
    """

    query: str
    items: tuple[Recalled, ...]
    search: SearchMode
    note: str = ""

    def __iter__(self) -> Iterator[Recalled]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def to_dict(self) -> dict[str, Any]:
        """JSON types only."""
        return {
            "query": self.query,
            "items": [i.to_dict() for i in self.items],
            "search": self.search,
            "note": self.note,
        }


def recalled_of(task: Task, score: float, via: Sequence[str]) -> Recalled:
    """The plain form of a task found by search."""
    role: Literal["user", "assistant", "tool"] = (
        "user"
        if task.action == USER_MESSAGE
        else "assistant"
        if task.action == ASSISTANT_MESSAGE
        else "tool"
    )
    session = task.metadata.get("session_id")
    return Recalled(
        id=task.task_id,
        role=role,
        text=task_line(task),
        content=task_body(task),
        said_at=task.created_at.isoformat(),
        score=round(score, 4),
        via=tuple(via),
        session_id=session if isinstance(session, str) else None,
    )

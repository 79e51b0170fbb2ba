"""What the built-in sources share: argument checks, message billing, the ceiling rule."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Final

from loomctx.context.block import ContextBlock
from loomctx.context.packing import truncate_text
from loomctx.errors import ConfigError
from loomctx.messages import Message
from loomctx.tokens import TOKENS_REPLY_PRIMING, TokenCounter

# Below this, a cut block would be mostly truncation marker: leave the room unused instead.
MIN_CUT_TOKENS: Final = 8


def short(value: object, limit: int = 80) -> str:
    """`repr(value)`, shortened for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_source(kind: str, name: object, priority: object) -> tuple[str, float]:
    """Validate a source's `name` and `priority`; return them typed."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(
            f"`name` of a {kind} must be a non-empty string, got {short(name)}; it keys the "
            "source's budget ratio and its lines in the report"
        )
    if (
        isinstance(priority, bool)
        or not isinstance(priority, int | float)
        or not 0.0 <= priority <= 1.0
    ):
        raise ConfigError(
            f"`priority` of {kind} `{name}` must be a number from 0 to 1, got {short(priority)}"
        )
    return name, float(priority)


def billed(counter: TokenCounter, messages: Sequence[Message]) -> int:
    """Tokens billed for `messages` inside a longer conversation: without the reply priming,
    which a window pays once."""
    return counter.count_messages(messages) - TOKENS_REPLY_PRIMING


def label_tokens(block: ContextBlock, counter: TokenCounter) -> int:
    """Tokens a block's ``metadata["label"]`` adds in the window (``[label] ``; 0 without
    one): what the source must count against its ceiling beside the content."""
    label = block.metadata.get("label")
    return counter.count(f"[{label}] ") if label else 0


def fit_ceiling(
    blocks: Iterable[ContextBlock], ceiling: int, counter: TokenCounter, *, min_room: int = 0
) -> list[ContextBlock]:
    """The `blocks` (in preference order) a source may offer within `ceiling` tokens in all.

    First fit: a block that fits the room left is kept; one that does not is cut to the room
    left if it is truncatable and at least `MIN_CUT_TOKENS` are left (its metadata then says
    `truncated_from`, its size before the cut), and skipped otherwise, so that a smaller block
    after it may still fit.

    `blocks` are read one at a time, and no further once the room left is below `min_room`
    (default 0: to the end), so a generator builds only the blocks that may still go in.
    A block's label (`label_tokens`) counts against the ceiling too.
    """
    out: list[ContextBlock] = []
    room = ceiling
    if room < min_room:
        return out
    for block in blocks:
        label = label_tokens(block, counter)
        if block.token_count + label <= room:
            out.append(block)
            room -= block.token_count + label
        elif block.truncatable and room - label >= MIN_CUT_TOKENS:
            cut = truncate_text(counter, block.content, room - label)
            if cut:
                tokens = counter.count(cut)
                metadata = {**block.metadata, "truncated_from": block.token_count}
                out.append(replace(block, content=cut, token_count=tokens, metadata=metadata))
                room -= tokens + label
        if room < min_room:
            break
    return out

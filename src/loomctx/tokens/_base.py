"""`TokenCounter`, the protocol every budget is measured by, and `BaseTokenCounter`.

`BaseTokenCounter` gives a counter that implements `_count` everything else: a cache of
counts (`loomctx.tokens._cache`), `count_messages` by the providers' billing rules
(`loomctx.tokens._rules`), and `truncate` that never splits a grapheme cluster.
"""

from __future__ import annotations

import copy
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, Self, runtime_checkable

from loomctx._memo import Memo
from loomctx.errors import ConfigError
from loomctx.messages import tool_parts_note
from loomctx.parts import ImageRule, TextPart, part_tokens
from loomctx.tokens._cache import CountCache
from loomctx.tokens._rules import (
    TOKENS_PER_MESSAGE,
    TOKENS_PER_NAME,
    TOKENS_PER_TOOL_CALL,
    TOKENS_REPLY_PRIMING,
    TOKENS_TOOL_DEFINITIONS,
    render_tool_definitions,
)

if TYPE_CHECKING:
    from loomctx.messages import Message

__all__ = ["BaseTokenCounter", "TokenCounter", "back_off_grapheme"]


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens the way a model's provider does.

    Implement `count`; inherit `count_messages` and `truncate` from `BaseTokenCounter`
    unless your tokenizer offers something better.
    """

    @property
    def name(self) -> str:
        """A stable identifier, e.g. ``"tiktoken:o200k_base"``."""
        ...

    def count(self, text: str) -> int:
        """The number of tokens in `text`."""
        ...

    def count_messages(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] = ()
    ) -> int:
        """The tokens a provider bills for sending `messages` with `tools` defined."""
        ...

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text`, cut between whole characters, of at most `max_tokens`."""
        ...


class BaseTokenCounter(ABC):
    """Template for counters: subclasses implement `_count`, and get caching, the message
    billing rule and a generic `truncate` (binary search over characters)."""

    is_estimate: bool = False
    image_rule: ImageRule = "openai"  # whose published rule counts images (`loomctx.parts`)

    # 65,536 texts (and 8M characters at most): a 128k window counts ~3,000 items (each one's
    # text and its labelled form), a server counts many sessions' windows; with 4,096, a
    # build at 10k stored turns missed the cache for every retrieved turn, and a 128k one
    # re-counted nearly everything.
    def __init__(self, *, cache_entries: int = 65_536, cache_chars: int = 8_000_000) -> None:
        if cache_entries < 0 or cache_chars < 0:
            raise ConfigError("`cache_entries` and `cache_chars` must be >= 0")
        self._cache = CountCache(max_entries=cache_entries, max_chars=cache_chars)
        # The tokens of messages without parts counted lately, by message object (held, so
        # its id stays unique; messages are frozen values, a tool call's arguments
        # included): a build counts its window's history several times (the whole window,
        # the prefix the previous call repeats, its cache breakpoints), and a tool call's
        # arguments are serialized to be counted.
        self._plain: Memo[Message, int] = Memo(self._plain_tokens, cache_entries)

    @property
    @abstractmethod
    def name(self) -> str:
        """A stable identifier for this counter."""

    @abstractmethod
    def _count(self, text: str) -> int:
        """Count `text` without the cache."""

    def count(self, text: str) -> int:
        """The number of tokens in `text` (cached for repeated texts)."""
        if not text:
            return 0
        n = self._cache.get(text)
        if n is None:
            n = self._count(text)
            self._cache.put(text, n)
        return n

    def count_messages(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] = ()
    ) -> int:
        """The tokens billed for `messages` plus `tools`, by the rule in the module docstring."""
        total = TOKENS_REPLY_PRIMING if messages else 0
        for m in messages:
            if not m.parts:
                total += self._plain(m)
                continue
            total += TOKENS_PER_MESSAGE + self.count(m.role) + self.count(m.content)
            for part in m.parts:
                if not isinstance(part, TextPart):  # its text is in `content`
                    total += part_tokens(part, self.image_rule, self.count)
            if m.role == "tool" and m.parts:  # OpenAI's wire moves them to a user message
                note = tool_parts_note(m.tool_call_id)
                total += TOKENS_PER_MESSAGE + self.count("user") + self.count(note)
            if m.name:
                total += TOKENS_PER_NAME + self.count(m.name)
            for call in m.tool_calls:
                total += (
                    TOKENS_PER_TOOL_CALL + self.count(call.name) + self.count(call.arguments_json())
                )
        if tools:
            total += TOKENS_TOOL_DEFINITIONS + self.count(render_tool_definitions(tools))
        return total

    def _plain_tokens(self, message: Message) -> int:
        """The tokens of a message without parts (which alone depend on `image_rule`): its
        role, content, name and tool calls, as `count_messages` bills them."""
        total = TOKENS_PER_MESSAGE + self.count(message.role) + self.count(message.content)
        if message.name:
            total += TOKENS_PER_NAME + self.count(message.name)
        for call in message.tool_calls:
            total += TOKENS_PER_TOOL_CALL + self.count(call.name)
            total += self.count(call.arguments_json())
        return total

    def with_image_rule(self, rule: ImageRule) -> Self:
        """This counter with images counted by `rule` (``openai`` or ``anthropic``): the same
        tokenizer and the same cache of text counts, for windows sent to the other provider."""
        if rule not in ("openai", "anthropic"):
            raise ConfigError(f"`rule` must be `openai` or `anthropic`, got {rule!r}")
        twin = copy.copy(self)  # shallow: the tokenizer and the cache are shared
        twin.image_rule = rule
        return twin

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text` with at most `max_tokens` tokens, on a character
        boundary (never inside a grapheme such as an emoji with modifiers)."""
        if self.count(text) <= max_tokens:
            return text
        lo, hi = 0, len(text)  # invariant: text[:lo] fits, text[:hi] does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._count(text[:mid]) <= max_tokens:
                lo = mid
            else:
                hi = mid
        return back_off_grapheme(text, lo)


_CONTINUATION_RANGES: Final = (
    (0xFE00, 0xFE0F),  # variation selectors
    (0x1F3FB, 0x1F3FF),  # skin-tone modifiers
    (0xE0020, 0xE007F),  # tag characters (flag sequences)
    (0xE0100, 0xE01EF),  # variation selectors supplement
)
_ZWJ: Final = "\u200d"


def _continues_grapheme(ch: str) -> bool:
    cp = ord(ch)
    if ch == _ZWJ or unicodedata.combining(ch):
        return True
    return any(lo <= cp <= hi for lo, hi in _CONTINUATION_RANGES)


def back_off_grapheme(text: str, cut: int) -> str:
    """Move `cut` left until it does not split a grapheme cluster (approximately: no
    trailing ZWJ, and the next character is not a combining mark or emoji modifier)."""
    while 0 < cut < len(text) and (_continues_grapheme(text[cut]) or text[cut - 1] == _ZWJ):
        cut -= 1
    return text[:cut]

"""The units of the context engine: what sources produce and what the orchestrator packs.

A `ContextSource` is asked, once per build, for the `ContextBlock`s it would contribute to the
window for a query, given a `TokenBudget` and a `BuildContext`. A block says which `Section`
of the layout it belongs to; the layout is fixed (DESIGN.md section 5.4):

    instructions, skills          the stable prefix (one system message)
    tools                         tool schemas, sent beside the messages
    context                       dynamic context: knowledge, memory, retrieval (fenced)
    history                       earlier messages, oldest to newest, roles preserved
    user                          the current user turn
    turn                          what followed the user turn in this run (tool exchanges)

Priority decides what gets in; the section decides where it goes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from loomctx.errors import ConfigError
from loomctx.tokens import TiktokenCounter, TokenCounter

if TYPE_CHECKING:
    from loomctx.messages import Message

__all__ = [
    "SECTIONS",
    "BuildContext",
    "ContextBlock",
    "ContextSource",
    "Phase",
    "Section",
    "TokenBudget",
    "new_context_block",
    "new_history_block",
]

Section = Literal["instructions", "skills", "tools", "context", "history", "user", "turn"]
SECTIONS: tuple[Section, ...] = (
    "instructions",
    "skills",
    "tools",
    "context",
    "history",
    "user",
    "turn",
)
Phase = Literal["early", "middle", "late"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextBlock:
    """One unit of context a source offers: text, or whole messages, with its value and size.

    - `section`: where it goes in the layout, one of `SECTIONS` (anything else raises
      `ConfigError`: no part of the layout would render it).
    - `content`: the text (for `instructions`, `skills`, `context` blocks).
    - `messages`: for `history`, `user` and `turn` blocks, the messages of one atomic unit
      (a plain message, or an assistant message with tool calls plus all their results).
    - `tool`: for `tools` blocks, the tool's schema as given (OpenAI or Anthropic format).
    - `token_count`: tokens of the content as the block's source measured it.
    - `priority`: its value within its source, from 0 to 1 (higher is kept first).
    - `pinned`: must be included whole, or the build fails naming it.
    - `truncatable`: may be cut to fit (text blocks only; messages are never cut).
    - `sequence`: the position in the conversation, for `history` and `turn` blocks.
    - `id`: stable within a source (defaults to `source:sequence` or `source`).
    """

    source: str
    section: Section
    content: str = ""
    token_count: int = 0
    priority: float = 0.5
    pinned: bool = False
    truncatable: bool = False
    messages: tuple[Message, ...] = ()
    tool: Mapping[str, Any] | None = None
    sequence: int = 0
    id: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if self.section not in SECTIONS:
            # The layout renders only these sections: a block outside them would be counted
            # and reported as kept, yet never reach the window.
            valid = ", ".join(f"`{s}`" for s in SECTIONS)
            raise ConfigError(
                f"source `{self.source}` made a block with section {self.section!r}, which the "
                f"layout does not have; use one of {valid}"
            )
        if not 0.0 <= self.priority <= 1.0:
            raise ConfigError(
                f"block priority must be within 0..1, got {self.priority!r} from source "
                f"`{self.source}`"
            )
        if self.token_count < 0:
            raise ConfigError(f"block token_count must be >= 0 (source `{self.source}`)")
        if not isinstance(self.messages, tuple):
            object.__setattr__(self, "messages", tuple(self.messages))
        if not self.id:
            suffix = f":{self.sequence}" if self.section in ("history", "turn") else ""
            object.__setattr__(self, "id", f"{self.source}{suffix}")

    def with_content(self, content: str, token_count: int) -> ContextBlock:
        """A copy with new text (after truncation or summarization)."""
        return replace(self, content=content, token_count=token_count)


# The slots' own setters, which a frozen value's fields can be set through once, as it is made.
(
    _SET_SOURCE, _SET_SECTION, _SET_CONTENT, _SET_TOKENS, _SET_PRIORITY, _SET_PINNED,
    _SET_TRUNCATABLE, _SET_MESSAGES, _SET_TOOL, _SET_SEQUENCE, _SET_ID, _SET_METADATA,
) = (
    ContextBlock.__dict__[name].__set__
    for name in (
        "source", "section", "content", "token_count", "priority", "pinned", "truncatable",
        "messages", "tool", "sequence", "id", "metadata",
    )
)  # fmt: skip


def _unchecked(
    source: str,
    section: Section,
    content: str,
    token_count: int,
    priority: float,
    truncatable: bool,
    messages: tuple[Message, ...],
    sequence: int,
    id: str,
    metadata: Mapping[str, Any],
) -> ContextBlock:
    """A block with its slots set directly, neither pinned nor a tool's: what
    `ContextBlock.__post_init__` checks, the caller guarantees."""
    made = object.__new__(ContextBlock)
    _SET_SOURCE(made, source)
    _SET_SECTION(made, section)
    _SET_CONTENT(made, content)
    _SET_TOKENS(made, token_count)
    _SET_PRIORITY(made, priority)
    _SET_PINNED(made, False)
    _SET_TRUNCATABLE(made, truncatable)
    _SET_MESSAGES(made, messages)
    _SET_TOOL(made, None)
    _SET_SEQUENCE(made, sequence)
    _SET_ID(made, id)
    _SET_METADATA(made, metadata)
    return made


def new_context_block(
    *,
    source: str,
    id: str,
    content: str,
    token_count: int,
    priority: float,
    truncatable: bool,
    metadata: Mapping[str, Any],
) -> ContextBlock:
    """The `context` block ``ContextBlock(section="context", ...)`` makes, for less: a
    retrieval source makes one per candidate of every build. The caller guarantees what
    `ContextBlock.__post_init__` checks (a non-empty `id`, `priority` within 0..1,
    `token_count` >= 0); the fields it does not take have their defaults."""
    return _unchecked(
        source, "context", content, token_count, priority, truncatable, (), 0, id, metadata
    )


def new_history_block(
    *,
    source: str,
    id: str,
    messages: tuple[Message, ...],
    token_count: int,
    priority: float,
    sequence: int,
    metadata: Mapping[str, Any],
) -> ContextBlock:
    """The `history` block ``ContextBlock(section="history", ...)`` makes, for less: a
    history source makes one per unit it offers, and when the conversation moves on, every
    unit's place in it moves too. The caller guarantees what `ContextBlock.__post_init__`
    checks (as for `new_context_block`, and `messages` a tuple)."""
    return _unchecked(
        source, "history", "", token_count, priority, False, messages, sequence, id, metadata
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenBudget:
    """What a source may use: `tokens` is its allocation; it may offer blocks beyond that,
    in priority order, up to `ceiling` (budget other sources leave unused flows to it)."""

    tokens: int
    ceiling: int

    def __post_init__(self) -> None:
        if self.tokens < 0 or self.ceiling < self.tokens:
            raise ConfigError(
                f"a token budget needs 0 <= tokens <= ceiling, got {self.tokens}, {self.ceiling}"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildContext:
    """Who a build is for and where the conversation stands, passed to every source.

    `history` is the conversation so far (before the current user turn); `turn_index` counts
    the model calls made in this conversation; `progress` (0..1, or None when unknown) is how
    far the task has come, e.g. the share of an agent run's turns used; `phase` is set by the
    caller or inferred by an adaptive budget manager (from `progress`, else `turn_index`);
    `counter` is the orchestrator's token counter, for sources that measure what they offer.
    `dynamic_floor` is the room the window gives dynamic context ahead of older history
    (`CachePolicy.min_dynamic` within its cap; set by the orchestrator): a dynamic source may
    offer that much even when its own share is smaller.
    `history_start` is set by the orchestrator: for each history source of the session's
    previous window, the `sequence` of the unit its kept history starts at (its
    `HistoryMark`), so that a source need not offer units the window can no longer hold.
    `now` is when the call is made (default: the orchestrator's clock, UTC now): a session
    idle longer than the provider's cache lifetime has a cold cache
    (`CachePolicy.cache_lifetime`). A memory's clock sets it where the memory's time is not
    the wall clock's (a replayed conversation).
    """

    session_id: str = "default"
    agent_id: str = "agent"
    tenant_id: str = "default"
    history: tuple[Message, ...] = ()
    turn_index: int = 0
    progress: float | None = None
    phase: Phase | None = None
    counter: TokenCounter = field(default_factory=lambda: _default_counter(), hash=False)
    dynamic_floor: int = 0
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False)
    history_start: Mapping[str, int] = field(default_factory=dict, hash=False)
    now: datetime | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.history, tuple):
            object.__setattr__(self, "history", tuple(self.history))
        if self.now is not None and (
            not isinstance(self.now, datetime) or self.now.utcoffset() is None
        ):
            raise ConfigError(
                f"`now` must be a timezone-aware datetime (e.g. datetime.now(UTC)), got "
                f"{self.now!r}"
            )
        if self.turn_index < 0:
            raise ConfigError(f"`turn_index` must be >= 0, got {self.turn_index!r}")
        p = self.progress
        if p is not None and (
            isinstance(p, bool) or not isinstance(p, int | float) or not 0 <= p <= 1
        ):
            raise ConfigError(
                f"`progress` must be a number from 0 to 1 (how far the task has come) or None, "
                f"got {p!r}"
            )


_DEFAULT_COUNTER: list[TokenCounter] = []


def _default_counter() -> TokenCounter:
    if not _DEFAULT_COUNTER:
        _DEFAULT_COUNTER.append(TiktokenCounter())
    return _DEFAULT_COUNTER[0]


@runtime_checkable
class ContextSource(Protocol):
    """Offers blocks for the window. Third parties implement this to add a source.

    `name` keys the source's budget ratio and its lines in the report; `priority` (0..1)
    decides which source gets unused budget first and loses content last.
    `collect` returns blocks in the source's own order of preference; it may return more than
    `budget.tokens` (never needs more than `budget.ceiling`): the orchestrator selects.
    """

    @property
    def name(self) -> str:
        """The source's name: its budget key and its label in the report."""
        ...

    @property
    def priority(self) -> float:
        """How much this source's content is worth relative to other sources (0..1)."""
        ...

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> Sequence[ContextBlock]:
        """The blocks this source offers for `query`."""
        ...

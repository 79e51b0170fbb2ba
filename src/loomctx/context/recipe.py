"""The one window recipe: what a conversation's window is built from, and how.

An `Agent`, the proxy, a `Session` and the benches all build their windows with it, so that
every cost and quality figure measured describes the window users get. The sources, in
order::

    system prompt · tools · [documents a retriever found] · history (`L1RecentSource`)
    · important memory (`L2ImportantSource`) · retrieval over memory and knowledge
    (`UnifiedRetrievalSource`) · [extra sources] · the run's exchange (`TurnSource`)
    · the user's turn

The prompt, the tools and history are the window's cached prefix; important memory and
retrieval are its dynamic tail, new on every call. `WindowSettings` is the one value that
configures the recipe: the cache policy (when history is compacted, the share of the input
the dynamic tail may take at most, and how far above what was retrieved a block of it must
stand).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from loomctx.context.block import ContextSource
from loomctx.context.budget import BudgetManager
from loomctx.context.compactor import CachePolicy
from loomctx.context.orchestrator import ContextOrchestrator, LayoutState
from loomctx.context.sources.memory import L1RecentSource, L2ImportantSource
from loomctx.context.sources.prompt import PromptSource, UserInputSource
from loomctx.context.sources.retrieval import UnifiedRetrievalSource
from loomctx.context.sources.tools import ToolSource
from loomctx.errors import ConfigError
from loomctx.knowledge import KnowledgeBaseProvider
from loomctx.memory.core import LoomMemory
from loomctx.messages import Message
from loomctx.tokens import TokenCounter

__all__ = [
    "DEFAULT_HISTORY_DEPTH",
    "DEFAULT_MAX_DYNAMIC",
    "DEFAULT_MEMORY_PAYBACK",
    "DEFAULT_TAIL_LIFT",
    "MemorySources",
    "WindowSettings",
    "memory_sources",
    "window_orchestrator",
    "window_sources",
]

DEFAULT_MAX_DYNAMIC = 0.2
"""The recipe's default `CachePolicy.max_dynamic`: the dynamic tail (retrieved memory and
knowledge, new on every call) takes at most this share of the input budget, history (which a
provider's cache reads at a fraction of the price) the rest. Chosen by billed cost against
the evidence in the window (`loomctx bench cost`; docs/benchmarks.md) together with
`DEFAULT_MEMORY_PAYBACK`, which bounds what recalled turns cost below it: the cap with which
as much of the evidence reaches the window as with 15% and no such bound, for less.
"""

DEFAULT_TAIL_LIFT = 0.03
"""The recipe's default `CachePolicy.tail_lift`: a block is sent in the dynamic tail only when
its relevance score stands this far above the median of what its build retrieved, so a turn
that singles nothing out (small talk) gets a small tail and a question its hits. Chosen by
billed cost against the evidence in the window (`loomctx bench cost --tail-lift`;
docs/benchmarks.md): the largest lift measured that keeps as much of the evidence as the
uniform tail did before it."""

DEFAULT_MEMORY_PAYBACK = 1.0
"""The recipe's default `CachePolicy.memory_payback`: once history has been compacted, the
turns the tail recalls cost at most what the history they stand in for would (read from the
cache), less the compaction's rewrite: past its room, a conversation costs about what
re-sending all of it would, and the further it reaches the more it may recall. Measured
against the evidence in the window (`loomctx bench cost`; docs/benchmarks.md)."""

DEFAULT_HISTORY_DEPTH = 1000
"""The recipe's default `WindowSettings.history_depth`: history may reach back this many
tasks of the conversation, far more than a window's room holds, so the room decides."""

MemorySources: TypeAlias = tuple[L1RecentSource, L2ImportantSource, UnifiedRetrievalSource]
"""A conversation's memory in the window: history, important memory, retrieval."""


def _default_policy() -> CachePolicy:
    return CachePolicy(
        max_dynamic=DEFAULT_MAX_DYNAMIC,
        tail_lift=DEFAULT_TAIL_LIFT,
        fill_first=False,
        memory_payback=DEFAULT_MEMORY_PAYBACK,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowSettings:
    """How the one window recipe builds a window.

    - `cache_policy`: when history is compacted and how much of the input the dynamic tail
      may take (default: `CachePolicy(max_dynamic=DEFAULT_MAX_DYNAMIC,
      tail_lift=DEFAULT_TAIL_LIFT, memory_payback=DEFAULT_MEMORY_PAYBACK)`, a tail capped
      for the provider's prompt cache, holding what stands out of what was retrieved, its
      recalled turns costing no more than the history they stand in for).
    - `history_depth`: how many of the conversation's newest tasks history may reach back
      (default `DEFAULT_HISTORY_DEPTH`): from the store, beyond the memory's L1, so that
      history fills the room the budget gives it and, while the whole conversation fits,
      the window is the whole conversation; None: L1's size (history bounded by L1, as the
      retrieval benches measure it).
    """

    cache_policy: CachePolicy = field(default_factory=_default_policy)
    history_depth: int | None = DEFAULT_HISTORY_DEPTH

    def __post_init__(self) -> None:
        if not isinstance(self.cache_policy, CachePolicy):
            raise ConfigError(
                f"`WindowSettings.cache_policy` must be a CachePolicy, got "
                f"{type(self.cache_policy).__name__}"
            )
        depth = self.history_depth
        if depth is not None and (
            isinstance(depth, bool) or not isinstance(depth, int) or depth < 1
        ):
            raise ConfigError(
                f"`WindowSettings.history_depth` must be an int >= 1 or None, got {depth!r}"
            )


def memory_sources(
    memory: LoomMemory,
    knowledge_bases: Sequence[KnowledgeBaseProvider] = (),
    *,
    settings: WindowSettings | None = None,
    max_item_tokens: int | None = None,
    read_tool: str | None = None,
) -> MemorySources:
    """The sources that bring `memory` (and `knowledge_bases`) into a window: its history
    (as deep as `settings` say, each task at most `max_item_tokens`, cut to an excerpt
    `read_tool` reads), its important tasks that history does not hold, and retrieval over
    its archive and the knowledge bases (a task history holds goes in once, as history)."""
    settings = settings or WindowSettings()
    history = L1RecentSource(
        memory, max_item_tokens=max_item_tokens, read_tool=read_tool, depth=settings.history_depth
    )
    return (
        history,
        L2ImportantSource(memory, held=history.held),
        UnifiedRetrievalSource(memory, knowledge_bases),
    )


def window_sources(
    system: str,
    *,
    tools: Sequence[Mapping[str, Any]] = (),
    always: Sequence[str] = (),
    retrieved: Sequence[ContextSource] = (),
    memory: Sequence[ContextSource] = (),
    extra: Sequence[ContextSource] = (),
    turn: ContextSource | None = None,
    user: Message | None = None,
) -> list[ContextSource]:
    """The recipe's sources in their order (module docstring): the `system` prompt, the
    `tools` (those named in `always` kept whatever the budget), documents `retrieved` for
    the turn, the `memory` sources (`memory_sources`), `extra` sources, the run's `turn`
    exchange and the user's turn (`user`: its message, with its images and files; else the
    build's query)."""
    sources: list[ContextSource] = [PromptSource(system)]
    if tools:
        sources.append(ToolSource(list(tools), always=list(always)))
    sources += [*retrieved, *memory, *extra]
    if turn is not None:
        sources.append(turn)
    sources.append(UserInputSource(message=user))
    return sources


def window_orchestrator(
    sources: Sequence[ContextSource],
    *,
    counter: TokenCounter,
    window: int,
    settings: WindowSettings | None = None,
    output_reserve_ratio: float | None = None,
    max_output_tokens: int | None = None,
    budget_manager: BudgetManager | None = None,
    source_timeout: float = 2.0,
    state: LayoutState | None = None,
    kind: type[ContextOrchestrator] = ContextOrchestrator,
) -> ContextOrchestrator:
    """The orchestrator (of class `kind`) that builds the recipe's window from `sources`: a
    `window`-token context with the reply's reserve (`output_reserve_ratio`, or
    `max_output_tokens`) left out, split by `budget_manager`, laid out for the cache as
    `settings` say; `state` remembers each session's history marks between builds."""
    settings = settings or WindowSettings()
    return kind(
        token_counter=counter,
        sources=sources,
        model_context_window=window,
        output_reserve_ratio=output_reserve_ratio,
        max_output_tokens=max_output_tokens,
        budget_manager=budget_manager,
        source_timeout=source_timeout,
        cache_policy=settings.cache_policy,
        state=state,
    )

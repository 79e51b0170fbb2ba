"""What an `Agent` is tuned with, grouped into three frozen values.

An agent is made from what it *has*, passed directly (``Agent(llm, system_instructions,
tools, memory=..., knowledge_bases=..., name=..., embedder=...)``), and how it *works*,
grouped by the question each group answers:

- `AgentWindow` (``window=``): how large the window is and how its budget is shared out:
  the model's context window, the reply's reserve, the token counter, the budget manager,
  the cache policy and how much one turn's tool results may take.
- `AgentSources` (``sources=``): what else each window is built from: the stage and task
  context beside the instructions, a `ContextRetriever` asked before every call, sources of
  your own, a memory shared with other agents, and how long a source may take.
- `AgentLoop` (``loop=``): how a run proceeds: how many model calls it may make, how deep it
  may delegate, how its progress is measured, and the options of every model call.

Each value checks its fields when it is made, so that a wrong setting is refused where it
is written. The keyword arguments these values replace are refused by `Agent` with a
`ConfigError` naming the value and field to use (`MOVED`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from loomctx.agent.llm import LLMOptions
from loomctx.agent.retriever import ContextRetriever
from loomctx.context.block import ContextSource
from loomctx.context.budget import BudgetManager
from loomctx.context.compactor import CachePolicy
from loomctx.context.excerpt import check_excerpt_tokens
from loomctx.context.sources.retrieval import UnifiedRetrievalSource
from loomctx.errors import ConfigError, check_int
from loomctx.memory.core import LoomMemory
from loomctx.tokens import TokenCounter

__all__ = [
    "DELEGATION",
    "MOVED",
    "OWN_SOURCES",
    "AgentLoop",
    "AgentSources",
    "AgentWindow",
    "moved_argument",
]

DELEGATION = "delegation"
"""The source that gives a sub-agent its parent's request, as fenced reference data."""

OWN_SOURCES = frozenset(
    {"system_prompt", "tools", "retrieved", "L1_recent", "L2_important", "turn", "user_input",
     "unified_retrieval", "inherited", "shared_pool", DELEGATION}
)  # fmt: skip
"""The names of the sources an agent adds to its windows itself: a source of your own
(`AgentSources.extra`) needs another name."""


def _count(value: object, what: str) -> int:
    """`value` if it is an int >= 1 (not a bool); else a `ConfigError` naming `what`."""
    return check_int(value, f"`{what}`", minimum=1)


def _optional(value: object, kind: type, what: str, expected: str) -> None:
    """Refuse `value`, the setting `what`, unless it is None or a `kind` (`expected` says
    which, in words)."""
    if value is not None and not isinstance(value, kind):
        raise ConfigError(f"`{what}` must be {expected}, got {type(value).__name__}")


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentWindow:
    """How large an agent's window is and how its budget is shared out.

    - `model_context_window`: the model's window, in tokens (default 16,000); an
      `AnthropicLLM` with a `UsageCalibration` makes it the window the calibration deems safe.
    - `output_reserve_ratio`: the share of the window kept for the reply (default 0.2); the
      rest is the input budget.
    - `token_counter`: how the window is counted (default: a `TiktokenCounter`, o200k).
    - `budget_manager`: how the input budget is split among the window's sources (default
      `BudgetManager()`): the static context (instructions, stage, task context) may take all
      it needs up to its `static_limit`, the dynamic context at most its `dynamic_limit`.
      An `AdaptiveBudgetManager` shifts the split with the run's phase (`AgentLoop.progress`).
    - `cache_policy`: when history is compacted and how much of the input the dynamic tail
      may take (default: the window recipe's, `WindowSettings().cache_policy`).
    - `max_result_tokens`: the most one turn's tool results (and each task of history) take
      together before the longest are shown as excerpts the model can read on with
      `read_result` (default None: a quarter of the input budget, less with a large system
      prompt).
    """

    model_context_window: int = 16_000
    output_reserve_ratio: float = 0.2
    token_counter: TokenCounter | None = None
    budget_manager: BudgetManager | None = None
    cache_policy: CachePolicy | None = None
    max_result_tokens: int | None = None

    def __post_init__(self) -> None:
        # The window and the reserve are checked together: the reserve must leave input.
        BudgetManager.available(
            self.model_context_window, output_reserve_ratio=self.output_reserve_ratio
        )
        check_excerpt_tokens(self.max_result_tokens, "`AgentWindow.max_result_tokens`")
        _optional(
            self.budget_manager,
            BudgetManager,
            "AgentWindow.budget_manager",
            "a BudgetManager (or AdaptiveBudgetManager)",
        )
        _optional(self.cache_policy, CachePolicy, "AgentWindow.cache_policy", "a CachePolicy")


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSources:
    """What an agent's windows are built from beyond its instructions, tools, memory and
    knowledge bases.

    - `stage`, `task_context`: text assembled with the instructions into the window's stable
      system message (the stage CRITICAL, the task context HIGH), once per run.
    - `retriever`: a `ContextRetriever` asked before every model call for the request plus
      what the model last tried and found; its `top_k` documents are their own block.
    - `extra`: sources of your own (`ContextSource`), each under a name of its own
      (not one of `OWN_SOURCES`).
    - `shared_pool`: a `LoomMemory` shared with other agents: read for every window
      (`SharedPoolSource`), and given every Task this agent records.
    - `timeout`: how long, in seconds, a source may take before the window is built without
      it (the report says so).
    """

    stage: str = ""
    task_context: str = ""
    retriever: ContextRetriever | None = None
    top_k: int = 5
    extra: Sequence[ContextSource] = ()
    shared_pool: LoomMemory | None = None
    timeout: float = 2.0

    def __post_init__(self) -> None:
        _count(self.top_k, "AgentSources.top_k")
        if isinstance(self.extra, str | bytes) or not isinstance(self.extra, Sequence):
            raise ConfigError(
                f"`AgentSources.extra` must be a sequence of sources, got {self.extra!r:.60}"
            )
        object.__setattr__(self, "extra", tuple(self.extra))
        for source in self.extra:
            _check_extra(source)
        _optional(self.shared_pool, LoomMemory, "AgentSources.shared_pool", "a LoomMemory")
        timeout = self.timeout
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ConfigError(
                f"`AgentSources.timeout` must be a number of seconds > 0, got {timeout!r}"
            )


def _check_extra(source: object) -> None:
    if isinstance(source, UnifiedRetrievalSource) and source.name == "unified_retrieval":
        raise ConfigError(
            "the agent already searches its memory and knowledge bases with a "
            "`UnifiedRetrievalSource` of its own; pass the knowledge bases as "
            "`Agent(..., knowledge_bases=[...])` instead of this source, or give it "
            "another `name=` to search as well"
        )
    name = getattr(source, "name", None)
    if name in OWN_SOURCES:
        raise ConfigError(
            f"source `{name}` in `AgentSources.extra` has the name of a source the agent "
            "adds itself; give it another `name=`"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentLoop:
    """How an agent's run proceeds.

    - `max_turns`: the most model calls one run makes (default 10); a run that reaches it
      ends with ``stopped="max_turns"``.
    - `max_depth`: how many delegations below a top-level run this agent may run as a
      sub-agent (default 5; see `Agent.as_tool`).
    - `progress`: the task's own measure of how far it has come (0..1, or None to count
      turns), read before every model call as `BuildContext.progress` (what an
      `AdaptiveBudgetManager` shifts its split by); default: the share of `max_turns` used.
    - `llm_options`: the options of every model call (`LLMOptions`); the agent adds its
      session as the prompt-cache key and the window's cache breakpoints unless set here.
    """

    max_turns: int = 10
    max_depth: int = 5
    progress: Callable[[], float | None] | None = None
    llm_options: LLMOptions | None = None

    def __post_init__(self) -> None:
        _count(self.max_turns, "AgentLoop.max_turns")
        _count(self.max_depth, "AgentLoop.max_depth")
        if self.progress is not None and not callable(self.progress):
            raise ConfigError(
                "`AgentLoop.progress` must be a function returning the task's progress (0..1, "
                f"or None to count turns), got {self.progress!r}"
            )
        _optional(self.llm_options, LLMOptions, "AgentLoop.llm_options", "an LLMOptions")


MOVED: Final[Mapping[str, tuple[str, str, str]]] = {
    "model_context_window": ("window", "AgentWindow", "model_context_window"),
    "output_reserve_ratio": ("window", "AgentWindow", "output_reserve_ratio"),
    "token_counter": ("window", "AgentWindow", "token_counter"),
    "budget_manager": ("window", "AgentWindow", "budget_manager"),
    "cache_policy": ("window", "AgentWindow", "cache_policy"),
    "max_result_tokens": ("window", "AgentWindow", "max_result_tokens"),
    "stage": ("sources", "AgentSources", "stage"),
    "task_context": ("sources", "AgentSources", "task_context"),
    "context_retriever": ("sources", "AgentSources", "retriever"),
    "retrieval_top_k": ("sources", "AgentSources", "top_k"),
    "shared_pool": ("sources", "AgentSources", "shared_pool"),
    "source_timeout": ("sources", "AgentSources", "timeout"),
    "max_turns": ("loop", "AgentLoop", "max_turns"),
    "max_depth": ("loop", "AgentLoop", "max_depth"),
    "progress": ("loop", "AgentLoop", "progress"),
    "llm_options": ("loop", "AgentLoop", "llm_options"),
}
"""The keyword arguments of `Agent` that became fields of a settings value: for each, the
`Agent` argument, the value's class and its field."""


def moved_argument(name: str) -> Exception:
    """The error for `Agent(name=...)`: a `ConfigError` naming where a moved argument went,
    else the `TypeError` Python raises for an unknown keyword argument."""
    if name not in MOVED:
        return TypeError(f"Agent() got an unexpected keyword argument {name!r}")
    argument, cls, field = MOVED[name]
    return ConfigError(
        f"`Agent({name}=...)` is now a field of `{cls}`: pass `{argument}={cls}({field}=...)`"
        " (`from loomctx import " + cls + "`)"
    )

"""`SessionOptions`: what `ContextController.create_session(**options)` accepts, checked once.

Every option but `sources` and `budget_manager` is stored with the session and comes back
when it is reopened; those two are objects (a knowledge base, a tool registry, a budget
policy), not state, so a reopened session gets them again through `Session.add_source` and
`Session.budget_manager`.

The memory's tiers are one settings value, `tiers` (a `MemoryTiers`, as `LoomMemory` takes).
Earlier versions took the tier sizes as options of their own (`max_l1_size`, `max_l2_size`,
`max_l3_size`): given to `create_session` they are a `ConfigError` saying how to pass them;
a session stored with them reopens with those sizes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from types import MappingProxyType
from typing import Any, Final

from loomctx.context.block import ContextSource
from loomctx.context.budget import BudgetManager
from loomctx.errors import ConfigError, check_int
from loomctx.memory.settings import MemoryTiers

__all__ = ["SessionOptions"]

_OBJECTS = ("sources", "budget_manager")  # options that are objects, not stored state
_TIER_SIZES: Final = ("max_l1_size", "max_l2_size", "max_l3_size")  # earlier versions' options


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionOptions:
    """The options of one session.

    - `system_prompt`: the instructions, placed once at the top of every window.
    - `sources`: extra `ContextSource`s (a knowledge base, tools, skills) for every window.
    - `model_context_window`, `output_reserve_ratio`, `max_output_tokens`: the window's size
      and what is kept free for the reply (see `BudgetManager.available`).
    - `budget_manager`: how the input budget is split among the sources, and between static
      and dynamic context (default `BudgetManager()`); an `AdaptiveBudgetManager` shifts the
      split with the phase of the task, from the `BuildContext` given to `build_context`
      (`phase`, `progress` or `turn_index`).
    - `tiers`: the memory's tiers (`MemoryTiers`: their sizes, the promotion threshold, the
      summaries' length; default `MemoryTiers()`).
    - `priority` (0..1): the session's weight when an aggregate window splits by priority.
    - `metadata`: JSON data of your own (a customer id, a plan), e.g. for
      `ContextController.distribute_filtered` predicates.
    """

    system_prompt: str = ""
    sources: tuple[ContextSource, ...] = ()
    model_context_window: int = 8192
    output_reserve_ratio: float | None = None
    max_output_tokens: int | None = None
    budget_manager: BudgetManager | None = None
    tiers: MemoryTiers = field(default_factory=MemoryTiers)
    priority: float = 0.5
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.system_prompt, str):
            raise ConfigError(
                f"option `system_prompt` must be a string, got {type(self.system_prompt).__name__}"
            )
        if isinstance(self.sources, str | bytes) or not isinstance(self.sources, list | tuple):
            raise ConfigError(
                f"option `sources` must be a list of ContextSources, got {self.sources!r}"
            )
        for source in self.sources:
            if not isinstance(source, ContextSource):
                raise ConfigError(
                    f"option `sources` holds {type(source).__name__}, which is not a "
                    "ContextSource: it needs `name`, `priority` and `async collect(...)`"
                )
        object.__setattr__(self, "sources", tuple(self.sources))
        if self.budget_manager is not None and not isinstance(self.budget_manager, BudgetManager):
            raise ConfigError(
                "option `budget_manager` must be a BudgetManager (or AdaptiveBudgetManager), "
                f"got {type(self.budget_manager).__name__}"
            )
        check_int(self.model_context_window, "option `model_context_window`", minimum=1)
        if not isinstance(self.tiers, MemoryTiers):
            raise ConfigError(
                f"option `tiers` must be a `MemoryTiers` (from loomctx), got {self.tiers!r}"
            )
        BudgetManager.available(
            self.model_context_window,
            output_reserve_ratio=self.output_reserve_ratio,
            max_output_tokens=self.max_output_tokens,
        )
        p = self.priority
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0 <= p <= 1:
            raise ConfigError(f"option `priority` must be a number from 0 to 1, got {p!r}")
        object.__setattr__(self, "priority", float(p))
        if not isinstance(self.metadata, Mapping) or not all(
            isinstance(k, str) for k in self.metadata
        ):
            raise ConfigError(
                f"option `metadata` must be a mapping with string keys, got {self.metadata!r}"
            )
        try:
            plain = json.loads(json.dumps(dict(self.metadata), allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"option `metadata` must be JSON (str, numbers, bools, None, lists, dicts): {exc}"
            ) from None
        object.__setattr__(self, "metadata", MappingProxyType(plain))

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The accepted option names."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> SessionOptions:
        """Options as given to `create_session`; an unknown name is a `ConfigError`."""
        accepted = cls.names()
        for name in options:
            if name in _TIER_SIZES:
                raise ConfigError(
                    f"option `{name}` is a size of the memory's tiers, set in one value: pass "
                    f"`tiers=MemoryTiers({name}=...)` (`from loomctx import MemoryTiers`)"
                )
            if name not in accepted:
                raise ConfigError(
                    f"unknown session option `{name}`; the options are "
                    f"{', '.join(f'`{n}`' for n in accepted)}"
                )
        return cls(**options)

    def to_dict(self) -> dict[str, Any]:
        """Every option but `sources` and `budget_manager`, as JSON data (what the store
        keeps)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _OBJECTS}
        out["metadata"] = dict(self.metadata)
        out["tiers"] = asdict(self.tiers)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SessionOptions:
        """The inverse of `to_dict` (without `sources` and `budget_manager`); options stored
        by earlier versions, with the tier sizes as options of their own, too."""
        options = {k: v for k, v in data.items() if k not in _TIER_SIZES}
        stored = data.get("tiers")
        sizes = {k: data[k] for k in _TIER_SIZES if k in data}
        if isinstance(stored, Mapping) or sizes:
            try:
                options["tiers"] = MemoryTiers(**{**sizes, **(stored or {})})
            except TypeError as exc:
                raise ConfigError(f"stored option `tiers` is not a MemoryTiers: {exc}") from None
        return cls.from_options(options)

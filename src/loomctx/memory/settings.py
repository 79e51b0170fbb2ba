"""The settings values of `LoomMemory`: its tiers (`MemoryTiers`), how its records get
vectors beside its `embedder` (`MemoryEmbedding`) and how search ranks them
(`MemoryRanking`).

Each is a frozen value checked where it is made, so one settings object can be shared by many
memories (every session of a controller, a bench's grid) and a bad value fails at the line
that wrote it, not at the first search.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from loomctx.errors import ConfigError, check_unit
from loomctx.memory._embedders import DEFAULT_EMBEDDER, EmbedderDefault

if TYPE_CHECKING:
    from loomctx.embeddings import Embedder

__all__ = ["MemoryEmbedding", "MemoryRanking", "MemoryTiers"]


def _check_size(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"`{what}` must be an int >= 1, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryTiers:
    """How much each tier holds and what moves a task up (DESIGN.md section 7).

    `max_l1_size` recent tasks stay whole in L1; `max_l2_size` important ones in L2, a task
    entering it when its importance is above `promote_threshold` (0..1); `max_l3_size`
    summaries of what left them in L3, each cut to `summary_tokens` tokens.
    """

    max_l1_size: int = 50
    max_l2_size: int = 100
    max_l3_size: int = 500
    promote_threshold: float = 0.6
    summary_tokens: int = 80

    def __post_init__(self) -> None:
        for name in ("max_l1_size", "max_l2_size", "max_l3_size", "summary_tokens"):
            _check_size(getattr(self, name), name)
        check_unit(self.promote_threshold, "`promote_threshold`")


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryEmbedding:
    """How records get their vectors beside the memory's `embedder`.

    `fast_embedder` adds a second, fast dense ranking: the background embedder gives every
    record its fast vector first (thousands a second), then the `embedder`'s (tens a second),
    so that after a bulk import search is by meaning at once rather than lexical until the
    model catches up. By default it is the shipped `StaticEmbedder` (e5 distilled to a
    word-piece table) when the `embedder` is the shipped e5, else None; None does without.
    `in_background` runs a daemon thread that embeds new records off the write path, so a
    write (and an agent's turn) never waits for an embedding; False leaves it to the caller
    (``memory.background.drain()``), for benches and tests that want every vector at once.
    """

    fast_embedder: Embedder | Literal[EmbedderDefault.EMBEDDER] | None = DEFAULT_EMBEDDER
    in_background: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.in_background, bool):
            raise ConfigError(f"`in_background` must be True or False, got {self.in_background!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryRanking:
    """How `LoomMemory.search` ranks what it finds (the weights `RetrievalSettings` tunes).

    `fusion_weights` weigh the lexical and the dense score (not both 0), `fast_weight` the
    fast embedder's dense score beside them, `neighbour_weight` what a task gains from its
    neighbours in the conversation, `answer_weight` what the message right after a question
    gains from it, `time_decay` how much a task recorded far from the time a query names loses
    and `date_weight` what a turn that names a time gains when a query asks when; each of the
    last five is in 0..1.
    """

    fusion_weights: tuple[float, float] = (0.5, 0.5)
    fast_weight: float = 0.2
    neighbour_weight: float = 0.3
    answer_weight: float = 0.35
    time_decay: float = 0.5
    date_weight: float = 0.5

    def __post_init__(self) -> None:
        weights = self.fusion_weights
        if isinstance(weights, list):  # read from JSON or TOML
            weights = tuple(weights)
            object.__setattr__(self, "fusion_weights", weights)
        if (
            not isinstance(weights, tuple)
            or len(weights) != 2
            or not all(
                isinstance(w, int | float) and not isinstance(w, bool) and math.isfinite(w)
                for w in weights
            )
            or min(weights) < 0
            or max(weights) <= 0
        ):
            raise ConfigError(
                f"`fusion_weights` must be a tuple of (lexical, dense) weights >= 0, not both "
                f"0; got {weights!r}"
            )
        for name in ("fast_weight", "neighbour_weight", "answer_weight", "time_decay",
                     "date_weight"):  # fmt: skip
            check_unit(getattr(self, name), f"`{name}`")

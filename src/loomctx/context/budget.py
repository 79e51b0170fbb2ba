"""Token budgets: how much of the window each context source may use (DESIGN.md section 6).

A build's budget is decided in three steps:

1. `BudgetManager.available` takes the model's window and the output reserve and returns the
   tokens the input may use: ``window - ceil(window * output_reserve_ratio)`` (0.2 by
   default), or ``window - max_output_tokens``.
2. `BudgetManager.allocate` splits that among the sources of the build in proportion to their
   ratios (seed 003's defaults in `DEFAULT_RATIOS`), normalised over the sources present, so
   that the allocations add up to the available tokens exactly.
3. `BudgetManager.redistribute` moves what a source does not need to sources that want more,
   highest priority first (invariant 8, "no stranded tokens").

**Static and dynamic context.** Two parts of a window are limited as wholes, besides the
ratios. The *static* context (the system message: instructions, stage, task context, placed
once as the stable prefix) is must-keep: it is given what it needs, up to `static_limit`
(by default the whole input budget; seed 001 gave it 12,000 of 16,000 tokens), and a build
raises `BudgetExceededError` only when it does not fit. The *dynamic* context (retrieved
knowledge and memory, fenced in the tail of the window and new on every call) takes at most
`dynamic_limit` (by default no limit beyond the ratios; seed 001 gave its schema 4,000).
Seed 001's split of a 16,000-token input is
``BudgetManager(static_tokens=12_000, dynamic_tokens=4_000)``; as shares of any window,
``BudgetManager(static_ratio=0.75, dynamic_ratio=0.25)``. What the two limits leave unused
flows to the other sources as usual.

`AdaptiveBudgetManager` (seed 002) shifts the ratios with the task phase: early in a task
toward retrieval, in the middle toward recent interactions, late toward important memory.
The phase is the caller's (`BuildContext.phase`), or follows the task's progress
(`BuildContext.progress`, turns used of the turns allowed in an `Agent` run), or the count of
model calls (`BuildContext.turn_index`).

Everything here is a pure computation on integers and ratios: no text, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from functools import lru_cache
from types import MappingProxyType
from typing import Final, get_args

from loomctx.context.block import BuildContext, Phase, TokenBudget
from loomctx.errors import ConfigError, check_int

__all__ = [
    "DEFAULT_OUTPUT_RESERVE_RATIO",
    "DEFAULT_PHASE_MULTIPLIERS",
    "DEFAULT_RATIOS",
    "AdaptiveBudgetManager",
    "BudgetManager",
]

DEFAULT_RATIOS: Final[Mapping[str, float]] = MappingProxyType(
    {
        # Seed 003's allocation (it sums to 1.0 over these nine sources).
        "system_prompt": 0.12,
        "user_input": 0.12,
        "tools": 0.15,
        "skills": 0.10,
        "L1_recent": 0.18,
        "L2_important": 0.12,
        "L4_semantic": 0.06,
        "RAG_knowledge": 0.10,
        "agent_output": 0.05,
        # Sources added later. A user-supplied history plays L1's role, so it gets L1's share;
        # `turn` is the in-flight tool exchange of an agent run, as large as a user turn;
        # unified retrieval searches L4 and the knowledge bases together: their two shares.
        "history": 0.18,
        "inherited": 0.06,
        "shared_pool": 0.06,
        "unified_retrieval": 0.16,
        "turn": 0.12,
    }
)
"""The budget ratio of each built-in source, by source name. Ratios are normalised over the
sources present in a build, so they need not sum to 1."""

DEFAULT_OUTPUT_RESERVE_RATIO: Final = 0.2
"""The share of the window kept for the model's reply when no reserve is given."""

DEFAULT_PHASE_MULTIPLIERS: Final[Mapping[Phase, Mapping[str, float]]] = MappingProxyType(
    {
        "early": MappingProxyType(
            {"L4_semantic": 1.6, "RAG_knowledge": 1.6, "unified_retrieval": 1.6}
        ),
        "middle": MappingProxyType({"L1_recent": 1.5, "history": 1.5}),
        "late": MappingProxyType({"L2_important": 1.6, "L4_semantic": 1.2}),
    }
)
"""`AdaptiveBudgetManager`'s default: by phase, the factor each source's ratio is multiplied
by (sources not listed keep a factor of 1)."""

_PHASES: Final[tuple[Phase, ...]] = get_args(Phase)


def _check_fraction(value: object, what: str, fix: str) -> float:
    """`value` as a float if it is a finite number within [0, 1]; else `ConfigError`."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 <= value <= 1
    ):
        raise ConfigError(f"{what} must be a finite number within [0, 1], got {value!r}; {fix}")
    return float(value)


@lru_cache(maxsize=1024)  # a build asks for the same limits of the same budget again and again
def _share_of(available: int, ratio: float) -> int:
    """`available` times `ratio` as written (0.07, not the binary float just above it),
    rounded down: exact, by `Fraction` of the ratio's `repr`."""
    return math.floor(available * Fraction(repr(ratio)))


def _exact(share: float) -> tuple[int, int]:
    """`share` as an exact ratio of integers (numerator, positive denominator)."""
    if isinstance(share, float | int):
        return share.as_integer_ratio()
    return Fraction(share).as_integer_ratio()


def _check_int(value: object, what: str) -> int:
    """`value` if it is an int (and not a bool); else `ConfigError`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{what} must be an int, got {value!r}")
    return value


def _check_unique(names: Sequence[str], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ConfigError(
                f"{what} names source {name!r} twice; give each source a unique `name`"
            )
        seen.add(name)


def _normalise(weights: Mapping[str, float]) -> dict[str, float]:
    """`weights` scaled to sum to 1; an equal split when they are all 0."""
    total = math.fsum(weights.values())
    if total <= 0:
        return {name: 1 / len(weights) for name in weights}
    return {name: w / total for name, w in weights.items()}


class BudgetManager:
    """Splits the input budget among context sources by configurable ratios.

    `ratios` overrides `DEFAULT_RATIOS` source by source (set only what you change; a ratio of
    0 gives a source no share of its own, though it may still receive unused budget). A source
    whose name has no ratio gets `default_ratio`. Each ratio is within [0, 1]; they are
    normalised over the sources of each build, so they need not sum to 1.

    The static / dynamic split (see the module docstring): the static context (the system
    message) may take up to `static_ratio` of the input budget (default 1.0: all of it) and
    at most `static_tokens` tokens (default: no cap in tokens); the dynamic context (fenced
    retrieved knowledge and memory) up to `dynamic_ratio` of it and at most `dynamic_tokens`
    tokens (defaults: no limit). Where a ratio and a token count are both given, the smaller
    limit applies. `static_limit` and `dynamic_limit` say what they come to for a budget.

    Subclasses change `ratios_for` to adapt the split to the build (see
    `AdaptiveBudgetManager`).
    """

    __slots__ = (
        "_ratios",
        "default_ratio",
        "dynamic_ratio",
        "dynamic_tokens",
        "static_ratio",
        "static_tokens",
    )

    def __init__(
        self,
        *,
        ratios: Mapping[str, float] | None = None,
        default_ratio: float = 0.05,
        static_ratio: float = 1.0,
        static_tokens: int | None = None,
        dynamic_ratio: float | None = None,
        dynamic_tokens: int | None = None,
    ) -> None:
        merged = dict(DEFAULT_RATIOS)
        for name, value in (ratios or {}).items():
            if not isinstance(name, str) or not name:
                raise ConfigError(
                    f"`ratios` keys must be source names (non-empty strings), got {name!r}"
                )
            merged[name] = _check_fraction(
                value, f"`ratios[{name!r}]`", "use e.g. 0.1 for a tenth of the input budget"
            )
        self._ratios: Mapping[str, float] = MappingProxyType(merged)
        self.default_ratio: float = _check_fraction(
            default_ratio, "`default_ratio`", "use e.g. 0.05 for sources without a ratio"
        )
        """The ratio of a source whose name has no entry in `ratios`."""
        self.static_ratio: float = _check_fraction(
            static_ratio,
            "`static_ratio`",
            "use e.g. 0.75 to let the system message take up to three quarters of the input",
        )
        """The share of the input budget the static context may take at most."""
        if self.static_ratio == 0:
            raise ConfigError(
                "`static_ratio` must be above 0, got 0; the static context holds the system "
                "instructions, which must always fit (use 1.0, the default, for no limit)"
            )
        self.static_tokens: int | None = check_int(
            static_tokens, "`static_tokens`", minimum=1, none="no limit"
        )
        """The most tokens the static context may take (None: no cap in tokens)."""
        self.dynamic_ratio: float | None = (
            None
            if dynamic_ratio is None
            else _check_fraction(
                dynamic_ratio,
                "`dynamic_ratio`",
                "use e.g. 0.25 to give retrieved context at most a quarter of the input",
            )
        )
        """The share of the input budget the dynamic context may take at most (None: no
        limit beyond the ratios)."""
        self.dynamic_tokens: int | None = check_int(
            dynamic_tokens, "`dynamic_tokens`", minimum=1, none="no limit"
        )
        """The most tokens the dynamic context may take (None: no cap in tokens)."""

    def static_limit(self, available: int) -> int:
        """The most tokens the static context (the system message) may take of an input
        budget of `available` tokens: `static_ratio` of it, capped at `static_tokens`."""
        limit = _share_of(available, self.static_ratio)
        if self.static_tokens is not None:
            limit = min(limit, self.static_tokens)
        return max(0, min(limit, available))

    def dynamic_limit(self, available: int) -> int | None:
        """The most tokens the dynamic context may take of an input budget of `available`
        tokens (None: no limit beyond the ratios)."""
        if self.dynamic_ratio is None and self.dynamic_tokens is None:
            return None
        limit = available
        if self.dynamic_ratio is not None:
            limit = _share_of(available, self.dynamic_ratio)
        if self.dynamic_tokens is not None:
            limit = min(limit, self.dynamic_tokens)
        return max(0, min(limit, available))

    @property
    def ratios(self) -> Mapping[str, float]:
        """The configured ratio of each named source (defaults merged with overrides)."""
        return self._ratios

    def ratio(self, name: str) -> float:
        """The configured ratio of the source called `name`, before normalisation."""
        return self._ratios.get(name, self.default_ratio)

    @staticmethod
    def available(
        model_context_window: int,
        *,
        output_reserve_ratio: float | None = None,
        max_output_tokens: int | None = None,
    ) -> tuple[int, int]:
        """``(available_input_tokens, output_reserve)`` for a model's context window.

        Give at most one of `output_reserve_ratio` (0 <= r < 1; the reserve is
        ``ceil(window * r)``) and `max_output_tokens` (0 <= m < window); with neither, the
        ratio is `DEFAULT_OUTPUT_RESERVE_RATIO`. At least one input token must remain.
        """
        window = _check_int(model_context_window, "`model_context_window`")
        if window < 1:
            raise ConfigError(
                f"`model_context_window` must be >= 1, got {window!r}; pass the model's "
                "context window in tokens, e.g. 128000"
            )
        if output_reserve_ratio is not None and max_output_tokens is not None:
            raise ConfigError(
                f"give `output_reserve_ratio` ({output_reserve_ratio!r}) or `max_output_tokens` "
                f"({max_output_tokens!r}), not both; the reserve is one or the other"
            )
        if max_output_tokens is not None:
            reserve = _check_int(max_output_tokens, "`max_output_tokens`")
            if not 0 <= reserve < window:
                raise ConfigError(
                    f"`max_output_tokens` must be within [0, {window}) for a window of {window} "
                    f"tokens, got {reserve!r}; leave room for the input"
                )
        else:
            if output_reserve_ratio is None:
                ratio = DEFAULT_OUTPUT_RESERVE_RATIO
            else:
                ratio = _check_fraction(
                    output_reserve_ratio,
                    "`output_reserve_ratio`",
                    "use e.g. 0.2 to keep a fifth of the window for the reply",
                )
                if ratio == 1:
                    raise ConfigError(
                        "`output_reserve_ratio` must be below 1, got 1.0; a reserve of the "
                        "whole window leaves no room for the input"
                    )
            # The ratio as written (0.07, not the binary float just above it), so that
            # ceil(100 * 0.07) is 7 and not 8.
            reserve = math.ceil(window * Fraction(repr(ratio)))
        available = window - reserve
        if available < 1:
            raise ConfigError(
                f"an output reserve of {reserve} tokens leaves no input budget in a window of "
                f"{window} tokens; lower `output_reserve_ratio` or `max_output_tokens`"
            )
        return available, reserve

    def ratios_for(self, names: Sequence[str], *, ctx: BuildContext) -> dict[str, float]:
        """The share of each source in `names` for the build `ctx`, summing to 1.

        The configured ratios normalised over `names`; an equal split if they are all 0.
        Names must be unique. Subclasses override this to adapt the split to the build.
        """
        _check_unique(names, "`names`")
        if not names:
            return {}
        return _normalise({name: self.ratio(name) for name in names})

    def allocate(
        self, sources: Sequence[tuple[str, float]], available: int, *, ctx: BuildContext
    ) -> dict[str, TokenBudget]:
        """A `TokenBudget` for each `(name, priority)` in `sources`, splitting `available`.

        Each source's `tokens` is its share (`ratios_for`) of `available`, rounded down; the
        tokens lost to rounding go one each to the largest fractional parts (ties: higher
        priority, then the given order), so the allocations sum to `available` exactly.
        Every `ceiling` is `available`: unused budget may flow to any source.
        """
        available = _check_int(available, "`available`")
        if available < 0:
            raise ConfigError(f"`available` must be >= 0, got {available!r}")
        names = [name for name, _ in sources]
        _check_unique(names, "`sources`")
        for name, priority in sources:
            _check_fraction(
                priority,
                f"the priority of source {name!r} in `sources`",
                "priorities run from 0 to 1",
            )
        if not names:
            return {}
        shares = self.ratios_for(names, ctx=ctx)
        # Exact rational arithmetic in integers: the float shares may sum to 1 +- a few ulps,
        # and the allocations must sum to `available` exactly. Each share is an exact ratio
        # p/q; over their common denominator they are integer weights, and a source's tokens
        # and remainder are `divmod(weight * available, total)` (what `Fraction` arithmetic gives,
        # 3.6 times slower: 186 -> 52 us an allocation of 5 sources; it runs twice a build).
        ratios = [_exact(shares[name]) for name in names]
        denominator = math.lcm(*(q for _, q in ratios))
        weights = [p * (denominator // q) for p, q in ratios]
        total = sum(weights)
        if total <= 0:  # a subclass's ratios_for gave nothing: split equally
            weights, total = [1] * len(names), len(names)
        parts = [divmod(w * available, total) for w in weights]
        tokens = [n for n, _ in parts]
        leftover = available - sum(tokens)
        by_remainder = sorted(range(len(names)), key=lambda i: (-parts[i][1], -sources[i][1], i))
        for i in by_remainder[:leftover]:
            tokens[i] += 1
        return {
            name: TokenBudget(tokens=n, ceiling=available)
            for name, n in zip(names, tokens, strict=True)
        }

    @staticmethod
    def redistribute(
        grants: Mapping[str, int], demands: Mapping[str, int], priorities: Mapping[str, float]
    ) -> dict[str, int]:
        """Final budgets with nothing stranded (DESIGN.md invariant 8), as a pure function.

        Each source keeps ``min(grant, demand)``; what sources needing less than their grant
        free flows to sources whose demand exceeds their grant, highest priority first (ties:
        the larger unmet demand, then the name), each up to its demand. A name missing from
        `grants` has a grant of 0 and one missing from `demands` a demand of 0; every name in
        either must have a priority.

        So: no source ends above its demand, the total never exceeds the total granted, and
        either every demand is met or the whole grant total is handed out.
        """
        names = list(dict.fromkeys([*grants, *demands]))
        for name in names:
            for what, table in (("grants", grants), ("demands", demands)):
                n = table.get(name, 0)
                check_int(n, f"`{what}[{name!r}]` (tokens)", minimum=0)
            if name not in priorities:
                raise ConfigError(
                    f"`priorities` has no entry for source {name!r}; give every source in "
                    "`grants` or `demands` a priority from 0 to 1"
                )
            _check_fraction(
                priorities[name], f"`priorities[{name!r}]`", "priorities run from 0 to 1"
            )
        result = {name: min(grants.get(name, 0), demands.get(name, 0)) for name in names}
        pool = sum(grants.values()) - sum(result.values())
        wanting = [name for name in names if demands.get(name, 0) > grants.get(name, 0)]
        wanting.sort(key=lambda n: (-priorities[n], -(demands.get(n, 0) - grants.get(n, 0)), n))
        for name in wanting:
            if pool == 0:
                break
            extra = min(demands[name] - result[name], pool)
            result[name] += extra
            pool -= extra
        return result


class AdaptiveBudgetManager(BudgetManager):
    """A `BudgetManager` whose ratios shift with the task phase (seed 002).

    Early in a task more budget goes to retrieval (background), in the middle to recent
    interactions (coherence), late to important memory (synthesis): each source's ratio is
    multiplied by its factor for the phase (`DEFAULT_PHASE_MULTIPLIERS`; `multipliers`
    overrides them phase by phase and source by source), then normalised.

    The phase (`phase`) is, in this order: `ctx.phase` when the caller sets it; else the
    task's progress `ctx.progress` (0..1; `Agent` sets it to the share of `max_turns` used
    before the call): early below `early_progress`, late from `late_progress` on, the middle
    in between; else the count of model calls `ctx.turn_index`: early before `early_turns`,
    late from `late_turn` on, the middle in between. The other arguments are
    `BudgetManager`'s.
    """

    __slots__ = ("_multipliers", "early_progress", "early_turns", "late_progress", "late_turn")

    def __init__(
        self,
        *,
        ratios: Mapping[str, float] | None = None,
        default_ratio: float = 0.05,
        multipliers: Mapping[Phase, Mapping[str, float]] | None = None,
        early_turns: int = 2,
        late_turn: int = 8,
        early_progress: float = 1 / 3,
        late_progress: float = 2 / 3,
        static_ratio: float = 1.0,
        static_tokens: int | None = None,
        dynamic_ratio: float | None = None,
        dynamic_tokens: int | None = None,
    ) -> None:
        super().__init__(
            ratios=ratios,
            default_ratio=default_ratio,
            static_ratio=static_ratio,
            static_tokens=static_tokens,
            dynamic_ratio=dynamic_ratio,
            dynamic_tokens=dynamic_tokens,
        )
        merged = {phase: dict(DEFAULT_PHASE_MULTIPLIERS[phase]) for phase in _PHASES}
        for phase, table in (multipliers or {}).items():
            if phase not in merged:
                raise ConfigError(
                    f"`multipliers` has an unknown phase {phase!r}; the phases are "
                    f"{', '.join(map(repr, _PHASES))}"
                )
            for name, factor in table.items():
                if (
                    isinstance(factor, bool)
                    or not isinstance(factor, int | float)
                    or not math.isfinite(factor)
                    or factor < 0
                ):
                    raise ConfigError(
                        f"`multipliers[{phase!r}][{name!r}]` must be a finite number >= 0, got "
                        f"{factor!r}; use 1 to leave a source's ratio unchanged"
                    )
                merged[phase][name] = float(factor)
        self._multipliers: Mapping[Phase, Mapping[str, float]] = MappingProxyType(
            {phase: MappingProxyType(table) for phase, table in merged.items()}
        )
        self.early_turns: int = _check_int(early_turns, "`early_turns`")
        """Turns before this index are in the early phase."""
        self.late_turn: int = _check_int(late_turn, "`late_turn`")
        """Turns from this index on are in the late phase."""
        if not 0 <= early_turns <= late_turn:
            raise ConfigError(
                f"`early_turns` and `late_turn` must satisfy 0 <= early_turns <= late_turn, got "
                f"{early_turns!r} and {late_turn!r}"
            )
        self.early_progress: float = _check_fraction(
            early_progress, "`early_progress`", "e.g. 1/3: the first third of a task is early"
        )
        """Progress below this is the early phase."""
        self.late_progress: float = _check_fraction(
            late_progress, "`late_progress`", "e.g. 2/3: the last third of a task is late"
        )
        """Progress from this on is the late phase."""
        if early_progress > late_progress:
            raise ConfigError(
                f"`early_progress` and `late_progress` must satisfy early_progress <= "
                f"late_progress, got {early_progress!r} and {late_progress!r}"
            )

    @property
    def multipliers(self) -> Mapping[Phase, Mapping[str, float]]:
        """The factor of each source's ratio in each phase (defaults merged with overrides)."""
        return self._multipliers

    def phase(self, ctx: BuildContext) -> Phase:
        """The phase of the build: `ctx.phase` if set, else from `ctx.progress` if set, else
        from `ctx.turn_index` (see the class docstring)."""
        if ctx.phase is not None:
            return ctx.phase
        if ctx.progress is not None:
            if ctx.progress < self.early_progress:
                return "early"
            if ctx.progress >= self.late_progress:
                return "late"
            return "middle"
        if ctx.turn_index < self.early_turns:
            return "early"
        if ctx.turn_index >= self.late_turn:
            return "late"
        return "middle"

    def ratios_for(self, names: Sequence[str], *, ctx: BuildContext) -> dict[str, float]:
        """The configured ratios times the phase's multipliers, normalised over `names`."""
        _check_unique(names, "`names`")
        if not names:
            return {}
        factors = self._multipliers[self.phase(ctx)]
        return _normalise({name: self.ratio(name) * factors.get(name, 1.0) for name in names})

"""`ContextAssembler`: named, prioritised components merged into one prompt within a budget.

The API of seed 000, with the behaviour of DESIGN.md section 9:

- the assembled string, section headers (``# NAME``) and separators included, never counts
  more than `max_tokens` tokens with the assembler's counter;
- a component that does not fit is truncated on a token boundary, preferably at a line or
  sentence end, with a marker that is counted; lower-priority components are dropped;
- a non-truncatable component is included whole, or `assemble()` raises
  `BudgetExceededError` naming it, its size and the budget;
- `get_summary()["total_tokens"]` is the token count of the assembled output;
  `requested_tokens` is what all components would take whole.

The choice of what fits is `plan_packing`, shared with the orchestrator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Literal

from loomctx.context.packing import PackItem, Placement, Status, plan_packing, truncate_text
from loomctx.errors import BudgetExceededError, ConfigError, Oversize, check_int
from loomctx.tokens import CallableCounter, TiktokenCounter, TokenCounter

__all__ = ["ComponentPriority", "ContextAssembler", "ContextComponent"]

_SEPARATOR = "\n\n"
# The sum of per-section counts can differ from the count of the joined text by a token at a
# boundary; re-planning with the excess removed converges in one or two rounds.
_MAX_REPLANS = 8


class ComponentPriority(IntEnum):
    """Conventional priorities (seed 000); any int from 0 to 100 is accepted."""

    CRITICAL = 100
    HIGH = 90
    MEDIUM = 70
    LOW = 50
    OPTIONAL = 30


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextComponent:
    """One named piece of context, as added: its content, priority and size in tokens."""

    name: str
    content: str
    priority: int
    token_count: int
    truncatable: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class _Outcome:
    component: ContextComponent
    status: Status
    content: str  # what went into the output ("" when dropped)
    tokens: int  # tokens of `content`
    reason: str


def _as_counter(token_counter: TokenCounter | Callable[[str], int] | None) -> TokenCounter:
    if token_counter is None:
        return TiktokenCounter()
    if isinstance(token_counter, TokenCounter):
        return token_counter
    if callable(token_counter):
        return CallableCounter(token_counter)
    raise ConfigError(
        f"`token_counter` must be a TokenCounter or a function text -> int, "
        f"not {type(token_counter).__name__}"
    )


class ContextAssembler:
    """Assembles prioritised components into one prompt string that fits `max_tokens`.

    >>> assembler = ContextAssembler(max_tokens=4000)
    >>> assembler.add_component("base_instructions", "You are helpful.", ComponentPriority.CRITICAL,
    ...                         truncatable=False)
    >>> assembler.add_component("retrieved_docs", "Doc 1: ...", ComponentPriority.HIGH)
    >>> prompt = assembler.assemble()

    `token_counter` is a `TokenCounter` (default: `TiktokenCounter()`, o200k_base) or a plain
    function ``text -> int``. `order` is ``"priority"`` (highest first, the default) or
    ``"insertion"`` (the order components were added).
    """

    def __init__(
        self,
        max_tokens: int = 16000,
        token_counter: TokenCounter | Callable[[str], int] | None = None,
        *,
        order: Literal["priority", "insertion"] = "priority",
        min_truncated_tokens: int = 8,
    ) -> None:
        check_int(max_tokens, "`max_tokens`", minimum=1)
        if order not in ("priority", "insertion"):
            raise ConfigError(f"`order` must be 'priority' or 'insertion', got {order!r}")
        self.max_tokens = max_tokens
        self.token_counter = _as_counter(token_counter)
        self.order = order
        self.min_truncated_tokens = min_truncated_tokens
        self.components: list[ContextComponent] = []
        self._outcomes: list[_Outcome] | None = None
        self._output = ""

    def add_component(
        self, name: str, content: str, priority: int, truncatable: bool = True
    ) -> None:
        """Add a component; empty content is ignored (seed 000).

        `truncatable=False` marks content that must be included whole or not at all:
        `assemble()` raises `BudgetExceededError` rather than drop or cut it.
        """
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"a component needs a non-empty `name`, got {name!r}")
        if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 100:
            raise ConfigError(
                f"priority of component {name!r} must be an int from 0 to 100 "
                f"(see ComponentPriority), got {priority!r}"
            )
        if content is None or content == "":
            return
        if not isinstance(content, str):
            raise ConfigError(
                f"content of component {name!r} must be a str, not {type(content).__name__}"
            )
        self.components.append(
            ContextComponent(
                name=name,
                content=content,
                priority=int(priority),
                token_count=self.token_counter.count(content),
                truncatable=truncatable,
            )
        )
        self._outcomes = None

    def clear(self) -> None:
        """Remove every component."""
        self.components.clear()
        self._outcomes = None

    def assemble(self) -> str:
        """The components merged as ``# NAME`` sections, within `max_tokens` tokens."""
        counter = self.token_counter
        sep = counter.count(_SEPARATOR)
        headers = [self._header(c) for c in self.components]
        costs = [
            counter.count(h) + c.token_count + sep
            for h, c in zip(headers, self.components, strict=True)
        ]
        budget = self.max_tokens + sep  # n sections have n - 1 separators
        for _ in range(_MAX_REPLANS):
            try:
                placements = plan_packing(
                    self._items(costs), budget, min_truncated_tokens=self.min_truncated_tokens
                )
            except BudgetExceededError as exc:  # report sections, without the separator slack
                sized = [Oversize(name=o.name, tokens=o.tokens - sep) for o in exc.offenders]
                raise BudgetExceededError(offenders=sized, budget=self.max_tokens) from None
            outcomes = self._realise(placements, headers, sep)
            output = _SEPARATOR.join(
                headers[i] + o.content for i, o in self._in_output_order(outcomes)
            )
            excess = counter.count(output) - self.max_tokens
            if excess <= 0:
                self._outcomes, self._output = outcomes, output
                return output
            budget -= excess
        required = [c for c in self.components if not c.truncatable]
        raise BudgetExceededError(
            offenders=[Oversize(name=c.name, tokens=c.token_count) for c in required],
            budget=self.max_tokens,
            hint="with their section headers and separators they do not fit",
        )

    def get_summary(self) -> dict[str, Any]:
        """What the last `assemble()` produced (assembling first if needed).

        `total_tokens` counts the assembled output; `requested_tokens` is what every component
        would take whole, headers and separators included; `overflow` is the excess of the
        request over the budget. Components are listed in priority order with their
        requested `tokens`, `included_tokens`, `status` (included / truncated / dropped) and
        the `reason` for any cut.
        """
        if self._outcomes is None:
            self.assemble()
        assert self._outcomes is not None
        counter = self.token_counter
        requested = counter.count(
            _SEPARATOR.join(self._header(c) + c.content for c in self.components)
        )
        ranked = sorted(self._outcomes, key=lambda o: -o.component.priority)
        return {
            "total_tokens": counter.count(self._output),
            "requested_tokens": requested,
            "budget": self.max_tokens,
            "overflow": max(0, requested - self.max_tokens),
            "order": self.order,
            "token_counter": counter.name,
            "components": [
                {
                    "name": o.component.name,
                    "priority": o.component.priority,
                    "truncatable": o.component.truncatable,
                    "tokens": o.component.token_count,
                    "included_tokens": o.tokens,
                    "status": o.status,
                    "reason": o.reason,
                }
                for o in ranked
            ],
        }

    @staticmethod
    def _header(component: ContextComponent) -> str:
        return f"# {component.name.upper()}\n"

    def _items(self, costs: list[int]) -> list[PackItem]:
        return [
            PackItem(
                key=c.name,
                tokens=cost,
                priority=c.priority,
                required=not c.truncatable,
                truncatable=c.truncatable,
            )
            for c, cost in zip(self.components, costs, strict=True)
        ]

    def _realise(self, placements: list[Placement], headers: list[str], sep: int) -> list[_Outcome]:
        counter = self.token_counter
        outcomes: list[_Outcome] = []
        for c, header, p in zip(self.components, headers, placements, strict=True):
            content, status, reason = c.content, p.status, p.reason
            if p.status == "truncated":
                allowance = p.tokens - sep - counter.count(header)
                content = truncate_text(counter, c.content, allowance)
                if content:
                    reason = f"cut from {c.token_count} to {counter.count(content)} tokens to fit"
                else:
                    status, reason = "dropped", f"{allowance} tokens left: too few for any of it"
            elif p.status == "dropped":
                content = ""
            tokens = counter.count(content)
            outcomes.append(
                _Outcome(component=c, status=status, content=content, tokens=tokens, reason=reason)
            )
        return outcomes

    def _in_output_order(self, outcomes: list[_Outcome]) -> list[tuple[int, _Outcome]]:
        kept = [(i, o) for i, o in enumerate(outcomes) if o.status != "dropped"]
        if self.order == "priority":
            kept.sort(key=lambda pair: -pair[1].component.priority)  # stable: ties by insertion
        return kept

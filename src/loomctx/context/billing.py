"""The cost model: what a call's input costs under a provider's prompt cache.

Every price is a multiple of the model's plain input price, so a bill is in *plain input
tokens* whatever the model's dollar price. A prompt's tokens fall in three parts:

- **cached**: a prefix the provider reads from its cache (the previous call of the
  conversation wrote it, and it has not expired);
- **written**: from there up to the last cache breakpoint of this call: processed and
  written to the cache for the next call (Anthropic bills it above the plain price);
- **plain**: what follows the last breakpoint, billed at the plain input price.

Anthropic (`ANTHROPIC`) caches only what a ``cache_control`` breakpoint marks: a read costs
0.1x, a write 1.25x with the default 5-minute cache (2.0x with the 1-hour cache,
`ANTHROPIC_1H`), what follows the last breakpoint 1.0x. An entry lives `lifetime` seconds
after its last use (300 by default). A prefix shorter than `min_tokens` (1,024 on Sonnet and
Opus; Haiku wants 2,048) is not cached. Loom marks the end of the stable prefix, of the
frozen summary, of the history and of everything before the dynamic tail
(`loomctx.context.render.Layout.breakpoints`), so its tail is billed at the plain price.

OpenAI caches automatically (`breakpoints=False`): the longest prefix of an earlier prompt,
in steps of 128 tokens from 1,024, with no write premium. Reads cost 0.5x on the gpt-4o and
o1 families (`OPENAI`), 0.25x on gpt-4.1, o3 and o4-mini, and 0.1x on the gpt-5 family
(`OPENAI_GPT5`), per OpenAI's published prices. A prefix stays cached for 5 to 10 minutes
of inactivity (up to an hour off-peak); the model takes the short end, 300 s, so that a
prediction errs towards a miss.

`predict` turns a window's facts (its size, the prefix it repeats from the session's
previous window, the prefix sizes at its breakpoints and at the previous window's, and
whether the cache went cold in between) into a `CachePrediction`; `bill` prices one. Pure
functions, no I/O: the orchestrator, the agent, the proxy, the inspector and the cost bench
all use this one model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from loomctx.errors import ConfigError

__all__ = [
    "ANTHROPIC",
    "ANTHROPIC_1H",
    "CACHE_TTLS",
    "MISS_FLOOR",
    "OPENAI",
    "OPENAI_GPT5",
    "PROVIDERS",
    "CachePrediction",
    "CachePricing",
    "ReportedUsage",
    "pricing_for",
    "unexpected_miss",
]

CACHE_TTLS: Final = (None, "5m", "1h")
"""The ``ttl`` values a breakpoint may ask for (None: the provider's default)."""

_OPENAI_STEP: Final = 128  # OpenAI's cache hits grow in steps of this many tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class CachePricing:
    """How one provider and model family bills a prompt under its cache.

    `read`, `write` and `plain` are multiples of the plain input price for a cached token, a
    token written to the cache, and a token after the last breakpoint. `lifetime` is how many
    seconds an unused entry lives; `min_tokens` the shortest prefix the provider caches;
    `breakpoints` True when only prefixes the request marks are cached (Anthropic), False
    for an automatic prefix cache (OpenAI: every prompt is cached, nothing is written at a
    premium). `ttl` is the ``cache_control`` ``ttl`` Loom's own breakpoints ask for under
    this pricing (``"1h"`` for `ANTHROPIC_1H`; None: the provider's default, five minutes on
    Anthropic), so that the cache a window is billed for is the cache it asks for."""

    name: str
    read: float
    write: float
    plain: float = 1.0
    lifetime: float = 300.0
    min_tokens: int = 1024
    breakpoints: bool = True
    ttl: str | None = None

    def __post_init__(self) -> None:
        for field_name in ("read", "write", "plain"):
            value = getattr(self, field_name)
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise ConfigError(
                    f"`{field_name}` is a multiple of the input price and cannot be negative; "
                    f"got {value!r}"
                )
        if not isinstance(self.lifetime, int | float) or self.lifetime <= 0:
            raise ConfigError(f"`lifetime` is in seconds and must be > 0, got {self.lifetime!r}")
        if isinstance(self.min_tokens, bool) or not isinstance(self.min_tokens, int):
            raise ConfigError(f"`min_tokens` must be an int, got {self.min_tokens!r}")
        if self.min_tokens < 0:
            raise ConfigError(f"`min_tokens` cannot be negative, got {self.min_tokens!r}")
        if self.ttl not in CACHE_TTLS:
            raise ConfigError(
                f'`ttl` is a cache lifetime Anthropic accepts, "5m" or "1h" (or None for its '
                f"default); got {self.ttl!r}"
            )
        if self.ttl is not None and not self.breakpoints:
            raise ConfigError(
                f"`ttl` is asked for on cache breakpoints; pricing {self.name!r} has none "
                "(`breakpoints=False`, an automatic prefix cache): leave `ttl` None"
            )

    def with_lifetime(self, seconds: float) -> CachePricing:
        """This pricing with a cache that lives `seconds` (an Anthropic cache configured for
        one hour bills its writes at 2.0x: use `ANTHROPIC_1H` for that)."""
        return replace(self, lifetime=seconds)

    def bill(self, prediction: CachePrediction) -> float:
        """What `prediction`'s tokens cost, in plain input tokens."""
        return self.billed(
            cached=prediction.cached, written=prediction.written, plain=prediction.plain
        )

    def billed(self, *, cached: int, written: int, plain: int) -> float:
        """What `cached`, `written` and `plain` tokens cost, in plain input tokens."""
        return cached * self.read + written * self.write + plain * self.plain

    def billed_marked_at_end(self, *, prompt: int, cached: int) -> float:
        """A `prompt`-token call of which `cached` tokens are read from the cache, marked
        as a client marks it: one breakpoint at the end, so everything new is written (at
        the plain price on an automatic cache)."""
        new = max(0, prompt - cached)
        return cached * self.read + new * (self.write if self.breakpoints else self.plain)

    def predict(
        self,
        *,
        tokens: int,
        reused: int,
        marks: Sequence[int],
        previous_marks: Sequence[int] = (),
        cold: bool = False,
    ) -> CachePrediction:
        """The predicted split of a `tokens`-token prompt that repeats, in place, its first
        `reused` tokens from the previous prompt of the conversation.

        `marks` are the prompt's sizes up to each of its cache breakpoints (tokens, any
        order), `previous_marks` those of the previous prompt (what it wrote to the cache).
        `cold`: the cache expired since (the session idle longer than `lifetime`), so
        nothing is read. With `breakpoints`, the read is the longest previous entry within
        the repeated prefix, and the write runs from there to this prompt's last breakpoint;
        without, the read is the repeated prefix in the provider's steps and nothing is
        written at a premium."""
        tokens = max(0, tokens)
        reused = min(max(0, reused), tokens)
        if not self.breakpoints:
            cached = 0 if cold or reused < self.min_tokens else _step_down(reused, self.min_tokens)
            return CachePrediction(cached=cached, written=0, plain=tokens - cached)
        entries = [m for m in previous_marks if self.min_tokens <= m <= reused]
        cached = 0 if cold or not entries else max(entries)
        ends = [m for m in marks if self.min_tokens <= m <= tokens]
        written = max(0, max(ends) - cached) if ends else 0
        return CachePrediction(cached=cached, written=written, plain=tokens - cached - written)


def _step_down(tokens: int, floor: int) -> int:
    return floor + (tokens - floor) // _OPENAI_STEP * _OPENAI_STEP


@dataclass(frozen=True, slots=True, kw_only=True)
class CachePrediction:
    """A call's input tokens as a provider's cache is predicted to bill them: `cached`
    (read), `written` (to the cache, up to the last breakpoint) and `plain` (the rest)."""

    cached: int
    written: int
    plain: int

    @property
    def tokens(self) -> int:
        """The whole prompt."""
        return self.cached + self.written + self.plain


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportedUsage:
    """What a provider reported for one call's prompt, to set beside the prediction:
    `input` every prompt token (read and written ones included), `cache_read` those read
    from its cache, `cache_write` those written to it (Anthropic's
    ``cache_creation_input_tokens``; 0 where a provider does not report writes)."""

    input: int
    cache_read: int = 0
    cache_write: int = 0

    def to_dict(self) -> dict[str, int]:
        """Plain JSON."""
        return {"input": self.input, "cache_read": self.cache_read, "cache_write": self.cache_write}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReportedUsage:
        """The inverse of `to_dict` (missing counts are 0)."""
        return cls(
            input=int(data.get("input") or 0),
            cache_read=int(data.get("cache_read") or 0),
            cache_write=int(data.get("cache_write") or 0),
        )


MISS_FLOOR: Final = 1024
"""Below this many predicted cached tokens, a miss is not flagged (too small to matter, and
below the providers' shortest cached prefix)."""


def unexpected_miss(predicted_cached: int, reported: ReportedUsage | None) -> bool:
    """Whether the provider's cache missed unexpectedly: more than `MISS_FLOOR` tokens were
    predicted cached and the provider reported reading under half of them (the cache was
    evicted early, the prompt's prefix changed, or its breakpoints were not sent)."""
    if reported is None or predicted_cached <= MISS_FLOOR:
        return False
    return reported.cache_read < 0.5 * predicted_cached


ANTHROPIC: Final = CachePricing(name="anthropic", read=0.1, write=1.25)
"""Anthropic's 5-minute prompt cache (the default)."""

ANTHROPIC_1H: Final = CachePricing(
    name="anthropic-1h", read=0.1, write=2.0, lifetime=3600.0, ttl="1h"
)
"""Anthropic's 1-hour prompt cache (Loom's breakpoints ask for ``"ttl": "1h"``)."""

OPENAI: Final = CachePricing(name="openai", read=0.5, write=1.0, breakpoints=False)
"""OpenAI's automatic prefix cache on the gpt-4o and o1 families (reads at half price)."""

OPENAI_GPT41: Final = CachePricing(name="openai-gpt-4.1", read=0.25, write=1.0, breakpoints=False)
"""OpenAI's automatic prefix cache on gpt-4.1, o3 and o4-mini (reads at a quarter)."""

OPENAI_GPT5: Final = CachePricing(name="openai-gpt-5", read=0.1, write=1.0, breakpoints=False)
"""OpenAI's automatic prefix cache on the gpt-5 family (reads at a tenth)."""

PROVIDERS: Final = {p.name: p for p in (ANTHROPIC, ANTHROPIC_1H, OPENAI, OPENAI_GPT41, OPENAI_GPT5)}
"""Every built-in pricing, by name."""

_OPENAI_FAMILIES: Final = (
    ("gpt-5", OPENAI_GPT5),
    ("gpt-4.1", OPENAI_GPT41),
    ("o3", OPENAI_GPT41),
    ("o4", OPENAI_GPT41),
)


def pricing_for(provider: str, model: str = "", *, ttl: str | None = None) -> CachePricing:
    """The pricing of `provider` (``anthropic``, ``openai``, or a name in `PROVIDERS`) for
    `model` (an OpenAI model's name picks its family; unknown ones get `OPENAI`); `ttl`
    ``"1h"``: Anthropic's one-hour cache (`ANTHROPIC_1H`), which its breakpoints then ask for."""
    if provider in PROVIDERS and provider not in ("openai", "anthropic"):
        return PROVIDERS[provider]
    if provider == "anthropic":
        return ANTHROPIC_1H if ttl == "1h" else ANTHROPIC
    if provider == "openai":
        name = model.strip().lower().rsplit("/", 1)[-1]
        return next((p for prefix, p in _OPENAI_FAMILIES if name.startswith(prefix)), OPENAI)
    known = ", ".join(sorted(PROVIDERS))
    raise ConfigError(f"unknown provider {provider!r} for pricing; use one of: {known}")

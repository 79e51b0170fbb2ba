"""Every error Loom raises on purpose derives from `LoomError`.

The tree::

    LoomError
    ├── ConfigError            a setting or argument is invalid (also a `ValueError`)
    │   ├── MessageFormatError a message or wire-format payload is malformed
    │   └── IngestLimitError   a folder ingest would exceed one of its limits
    ├── TokenizerError         no tokenizer could be built for a model or encoding
    ├── BudgetExceededError    must-keep content does not fit the token budget
    ├── StoreError             a memory store failed to read or write
    │   ├── ConflictError      a guarded write found its namespace changed by another writer
    │   └── StoreClosedError   a store was used after `close()`
    ├── ProviderError          an LLM provider call failed
    ├── EmbeddingError         an embedding model failed to load or returned garbage
    ├── ToolError              a tool was defined or called wrongly
    ├── BusClosedError         an event bus is closed (also a `RuntimeError`)
    ├── BusLoopError           an event bus is used from a second event loop (a `RuntimeError`)
    └── MissingExtraError      an optional dependency is not installed (also an `ImportError`)

Messages say what was wrong and how to fix it; identifiers appear in backticks and values
through `!r`, so that a message can be pasted into a search box or a bug report as is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

__all__ = [
    "BudgetExceededError",
    "BusClosedError",
    "BusLoopError",
    "ConfigError",
    "ConflictError",
    "EmbeddingError",
    "IngestLimitError",
    "LoomError",
    "MessageFormatError",
    "MissingExtraError",
    "Oversize",
    "ProviderError",
    "StoreClosedError",
    "StoreError",
    "TokenizerError",
    "ToolError",
]


class LoomError(Exception):
    """The root of every error Loom raises on purpose."""


class ConfigError(LoomError, ValueError):
    """A setting or an argument is invalid: the message names it and the accepted values."""


def check_unit(value: object, what: str) -> float:
    """`value` as a float if it is a number in 0..1 (not a bool, not NaN); else a
    `ConfigError` saying "<what> must be in 0..1"."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ConfigError(f"{what} must be in 0..1, got {value!r}")
    return float(value)


@overload
def check_int(value: object, what: str, *, minimum: int, none: None = None) -> int: ...
@overload
def check_int(value: object, what: str, *, minimum: int, none: str) -> int | None: ...
def check_int(value: object, what: str, *, minimum: int, none: str | None = None) -> int | None:
    """`value` if it is an int >= `minimum` (a bool is not one, nor a whole float); else a
    `ConfigError` saying "<what> must be an int >= <minimum>". With `none`, what None means
    (such as "no limit"): None is then accepted, and the message offers it."""
    if value is None and none is not None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        offer = "" if none is None else f" or None ({none})"
        raise ConfigError(f"{what} must be an int >= {minimum}{offer}, got {value!r}")
    return value


class MessageFormatError(ConfigError):
    """A message, a history or a provider wire-format payload is malformed."""


class IngestLimitError(ConfigError):
    """A folder ingest found more than one of its limits allows, before writing anything.

    `limit` names the setting (``"max_files"`` or ``"max_total_bytes"``), `allowed` is its
    value and `found` what the ingest had found when it stopped (more may follow).
    """

    def __init__(self, message: str, *, limit: str, allowed: int, found: int) -> None:
        self.limit = limit
        self.allowed = allowed
        self.found = found
        super().__init__(message)


class TokenizerError(LoomError):
    """No tokenizer could be built for the requested model, encoding or file."""


class StoreError(LoomError):
    """A memory store failed to read or write."""


class ConflictError(StoreError):
    """A batch guarded by `Expect` found its namespace changed since the caller read it
    (another writer, often another process, came first); nothing of the batch was written.
    Read the namespace again and retry: `LoomMemory` does so by itself."""


class StoreClosedError(StoreError):
    """A store was used after its `close()`: open a new one. (A background worker that
    meets it, such as the embedding thread, stops instead of retrying.)"""


class ProviderError(LoomError):
    """An LLM provider call failed (after any retries the provider is configured to make)."""


class EmbeddingError(LoomError):
    """An embedding model failed to load or returned something that is not an embedding."""


class ToolError(LoomError):
    """A tool was defined wrongly, or called with arguments that do not fit its schema."""


class BusClosedError(LoomError, RuntimeError):
    """The event bus is closed (or closing): it accepts no new publishes or subscriptions."""


class BusLoopError(LoomError, RuntimeError):
    """An event bus was used from an event loop other than the one it runs on, while that one
    is still open with workers on it; the message says how to fix it."""


class MissingExtraError(LoomError, ImportError):
    """An optional dependency is needed for a feature; the message names the extra to install."""

    def __init__(self, *, feature: str, extra: str, module: str) -> None:
        self.feature = feature
        self.extra = extra
        self.module = module
        super().__init__(
            f"{feature} needs the `{module}` package, which is not installed; "
            f"install it with `pip install 'loomctx[{extra}]'`."
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Oversize:
    """One must-keep component that did not fit: its name and size in tokens."""

    name: str
    tokens: int


class BudgetExceededError(LoomError):
    """Content that must be kept whole does not fit the token budget.

    `offenders` lists each must-keep component that could not be placed with its size in
    tokens; `budget` is the budget it had to fit in.
    """

    def __init__(self, *, offenders: Sequence[Oversize], budget: int, hint: str = "") -> None:
        self.offenders = tuple(offenders)
        self.budget = budget
        parts = ", ".join(f"`{o.name}` ({o.tokens} tokens)" for o in self.offenders)
        total = sum(o.tokens for o in self.offenders)
        fix = hint or (
            "raise the budget, shorten that content, or mark it truncatable so it may be cut"
        )
        super().__init__(
            f"must-keep content does not fit the budget of {budget} tokens: {parts} "
            f"(needs {total} tokens in all); {fix}."
        )

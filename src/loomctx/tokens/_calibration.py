"""`UsageCalibration`: a safety margin for estimated counts, learnt from providers' usage."""

from __future__ import annotations

import math
import threading

from loomctx.errors import ConfigError, check_int

__all__ = ["UsageCalibration"]


class UsageCalibration:
    """How a provider's reported input tokens compare to Loom's count, learnt per model.

    `record(model, counted=..., reported=...)` after each call: `counted` is what Loom's
    counter gave for the request (messages and tools), `reported` the input tokens the
    provider billed (cached ones included). `factor(model)` is what to multiply Loom's count
    by to stay above the provider's, with a margin that shrinks as evidence comes in:

    - no calls yet: `prior` (default 1.25: Claude's tokenizer counts English text up to about
      a fifth above o200k, and code and other scripts more);
    - after n calls with ratios of mean m and standard deviation s:
      ``m * (1 + min_margin) + 2 * s / sqrt(n) + max(0, prior - m) / (n + 1)``: the
      observed ratio, a two-sigma allowance for its spread, and what is left of the prior's
      caution, which fades with every call.

    The last `window` calls per model are kept (a model's ratio drifts with what the
    conversation talks about). Thread-safe. `safe_window(model, window)` is `window` divided
    by the factor: the window to give the context engine so that the provider's count of
    what it builds fits the real one.
    """

    def __init__(self, *, prior: float = 1.25, min_margin: float = 0.02, window: int = 200) -> None:
        if not math.isfinite(prior) or prior < 1:
            raise ConfigError(f"`prior` must be a number >= 1, got {prior!r}")
        if not math.isfinite(min_margin) or not 0 <= min_margin < 1:
            raise ConfigError(f"`min_margin` must be in 0..1, got {min_margin!r}")
        check_int(window, "`window`", minimum=1)
        self.prior = prior
        self.min_margin = min_margin
        self.window = window
        self._ratios: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def record(self, model: str, *, counted: int, reported: int) -> None:
        """One call's counts. Calls with nothing counted or reported teach nothing and are
        skipped; a negative count is an error."""
        if counted < 0 or reported < 0:
            raise ConfigError(
                f"token counts must be >= 0, got counted={counted!r}, reported={reported!r}"
            )
        if counted == 0 or reported == 0:
            return
        with self._lock:
            ratios = self._ratios.setdefault(model, [])
            ratios.append(reported / counted)
            del ratios[: max(0, len(ratios) - self.window)]

    def samples(self, model: str) -> int:
        """How many calls of `model` the factor is learnt from."""
        with self._lock:
            return len(self._ratios.get(model, ()))

    def factor(self, model: str) -> float:
        """Loom's count times this stays above the provider's (see the class docstring)."""
        with self._lock:
            ratios = list(self._ratios.get(model, ()))
        n = len(ratios)
        if n == 0:
            return self.prior
        mean = sum(ratios) / n
        spread = math.sqrt(sum((r - mean) ** 2 for r in ratios) / (n - 1)) if n > 1 else 0.0
        return (
            mean * (1 + self.min_margin)
            + 2 * spread / math.sqrt(n)
            + max(0.0, self.prior - mean) / (n + 1)
        )

    def safe_window(self, model: str, window: int) -> int:
        """`window` in Loom's tokens that the provider counts as at most `window`."""
        return max(1, math.floor(window / self.factor(model)))

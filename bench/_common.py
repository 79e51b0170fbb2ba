"""Shared helpers for the benchmarks: real text from ../shared/data, and timing statistics."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
LOCOMO = DATA / "locomo" / "locomo10_dev.json"


def locomo_turns() -> list[str]:
    """Every LoCoMo dialogue turn as ``"Speaker: text"``, in conversation order."""
    if not LOCOMO.is_file():
        raise SystemExit(f"benchmark data not found at {LOCOMO}: clone next to ../shared")
    turns = []
    for conv in json.loads(LOCOMO.read_text(encoding="utf-8")):
        sessions = conv["conversation"]
        keys = sorted(
            (k for k in sessions if k.startswith("session_") and isinstance(sessions[k], list)),
            key=lambda k: int(k.split("_")[1]),
        )
        for key in keys:
            turns += [f"{t['speaker']}: {t['text']}" for t in sessions[key]]
    return turns


def timed(fn: Callable[[], object], *, repeat: int, warmup: int = 2) -> list[float]:
    """Wall-clock seconds of `repeat` calls of `fn`, after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def p95_ms(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] * 1000

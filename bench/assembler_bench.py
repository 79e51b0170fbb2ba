"""ContextAssembler on 50 components of ~500 tokens of real text (LoCoMo turns).

Run: .venv/bin/python bench/assembler_bench.py
Reports the median and p95 of repeated runs, side by side in one run, for three budgets:
everything fits, about half fits (truncation and drops), and a tight budget.
Each run builds a fresh assembler and adds the 50 components (counts served by the counter's
cache after the first run, as in an agent loop where most components repeat) and assembles.
"""

from __future__ import annotations

from _common import locomo_turns, median_ms, p95_ms, timed

from loomctx import TiktokenCounter
from loomctx.context import ContextAssembler

COUNTER = TiktokenCounter()


def components(n: int = 50, size: int = 500) -> list[tuple[str, str, int]]:
    turns = iter(locomo_turns())
    out = []
    for i in range(n):
        lines: list[str] = []
        while COUNTER.count("\n".join(lines)) < size:
            lines.append(next(turns))
        out.append((f"component_{i:02d}", "\n".join(lines), 30 + (i * 37) % 71))
    return out


def run(
    parts: list[tuple[str, str, int]], budget: int, counter: TiktokenCounter
) -> dict[str, object]:
    a = ContextAssembler(max_tokens=budget, token_counter=counter)
    for i, (name, content, priority) in enumerate(parts):
        a.add_component(name, content, priority, truncatable=i % 10 != 0)
    a.assemble()
    return a.get_summary()


def main() -> None:
    parts = components()
    total = sum(COUNTER.count(c) for _, c, _ in parts)
    print(f"50 components, {total} tokens in all (mean {total // 50})")
    print(
        f"{'budget':>8} {'p50 ms':>8} {'p95 ms':>8} {'cold ms':>8} {'output':>7} "
        "included/truncated/dropped"
    )
    for budget in (32_000, 12_000, 4_000):
        summary = run(parts, budget, COUNTER)
        statuses = [c["status"] for c in summary["components"]]  # type: ignore[index]
        samples = timed(lambda b=budget: run(parts, b, COUNTER), repeat=41)
        cold = timed(lambda b=budget: run(parts, b, TiktokenCounter(cache_entries=0)), repeat=7)
        print(
            f"{budget:>8} {median_ms(samples):8.2f} {p95_ms(samples):8.2f} {median_ms(cold):8.2f} "
            f"{summary['total_tokens']:>7} "
            f"{statuses.count('included')}/{statuses.count('truncated')}/{statuses.count('dropped')}"
        )


if __name__ == "__main__":
    main()

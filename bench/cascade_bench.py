"""The embedding cascade on LoCoMo (issue 19): lexical + transformer + static vectors, fused.

Run from the repository root:
    .venv/bin/python bench/cascade_bench.py [PATH] [--fast-weights 0.1,0.2,0.3] [--limit N]

Per conversation, its turns are stored once and embedded by both models (the transformer's
vectors come from the bench cache, `loomctx bench`'s); memories over that store then search
with each configuration, and each is measured as ``loomctx bench locomo --stages`` measures:
R@5 / R@10 of ``LoomMemory.search`` ("fused") and of the whole pipeline ("final"), and the
gold turns inside a 2,000-token window.

Configurations, each a state a memory can be in after a bulk import:
- lexical: no vectors at all (no embedder; or every record still unembedded);
- lexical+static: the static vectors only (a cascade whose transformer has not caught up);
- lexical+e5: today's default, every record embedded by the transformer;
- lexical+e5+static (w): both for every record, the static ranking at fusion weight w;
- partial (w): both, but the transformer has embedded only the older half of the turns.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from loomctx import MemoryEmbedding, MemoryRanking
from loomctx.embeddings import StaticEmbedder, default_embedder
from loomctx.evaluation._ranking import Rankers
from loomctx.evaluation._vector_cache import CachedEmbedder, default_cache_dir
from loomctx.evaluation.datasets import load_locomo
from loomctx.evaluation.locomo import LOCOMO_KS, _locomo_report, _locomo_rows, _locomo_tasks
from loomctx.memory.core import LoomMemory
from loomctx.memory.enrichment import BackgroundEmbedder
from loomctx.retrieval.settings import RetrievalSettings

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo10_dev.json"
BUDGET = 2000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", nargs="?", default=str(DEFAULT))
    parser.add_argument("--fast-weights", default="0.1,0.2,0.3,0.5")
    parser.add_argument("--static-alone", default="0.33", help="fast weights without e5")
    parser.add_argument("--limit", type=int, default=None, help="first N conversations")
    parser.add_argument("--skip", type=int, default=0, help="leave out the first N")
    parser.add_argument("--partial", default="0,0.2,0.3", help="fast weights, e5 on half")
    parser.add_argument("--no-base", action="store_true", help="leave out lexical and e5")
    parser.add_argument("--rows", default=None, help="write every question's row here (JSON)")
    parser.add_argument("--no-partial", action="store_true")
    parser.add_argument("--json", default=None)
    parser.add_argument("--smoke", action="store_true", help="HashingEmbedder for e5 (a test)")
    args = parser.parse_args()
    ws = [float(w) for w in args.fast_weights.split(",") if w]
    alone = [float(w) for w in args.static_alone.split(",") if w]
    if args.smoke:
        from loomctx.testing.embedders import HashingEmbedder

        e5: Any = HashingEmbedder()
    else:
        e5 = CachedEmbedder(default_embedder(), default_cache_dir())
    static = StaticEmbedder()
    configs: list[tuple[str, str, Any, float]] = [  # label, store, embedder, fast weight
        *(() if args.no_base else [("lexical", "full", None, 0.0)]),
        *((f"lexical+static w={w}", "static", e5, w) for w in alone),
        *(() if args.no_base else [("lexical+e5 (today)", "full", e5, 0.0)]),
        *((f"lexical+e5+static w={w}", "full", e5, w) for w in ws),
        *(() if args.no_partial else
          ((f"partial e5 50% +static w={w}", "half", e5, float(w))
           for w in args.partial.split(",") if w)),
    ]  # fmt: skip
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {c[0]: {} for c in configs}
    start = time.perf_counter()
    for conv in load_locomo(args.path)[args.skip : args.limit]:
        usable = [q for q in conv.questions if q.evidence]
        tasks = _locomo_tasks(conv, date_in_text=False)
        texts = {t.task_id: str(t.parameters["content"]) for t in tasks}
        stores = {}
        for state in ("full", "static", "half"):
            base = LoomMemory(conv.sample_id, embedder=None, ranking=MemoryRanking(time_decay=0.0))
            base.add_tasks(tasks)
            ns = base.namespace
            BackgroundEmbedder(base.store, static, prefix=ns, exact=True).drain()
            if state == "full":
                BackgroundEmbedder(base.store, e5, prefix=ns, exact=True).drain()
            elif state == "half":
                BackgroundEmbedder(
                    base.store, e5, prefix=ns, exact=True, batch_size=len(tasks) // 2
                ).run_once()
            stores[state] = base
        for label, state, embedder, w in configs:
            base = stores[state]
            memory = LoomMemory(
                conv.sample_id,
                store=base.store,
                namespace=base.namespace,
                embedder=embedder,
                embedding=MemoryEmbedding(
                    fast_embedder=static if w > 0 else None, in_background=False
                ),
                ranking=MemoryRanking(fast_weight=w or 0.3, time_decay=0.0),
            )
            rankers = Rankers(memory, None)
            rankers.configure(RetrievalSettings())
            for stage in ("fused", "+reranker"):
                got = _locomo_rows(rankers, usable, [BUDGET], texts, stage)
                rows[label].setdefault(stage, []).extend(got)
            memory.close()
        for base in stores.values():
            base.close()
        if hasattr(e5, "save"):
            e5.save()
        print(
            f"{conv.sample_id} done, {time.perf_counter() - start:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    keys = [f"r@{k}" for k in LOCOMO_KS]
    table: dict[str, Any] = {}
    print(f"{'configuration':34} {'fused R@5':>9} {'R@10':>6} {'final R@5':>9} {'R@10':>6} "
          f"{'window@' + str(BUDGET):>11}")  # fmt: skip
    for label, by_stage in rows.items():
        fused = _locomo_report(by_stage["fused"], keys)
        final = _locomo_report(by_stage["+reranker"], [*keys, f"window@{BUDGET}"])
        table[label] = {"fused": fused, "final": final}
        print(
            f"{label:34} {fused['r@5'] * 100:9.1f} {fused['r@10'] * 100:6.1f} "
            f"{final['r@5'] * 100:9.1f} {final['r@10'] * 100:6.1f} "
            f"{final[f'window@{BUDGET}'] * 100:11.1f}",
            flush=True,
        )
    if args.rows:
        Path(args.rows).write_text(json.dumps(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()

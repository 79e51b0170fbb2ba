"""A knowledge base of 1,000 documents in a file store: ingest time and search latency.

Run: .venv/bin/python bench/knowledge_bench.py [--docs 1000] [--e5-ingest]

Documents are LoCoMo dialogue turns (real text), 20 to 40 consecutive turns each under a
heading, with a sub-heading every 8 turns, written as Markdown files and ingested with
`KnowledgeBase.add_folder` (chunk_tokens 400, overlap 60) into a temporary SQLite file:

- ingest: lexical only, and with vectors of dimension 384 from the model-free
  `HashingEmbedder` (the store and search cost of the dense half without a model's time);
  then the same folder again, unchanged (what an incremental re-ingest costs);
- the default model's share: multilingual-e5-small documents/s measured on 64 chunks of these
  documents, and what that means for all of them (``--e5-ingest`` runs it for real: many
  minutes on two cores);
- search p50 / p95 (limit 20, LoCoMo questions): lexical only, and hybrid with the query
  vector cached (the query embedding reported on its own: e5 uncached, and hashing).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from _common import LOCOMO, locomo_turns, median_ms, p95_ms

from loomctx.embeddings import default_embedder
from loomctx.knowledge import KnowledgeBase, chunk_text
from loomctx.stores.sqlite import SQLiteStore
from loomctx.testing.embedders import HashingEmbedder
from loomctx.tokens import TiktokenCounter

DIM = 384


def write_documents(turns: list[str], folder: Path, n: int) -> int:
    """`n` Markdown files of consecutive turns; returns their total characters."""
    chars = 0
    for i in range(n):
        start, length = (i * 37) % len(turns), 20 + i % 21
        lines = [f"# Conversation notes {i}"]
        for k in range(length):
            if k % 8 == 0:
                lines.append(f"## Part {k // 8 + 1}")
            lines.append(turns[(start + k) % len(turns)])
        text = "\n\n".join(lines)
        chars += len(text)
        (folder / f"doc{i:04}.md").write_text(text, encoding="utf-8")
    return chars


def questions() -> list[str]:
    data = json.loads(LOCOMO.read_text(encoding="utf-8"))
    return [qa["question"] for conv in data for qa in conv["qa"]][:200]


def latency(kb: KnowledgeBase, qs: list[str]) -> tuple[float, float]:
    for q in qs[:5]:
        kb.search_sync(q)
    samples = []
    for q in qs:
        t0 = time.perf_counter()
        kb.search_sync(q)
        samples.append(time.perf_counter() - t0)
    return median_ms(samples), p95_ms(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--e5-ingest", action="store_true", help="ingest with the real model")
    args = parser.parse_args()
    turns = locomo_turns()
    qs = questions()
    counter = TiktokenCounter()
    e5 = default_embedder()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        folder = tmp / "docs"
        folder.mkdir()
        chars = write_documents(turns, folder, args.docs)
        print(f"{args.docs:,} documents, {chars / 1e6:.1f} M characters (LoCoMo turns)")

        rows = []
        with SQLiteStore(tmp / "kb.db") as store:
            hashing = HashingEmbedder(DIM, query_cache_size=1024)
            setups = [("lexical", None), ("+ vectors (hashing-384)", hashing)]
            if args.e5_ingest:
                setups.append(("+ vectors (e5-small)", e5))
            kbs = {}
            for label, embedder in setups:
                kb = KnowledgeBase(label.replace("/", "-"), store, embedder=embedder)
                t0 = time.perf_counter()
                summary = kb.add_folder(folder)
                took = time.perf_counter() - t0
                t0 = time.perf_counter()
                again = kb.add_folder(folder)
                unchanged = time.perf_counter() - t0
                assert len(again.unchanged) == args.docs
                rows.append((label, took, summary.chunks, unchanged))
                kbs[label] = kb
            print(f"\n{'ingest (add_folder)':<26} {'seconds':>8} {'docs/s':>8} {'chunks':>7} "
                  f"{'again, unchanged':>17}")  # fmt: skip
            for label, took, chunks, unchanged in rows:
                print(
                    f"{label:<26} {took:>8.2f} {args.docs / took:>8.0f} {chunks:>7} "
                    f"{unchanged:>15.2f} s"
                )

            sample = [
                c.search_text
                for p in sorted(folder.iterdir())[:40]
                for c in chunk_text(p.read_text(encoding="utf-8"), counter=counter)
            ][:64]
            e5.embed(["warm up"])
            t0 = time.perf_counter()
            e5.embed(sample)
            rate = len(sample) / (time.perf_counter() - t0)
            total = rows[0][2]
            print(
                f"\ne5-small document embedding: {rate:.1f} chunks/s on {len(sample)} chunks "
                f"(mean {statistics.mean(counter.count(s) for s in sample):.0f} tokens): "
                f"about {total / rate / 60:.0f} more minutes for these {total:,} chunks"
            )

            print(f"\n{'search, limit 20':<46} {'p50 ms':>8} {'p95 ms':>8}")
            for label, kb in kbs.items():
                p50, p95 = latency(kb, qs)
                note = "" if kb.embedder is None else ", query vector cached"
                print(f"{label + note:<46} {p50:>8.2f} {p95:>8.2f}")
            for label, embedder in (("e5-small", e5), ("hashing-384", HashingEmbedder(DIM))):
                samples = []
                for i, q in enumerate(qs[:100]):
                    t0 = time.perf_counter()
                    embedder.embed([f"{q} #{i}"], kind="query")  # distinct: never cached
                    samples.append(time.perf_counter() - t0)
                print(
                    f"{'query embedding, ' + label + ' (uncached)':<46} "
                    f"{median_ms(samples):>8.2f} {p95_ms(samples):>8.2f}"
                )


if __name__ == "__main__":
    main()

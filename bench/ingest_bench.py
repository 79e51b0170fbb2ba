"""Ingest speed: chunks per second into a SQLite file, lexical only and with vectors.

Run: .venv/bin/python bench/ingest_bench.py [--vector-files 24] [--skip-big] [--json OUT]

The corpus is generated (no network, no data files), deterministic for a seed, shaped like
the folder of issue 17: a 1.1 MB folder of 139 Markdown files (a handbook: headings, prose,
lists, a code block now and then) and one 28 MB Markdown file. What is measured, each into a
fresh SQLite file in a temporary folder, with the shipped `KnowledgeBase` defaults
(chunk_tokens 400, overlap 60):

- the folder, lexical only (`add_folder`, no embedder): seconds, chunks, chunks/s;
- the 28 MB file, lexical only (`add_file`): the same, and the seconds until the first
  progress report (how long a user looks at nothing); ``--skip-big`` leaves it out;
- an ingest with vectors (the default embedder) of the first `--vector-files` files of the
  folder, as chunks/s and as a share of the model's batch rate: the same chunks embedded
  alone with `embed` in the embedder's own batches, measured right before and right after
  the ingest (the mean of the two), so the share is the ingest's overhead on the model.
  On a shared machine the load drifts between those three runs, so the share is also measured
  within the ingest itself: the seconds spent inside the embedder's `embed` calls (timed by
  a pass-through wrapper) against the ingest's seconds, with the batch sizes it was given.

Progress is reported by the library's callback where the installed Loom has one (per chunk
since issue 17; per file before, on folders only), so the same script measures the code
before and after a change.
"""

from __future__ import annotations

import argparse
import inspect
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from loomctx.embeddings import default_embedder
from loomctx.knowledge import KnowledgeBase, chunk_text
from loomctx.stores.sqlite import SQLiteStore
from loomctx.tokens import TiktokenCounter

FILES = 139
FOLDER_BYTES = 1_100_000
BIG_BYTES = 28_000_000

_VOCABULARY = (
    "the a of to and in for is on that by this with you it not or be are from at as your all "
    "have new more an was we will can us about if page my has our one other do no time they "
    "customer order refund shipping return policy account payment invoice warehouse parcel "
    "carrier delivery address support ticket agent escalation priority response hours days "
    "week month team manager lead review approval request process step check confirm update "
    "database server deploy release version build test error log alert metric dashboard "
    "incident runbook rollback backup restore migration schema index query cache latency "
    "service client token budget window context memory session report source chunk search "
    "document folder file format export import sync retry timeout limit quota region zone "
    "price discount coupon tax currency product catalog stock supplier contract vendor "
    "employee holiday schedule meeting office remote security password access permission"
)
_WORDS = _VOCABULARY.split()


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 22))]
    if rng.random() < 0.3:
        words.insert(rng.randint(0, len(words)), str(rng.randint(1, 9999)))
    return " ".join(words).capitalize() + rng.choice(".....?!")


def _document(rng: random.Random, size: int, title: str) -> str:
    """Markdown of about `size` characters: sections of prose, lists and code."""
    parts = [f"# {title}"]
    length = len(parts[0])
    section = 0
    while length < size:
        roll = rng.random()
        if roll < 0.12:
            section += 1
            level = "##" if rng.random() < 0.7 else "###"
            part = f"{level} {_sentence(rng)[:-1].title()[:60]} {section}"
        elif roll < 0.22:
            part = "\n".join(f"- {_sentence(rng)}" for _ in range(rng.randint(2, 6)))
        elif roll < 0.26:
            body = "\n".join(
                f"    {rng.choice(_WORDS)}_{i} = {rng.randint(0, 999)}"
                for i in range(rng.randint(2, 8))
            )
            part = f"```python\ndef {rng.choice(_WORDS)}():\n{body}\n```"
        else:
            part = " ".join(_sentence(rng) for _ in range(rng.randint(2, 7)))
        parts.append(part)
        length += len(part) + 2
    return "\n\n".join(parts) + "\n"


def write_corpus(root: Path, *, seed: int = 17, big: bool = True) -> tuple[Path, Path | None]:
    """The folder (`FILES` files, about `FOLDER_BYTES`) and the big file under `root`."""
    rng = random.Random(seed)
    folder = root / "handbook"
    folder.mkdir()
    for i in range(FILES):
        size = int(FOLDER_BYTES / FILES * rng.uniform(0.3, 1.7))
        sub = folder / f"part{i % 7}"
        sub.mkdir(exist_ok=True)
        text = _document(rng, size, f"Handbook page {i}")
        (sub / f"page{i:03}.md").write_text(text, encoding="utf-8")
    big_file = None
    if big:
        big_file = root / "dump.md"
        with big_file.open("w", encoding="utf-8") as out:
            written = 0
            page = 0
            while written < BIG_BYTES:
                text = _document(rng, 200_000, f"Export part {page}")
                out.write(text)
                written += len(text.encode("utf-8"))
                page += 1
    return folder, big_file


class Progress:
    """Counts progress reports and when the first came."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.first: float | None = None
        self.calls = 0

    def __call__(self, event: Any) -> None:
        if self.first is None:
            self.first = time.perf_counter() - self.start
        self.calls += 1


def _accepts_progress(method: Any) -> bool:
    return "progress" in inspect.signature(method).parameters


class TimedEmbedder:
    """Passes every call to `inner`, timing `embed` and noting its batch sizes."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.batches: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def name(self) -> str:
        return str(self.inner.name)

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def embed(self, texts: Any, *, kind: Any = "document") -> Any:
        t0 = time.perf_counter()
        try:
            return self.inner.embed(texts, kind=kind)
        finally:
            self.seconds += time.perf_counter() - t0
            self.batches.append(len(texts))


def batch_rate(embedder: Any, texts: list[str]) -> float:
    """Chunks/s of `embedder.embed(texts)`: the model alone, in its own batches."""
    t0 = time.perf_counter()
    embedder.embed(texts)
    return len(texts) / (time.perf_counter() - t0)


def ingest(
    path: Path, tmp: Path, label: str, embedder: Any = None, *, fast: bool = False
) -> dict[str, Any]:
    """Ingest `path` (folder or file) into a fresh SQLite file; the row of the table. `fast`:
    the default since issue 33 (the fast vectors while writing, the model's in the background:
    timed until the model's are in too, as ``then_model_s``); else the model embeds inline."""
    db = tmp / f"{label.replace(' ', '-')}.db"
    with SQLiteStore(db) as store:
        options: dict[str, Any] = {} if fast or embedder is None else {"fast_embedder": None}
        if fast:
            options["embed_in_background"] = False
        kb = KnowledgeBase("bench", store, embedder=embedder, **options)
        progress = Progress()
        t0 = time.perf_counter()
        progress.start = t0
        if path.is_dir():
            chunks = kb.add_folder(path, progress=progress).chunks
        else:
            kwargs = {"progress": progress} if _accepts_progress(kb.add_file) else {}
            kb.add_file(path, **kwargs)
            chunks = sum(d.chunks for d in kb.documents())
        took = time.perf_counter() - t0
        background = getattr(kb, "background", None)
        then = None
        if fast and background is not None:
            t1 = time.perf_counter()
            background.drain()
            then = round(time.perf_counter() - t1, 2)
    db.unlink()
    return {
        "then_model_s": then,
        "what": label,
        "seconds": round(took, 2),
        "chunks": chunks,
        "chunks_per_s": round(chunks / took, 1),
        "first_progress_s": None if progress.first is None else round(progress.first, 2),
        "progress_reports": progress.calls,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vector-files", type=int, default=24, help="files ingested with e5")
    parser.add_argument("--skip-big", action="store_true", help="leave out the 28 MB file")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        folder, big = write_corpus(tmp, big=not args.skip_big)
        files = sorted(folder.rglob("*.md"))
        size = sum(p.stat().st_size for p in files)
        print(f"corpus: {len(files)} files, {size / 1e6:.2f} MB", end="")
        print(f"; one file of {big.stat().st_size / 1e6:.1f} MB" if big else "")

        rows.append(ingest(folder, tmp, "folder, lexical"))
        if big is not None:
            rows.append(ingest(big, tmp, "28 MB file, lexical"))

        e5 = default_embedder()
        counter = TiktokenCounter()
        subset = tmp / "subset"
        subset.mkdir()
        for p in files[: args.vector_files]:
            (subset / p.name).write_bytes(p.read_bytes())
        # The very texts the ingest embeds, embedded alone in the embedder's own batches,
        # before and after the ingest (the machine's load drifts): the model's batch rate.
        texts = [
            c.search_text
            for p in sorted(subset.iterdir())
            for c in chunk_text(p.read_text(encoding="utf-8"), counter=counter)
        ]
        e5.embed(["warm up"])
        rates = [batch_rate(e5, texts)]
        timed = TimedEmbedder(e5)
        row = ingest(subset, tmp, f"{args.vector_files} files, vectors", timed)
        rates.append(batch_rate(e5, texts))
        row["in_embed_s"] = round(timed.seconds, 2)
        row["model_share"] = round(timed.seconds / row["seconds"], 3)
        print(
            f"inside the ingest: {timed.seconds:.2f} s of {row['seconds']:.2f} s in `embed` "
            f"({row['model_share']:.1%}), {len(timed.batches)} calls, batch sizes "
            f"{sorted(set(timed.batches))}"
        )
        rate = statistics.mean(rates)
        tokens = sum(counter.count(t) for t in texts) / len(texts)
        print(
            f"embedder batch rate: {rates[0]:.2f} and {rates[1]:.2f} chunks/s before and after "
            f"the ingest ({e5.name}, the ingest's {len(texts)} chunks of {tokens:.0f} tokens on "
            f"average, batches of {e5.batch_size})"
        )
        row["of_batch_rate"] = round(row["chunks_per_s"] / rate, 2)
        rows.append(row)
        fast = ingest(subset, tmp, f"{args.vector_files} files, fast first", e5, fast=True)
        rows.append(fast)
        print(
            f"fast vectors first: searchable after {fast['seconds']:.2f} s, the model's vectors "
            f"of every chunk {fast['then_model_s']} s later"
        )

    print(
        f"\n{'ingest':<24} {'seconds':>8} {'chunks':>7} {'chunks/s':>9} "
        f"{'1st progress':>13} {'reports':>8}"
    )
    for r in rows:
        first = "-" if r["first_progress_s"] is None else f"{r['first_progress_s']:.2f} s"
        extra = f"  ({r['of_batch_rate']:.0%} of the batch rate)" if "of_batch_rate" in r else ""
        print(
            f"{r['what']:<24} {r['seconds']:>8.2f} {r['chunks']:>7} {r['chunks_per_s']:>9.1f} "
            f"{first:>13} {r['progress_reports']:>8}{extra}"
        )
    if args.json:
        args.json.write_text(json.dumps({"embedder_rate": rate, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()

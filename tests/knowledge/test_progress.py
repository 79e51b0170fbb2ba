"""Ingest progress and batching: chunks reported as they are done with a rate and an
estimate, vectors computed in full batches across files, documents written whole."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from loomctx.embeddings import EmbedKind
from loomctx.errors import EmbeddingError
from loomctx.knowledge import IngestProgress, KnowledgeBase
from loomctx.stores.base import Get
from loomctx.stores.sqlite import SQLiteStore
from loomctx.testing.embedders import HashingEmbedder


class Recording:
    """A real `HashingEmbedder` that records the size of every `embed` call, and can fail
    on the call numbered `fail_at` (1-based)."""

    def __init__(self, batch_size: int = 32, fail_at: int | None = None) -> None:
        self.inner = HashingEmbedder(64, batch_size=batch_size)
        self.batch_size = batch_size
        self.calls: list[int] = []
        self.fail_at = fail_at

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: Sequence[str], *, kind: EmbedKind = "document") -> NDArray[np.float32]:
        if kind == "document":
            self.calls.append(len(texts))
            if len(self.calls) == self.fail_at:
                raise EmbeddingError("the model ran out of memory")
        return self.inner.embed(texts, kind=kind)


def pages(root: Path, n: int, words: int = 5) -> None:
    for i in range(n):
        body = " ".join(f"word{i}x{k}" for k in range(words))
        (root / f"page{i:03}.md").write_text(f"# Page {i}\n\n{body}.\n", encoding="utf-8")


def long_text(sections: int) -> str:
    return "\n\n".join(
        f"## Section {s}\n\n" + " ".join(f"Sentence {s}.{k} about topic{s}." for k in range(60))
        for s in range(sections)
    )


def test_vectors_are_computed_in_full_batches_across_files(tmp_path: Path) -> None:
    pages(tmp_path, 150)
    embedder = Recording(batch_size=32)
    seen: list[IngestProgress] = []
    kb = KnowledgeBase("docs", embedder=embedder)
    summary = kb.add_folder(tmp_path, progress=seen.append)
    assert summary.chunks == 150
    assert embedder.calls == [32, 32, 32, 32, 22]  # one-chunk files, batched together
    chunks = [p for p in seen if p.kind == "chunks"]
    assert [p.chunks for p in chunks] == [32, 64, 96, 128, 150]
    assert [p.path for p in chunks] == ["page031.md", "page063.md", "page095.md", "page127.md",
                                        "page149.md"]  # fmt: skip
    files = [p for p in seen if p.kind == "file"]
    assert [p.done for p in files] == list(range(1, 151))
    assert files[-1].chunks == 150
    # A file is reported once it is written, never before its vectors are computed.
    assert all(p.chunks >= int(p.path[4:7]) + 1 for p in files)
    assert [p.elapsed for p in seen] == sorted(p.elapsed for p in seen)
    hit = kb.search_sync("word149x3", limit=1)[0]
    assert hit.document_id == "page149.md"
    assert hit.vector_score is not None


def test_a_failed_batch_leaves_no_document_half_written(tmp_path: Path) -> None:
    pages(tmp_path, 150)
    with SQLiteStore(tmp_path / "kb.db") as store:
        kb = KnowledgeBase("docs", store, embedder=Recording(batch_size=32, fail_at=4))
        with pytest.raises(EmbeddingError, match="out of memory"):
            kb.add_folder(tmp_path, pattern="*.md")
        documents = kb.documents()
        # Three batches were embedded: the documents of the first two groups of 64 chunks
        # were written, each with its vectors; none of the rest.
        assert [d.document_id for d in documents] == [f"page{i:03}.md" for i in range(64)]
        for doc in documents:
            (chunk,) = store.batch([Get(namespace=kb.namespace, key=f"chunk:{doc.document_id}#0")])
            assert chunk is not None
        hit = kb.search_sync("word63x1", limit=1)[0]
        assert hit.document_id == "page063.md"
        assert hit.vector_score is not None
        again = KnowledgeBase("docs", store, embedder=Recording()).add_folder(
            tmp_path, pattern="*.md"
        )
        assert (len(again.unchanged), len(again.added)) == (64, 86)


def test_a_large_file_reports_chunks_as_they_are_cut_with_an_estimate(tmp_path: Path) -> None:
    path = tmp_path / "dump.md"
    path.write_text(long_text(40), encoding="utf-8")
    seen: list[IngestProgress] = []
    kb = KnowledgeBase("dump", chunk_tokens=200, overlap_tokens=20)
    kb.add_file(path, progress=seen.append)
    total = kb.documents()[0].chunks
    assert total > 100
    chunks = [p for p in seen if p.kind == "chunks"]
    assert [p.chunks for p in chunks] == list(range(32, total + 1, 32))
    # Without an embedder cutting is the work; the estimate is close before the end.
    assert all(p.chunks_total >= p.chunks for p in chunks)
    assert abs(chunks[len(chunks) // 2].chunks_total - total) <= total * 0.2
    assert all(p.eta is not None and p.rate > 0 for p in chunks)
    last = seen[-1]
    assert (last.kind, last.done, last.total, last.path) == ("file", 1, 1, str(path))
    assert last.chunks == last.chunks_total == total
    assert last.eta == 0


def test_a_large_file_with_vectors_reports_each_batch(tmp_path: Path) -> None:
    path = tmp_path / "dump.md"
    path.write_text(long_text(12), encoding="utf-8")
    embedder = Recording(batch_size=16)
    seen: list[IngestProgress] = []
    kb = KnowledgeBase("dump", embedder=embedder, chunk_tokens=200, overlap_tokens=20)
    kb.add_file(path, progress=seen.append)
    total = kb.documents()[0].chunks
    assert embedder.calls == [16] * (total // 16) + ([total % 16] if total % 16 else [])
    embedded = [p.chunks for p in seen if p.kind == "chunks" and p.chunks]
    assert embedded == [min(total, 16 * (i + 1)) for i in range(len(embedder.calls))]
    assert seen[-1].chunks == seen[-1].chunks_total == total


def test_rate_and_eta() -> None:
    fresh = IngestProgress(done=0, total=3, path="a.md", status="added")
    assert (fresh.kind, fresh.rate, fresh.eta) == ("file", 0.0, None)
    going = IngestProgress(
        done=1, total=3, path="a.md", status="added", kind="chunks", chunks=50,
        chunks_total=150, elapsed=10.0,
    )  # fmt: skip
    assert (going.rate, going.eta) == (5.0, 20.0)


def test_skipped_files_say_why_by_kind(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("Alpha.", encoding="utf-8")
    (tmp_path / "b.png").write_bytes(b"\x89PNG")
    (tmp_path / "c.txt").write_bytes(b"caf\xe9")
    (tmp_path / "d.md").write_text("x" * 2000, encoding="utf-8")
    outside = tmp_path.parent / f"{tmp_path.name}-secret.md"
    outside.write_text("secret", encoding="utf-8")
    os.symlink(outside, tmp_path / "e.md")
    summary = KnowledgeBase("docs").add_folder(tmp_path, max_file_bytes=1000)
    assert [(s.path, s.kind) for s in summary.skipped] == [
        ("b.png", "no_loader"),
        ("c.txt", "unreadable"),
        ("d.md", "too_large"),
        ("e.md", "link"),
    ]

"""KnowledgeBase: settings, adding texts, persistence across processes, incremental updates."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from loomctx.embeddings import EmbedKind
from loomctx.errors import ConfigError, EmbeddingError, StoreError
from loomctx.knowledge import KnowledgeBase, KnowledgeBaseProvider
from loomctx.stores.base import Record, Scan
from loomctx.stores.sqlite import SQLiteStore
from loomctx.testing.embedders import HashingEmbedder
from loomctx.tokens import TiktokenCounter

from .corpus import DOCS


class RecordingEmbedder(HashingEmbedder):
    """`HashingEmbedder` that keeps every document text it embedded, to see the work done."""

    def __init__(self) -> None:
        super().__init__(256)
        self.documents: list[str] = []

    def _embed_batch(self, texts: list[str], kind: EmbedKind) -> NDArray[np.floating]:
        if kind == "document":
            self.documents += texts
        return super()._embed_batch(texts, kind)


def records(store: SQLiteStore, name: str = "docs") -> list[Record]:
    found: list[Record] = store.batch([Scan(prefix=("knowledge", name))])[0]
    return found


def handbook(store: SQLiteStore | None = None, **options: object) -> KnowledgeBase:
    kb = KnowledgeBase("docs", store, **options)  # type: ignore[arg-type]
    for doc_id, text in DOCS.items():
        kb.add_text(text, document_id=doc_id)
    return kb


# --- settings ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"name": ""}, "`name` is a non-empty string"),
        ({"name": "a/b"}, "without '/'"),
        ({"name": 7}, "`name`"),
        ({"chunk_tokens": 100, "overlap_tokens": 100}, "smaller than `chunk_tokens`"),
        ({"chunk_tokens": 4}, "at least 16"),
        ({"min_relevance": 1.5}, "`min_relevance` must be a number in 0..1"),
        ({"min_relevance": True}, "`min_relevance`"),
        ({"store": {}}, "`store` must be a `MemoryStore`"),
        ({"embedder": "e5"}, "`embedder` must be an `Embedder`"),
        ({"counter": len}, "`counter` must be a `TokenCounter`"),
        ({"loaders": [".rst"]}, "`loaders` must map file suffixes"),
        ({"loaders": {"rst": str}}, "a file suffix with its dot"),
        ({"loaders": {".rst": "not callable"}}, "must be a callable"),
    ],
)
def test_bad_settings_are_refused(options: dict[str, object], match: str) -> None:
    settings: dict[str, object] = {"name": "docs", **options}
    with pytest.raises(ConfigError, match=match):
        KnowledgeBase(**settings)  # type: ignore[arg-type]


def test_defaults_a_private_store_and_lexical_search() -> None:
    with KnowledgeBase("docs") as kb:
        assert isinstance(kb, KnowledgeBaseProvider)
        assert kb.embedder is None
        assert isinstance(kb.counter, TiktokenCounter)
        assert kb.namespace == ("knowledge", "docs")
        assert repr(kb) == (
            "KnowledgeBase('docs', embedder=None, chunk_tokens=400, overlap_tokens=60)"
        )
        kb.add_text("The private store holds this.")
        assert [h.vector_score for h in kb.search_sync("private store")] == [None]
    with pytest.raises(StoreError, match="closed"):
        kb.search_sync("private store")


def test_a_shared_store_is_left_open(tmp_path: Path, hashing: HashingEmbedder) -> None:
    store = SQLiteStore(tmp_path / "kb.db")
    kb = KnowledgeBase("docs", store, embedder=hashing)
    assert "hashing:v1:256" in repr(kb)
    kb.close()
    kb.add_text("Still usable after the knowledge base closed.")
    assert kb.documents()
    store.close()
    with pytest.raises(StoreError):
        kb.add_text("The store is closed now.")  # store errors pass through as they are


# --- adding texts ----------------------------------------------------------------------------


def test_add_text_ids_metadata_and_title() -> None:
    kb = KnowledgeBase("docs")
    notes = "# Release notes\n\nVersion 2 adds search."
    first = kb.add_text(notes, metadata={"team": "core"})
    assert len(first) == 16
    assert kb.add_text(notes, metadata={"team": "core"}) == first
    named = kb.add_text("Plain words.", document_id="notes/plain", metadata={"title": "Mine"})
    docs = {d.document_id: d for d in kb.documents()}
    assert docs[first].metadata == {"team": "core", "title": "Release notes"}
    assert docs[first].chunks == 1
    assert len(docs[first].content_hash) == 32
    assert docs[named].metadata == {"title": "Mine"}
    (hit,) = kb.search_sync("version search")
    assert hit.chunk_id == f"{first}#0"
    assert hit.document_id == first
    assert hit.metadata == {"team": "core", "title": "Release notes", "headings": "Release notes"}
    assert hit.text == "Release notes\n\nVersion 2 adds search."
    assert hit.knowledge_base == "docs"


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda kb: kb.add_text("  \n "), "`text` must be a non-blank string"),
        (lambda kb: kb.add_text(b"bytes"), "`text` must be a non-blank string"),
        (lambda kb: kb.add_text("x", document_id=" "), "`document_id` must be a non-blank"),
        (lambda kb: kb.add_text("x", metadata=["a"]), "`metadata` must be a mapping"),
        (lambda kb: kb.add_text("x", metadata={1: "a"}), "string keys"),
        (lambda kb: kb.add_text("x", metadata={"a": {1, 2}}), "JSON values only"),
        (lambda kb: kb.add_text("x", metadata={"a": float("nan")}), "JSON values only"),
        (lambda kb: kb.delete(""), "`document_id` must be a non-blank"),
    ],
)
def test_bad_inputs_are_refused(call: object, match: str) -> None:
    kb = KnowledgeBase("docs")
    with pytest.raises(ConfigError, match=match):
        call(kb)  # type: ignore[operator]


# --- persistence -----------------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import json, sys
    from loomctx.knowledge import KnowledgeBase
    from loomctx.stores.sqlite import SQLiteStore
    from loomctx.testing.embedders import HashingEmbedder

    store = SQLiteStore(sys.argv[1])
    kb = KnowledgeBase("docs", store, embedder=HashingEmbedder(256))
    out = {
        "documents": [[d.document_id, d.content_hash, d.chunks] for d in kb.documents()],
        "hits": [
            [[h.chunk_id, round(h.score, 9), h.text] for h in kb.search_sync(q)]
            for q in json.loads(sys.argv[2])
        ],
    }
    print(json.dumps(out))
    """
)
QUERIES = ["roll back a release", "OAuth token expiry", "数据库备份", "Redis 缓存"]


def snapshot(kb: KnowledgeBase) -> dict[str, object]:
    return {
        "documents": [[d.document_id, d.content_hash, d.chunks] for d in kb.documents()],
        "hits": [
            [[h.chunk_id, round(h.score, 9), h.text] for h in kb.search_sync(q)] for q in QUERIES
        ],
    }


def test_a_new_process_sees_the_same_documents_and_searches_the_same(tmp_path: Path) -> None:
    path = tmp_path / "kb.db"
    store = SQLiteStore(path)
    kb = handbook(store, embedder=HashingEmbedder(256))
    before = snapshot(kb)
    assert all(before["hits"])  # type: ignore[union-attr]
    store.close()
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), json.dumps(QUERIES)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert json.loads(child.stdout) == before
    with SQLiteStore(path) as again:  # and reopened here, once more
        assert snapshot(KnowledgeBase("docs", again, embedder=HashingEmbedder(256))) == before


def test_knowledge_bases_in_one_store_are_apart(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "kb.db") as store:
        a = KnowledgeBase("a", store)
        b = KnowledgeBase("ab", store)
        a.add_text("Alpha facts about rockets.", document_id="x")
        b.add_text("Beta facts about rockets.", document_id="x")
        assert [h.text for h in a.search_sync("rockets")] == ["Alpha facts about rockets."]
        assert [h.knowledge_base for h in b.search_sync("rockets")] == ["ab"]
        assert a.delete("x")
        assert [d.document_id for d in b.documents()] == ["x"]


# --- incremental updates ---------------------------------------------------------------------


def test_an_unchanged_document_does_no_work(tmp_path: Path) -> None:
    embedder = RecordingEmbedder()
    with SQLiteStore(tmp_path / "kb.db") as store:
        kb = handbook(store, embedder=embedder)
        embedded = len(embedder.documents)
        seqs = [r.seq for r in records(store)]
        handbook(store, embedder=embedder)  # every document again, in a new instance
        assert len(embedder.documents) == embedded
        assert [r.seq for r in records(store)] == seqs
        assert kb.add_text(DOCS["auth.md"], document_id="auth.md") == "auth.md"
        assert [r.seq for r in records(store)] == seqs


def test_a_changed_document_replaces_its_chunks(tmp_path: Path) -> None:
    embedder = RecordingEmbedder()
    sections = [f"## Part {i}\n\nPart {i} mentions keyword{i} once." for i in range(4)]
    with SQLiteStore(tmp_path / "kb.db") as store:
        kb = KnowledgeBase("docs", store, embedder=embedder)
        kb.add_text("\n\n".join(sections), document_id="guide")
        assert [h.chunk_id for h in kb.search_sync("keyword3")] == ["guide#3"]
        embedder.documents.clear()
        # Part 1 changes, parts 2 and 3 are gone: their chunks must not be found any more.
        edited = [sections[0], "## Part 1\n\nPart 1 now mentions fresh words."]
        kb.add_text("\n\n".join(edited), document_id="guide")
        assert embedder.documents == ["Part 1\n\nPart 1 now mentions fresh words."]
        assert kb.search_sync("keyword3") == kb.search_sync("keyword2") == []
        assert kb.search_sync("keyword1") == []
        assert [h.chunk_id for h in kb.search_sync("fresh words")] == ["guide#1"]
        assert [h.chunk_id for h in kb.search_sync("keyword0")] == ["guide#0"]
        assert sorted(r.key for r in records(store)) == [
            "chunk:guide#0",
            "chunk:guide#1",
            "doc:guide",
        ]
        assert [d.chunks for d in kb.documents()] == [2]


def test_metadata_chunking_or_a_new_embedder_update_a_document(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "kb.db") as store:
        lexical = KnowledgeBase("docs", store)
        lexical.add_text("Cats sleep all day.", document_id="cats")
        lexical.add_text("Cats sleep all day.", document_id="cats", metadata={"tag": "pets"})
        (doc,) = lexical.documents()
        assert doc.metadata == {"tag": "pets"}
        assert lexical.search_sync("cats")[0].metadata == {"tag": "pets"}
        # a new embedder: the document is embedded on its next add, then dense search finds it
        embedder = RecordingEmbedder()
        dense = KnowledgeBase("docs", store, embedder=embedder)
        assert dense.search_sync("cats")[0].vector_score is None
        dense.add_text("Cats sleep all day.", document_id="cats", metadata={"tag": "pets"})
        assert embedder.documents == ["Cats sleep all day."]
        assert (dense.search_sync("cats")[0].vector_score or 0) > 0.5
        # other chunk settings re-chunk it; the same text keeps its vector
        seqs = [r.seq for r in records(store)]
        small = KnowledgeBase("docs", store, embedder=embedder, chunk_tokens=64, overlap_tokens=0)
        small.add_text("Cats sleep all day.", document_id="cats", metadata={"tag": "pets"})
        assert embedder.documents == ["Cats sleep all day."]
        assert min(r.seq for r in records(store)) > max(seqs)  # rewritten
        assert (small.search_sync("cats")[0].vector_score or 0) > 0.5


def test_delete_removes_a_document_and_its_chunks(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "kb.db") as store:
        kb = handbook(store, embedder=HashingEmbedder(256))
        assert kb.delete("deploy.md") is True
        assert kb.delete("deploy.md") is False
        assert "deploy.md" not in [d.document_id for d in kb.documents()]
        assert all(h.document_id != "deploy.md" for h in kb.search_sync("release rollback"))
        assert not [r for r in records(store) if "deploy.md" in r.key]


def test_an_embedder_failure_writes_nothing() -> None:
    class Broken(HashingEmbedder):
        def _embed_batch(self, texts: list[str], kind: EmbedKind) -> NDArray[np.floating]:
            return np.zeros((len(texts), 3))  # the wrong shape: `embed` refuses it

    kb = KnowledgeBase("docs", embedder=Broken(8))
    with pytest.raises(EmbeddingError, match="shape"):
        kb.add_text("Nothing of this is stored.")
    assert kb.documents() == []
    assert kb.store.batch([Scan(prefix=kb.namespace)])[0] == []


def test_a_namespace_of_exact_parts_keeps_same_named_bases_apart() -> None:
    """Names are never joined: `("a", "knowledge", "b.c")` and `("a.b", "knowledge", "c")`
    are two bases, and the default stays `("knowledge", name)` for library users."""
    store = SQLiteStore(":memory:")
    one = KnowledgeBase("b.c", store, namespace=("a", "knowledge", "b.c"))
    two = KnowledgeBase("c", store, namespace=("a.b", "knowledge", "c"))
    one.add_text("Herons nest in tall trees.", document_id="d")
    assert two.documents() == []
    assert two.search_sync("herons nest") == []
    assert KnowledgeBase("b.c", store).namespace == ("knowledge", "b.c")
    with pytest.raises(ConfigError, match="`namespace` of knowledge base 'x'"):
        KnowledgeBase("x", store, namespace=("a/b",))
    store.close()

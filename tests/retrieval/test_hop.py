"""The second hop: names and years the first hits mention, recalled again (issue 21)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from loomctx.context.sources import UnifiedRetrievalSource
from loomctx.errors import ConfigError
from loomctx.memory.core import LoomMemory
from loomctx.retrieval.evidence import Evidence
from loomctx.retrieval.hop import hop_terms
from loomctx.retrieval.settings import RetrievalSettings
from loomctx.stores.sqlite import SQLiteStore
from tests.retrieval.fixtures import open_store, remember


def cand(text: str) -> Evidence:
    return Evidence(id=text[:8], text=text, origin="memory")


def test_hop_terms_are_names_and_years_the_query_lacks() -> None:
    top = [
        cand("Caroline: I went to the Pride parade in June with Melanie. It was in 2022."),
        cand("Melanie: Oh wow! That sounds great, Melanie loves June."),
    ]
    # "Caroline" opens a turn (the speaker) and is in the query; "Oh", "That" open sentences
    assert hop_terms("What did Caroline do at the parade?", top, 4) == [
        "June", "Melanie", "Pride", "2022",
    ]  # fmt: skip
    assert hop_terms("What did Caroline do at the parade?", top, 1) == ["June"]
    assert hop_terms("anything", top, 0) == []


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with open_store(tmp_path) as s:
        yield s


async def test_the_hop_recalls_what_the_first_hits_name(store: SQLiteStore) -> None:
    memory = LoomMemory("s1", store=store, embedder=None)
    turns = [("user", f"Filler message number {i} about nothing.") for i in range(12)]
    turns[2] = ("user", "I marched in the parade with Oscar last spring.")
    turns[9] = ("assistant", "Oscar adopted a greyhound afterwards.")
    remember(memory, turns)
    query = "Who marched in the parade with me?"
    plain = UnifiedRetrievalSource(memory, rewrite=False, recall_limit=5)
    assert "m9" not in [c.id for c in await plain.candidates(query)]  # shares no word
    hop = UnifiedRetrievalSource(
        memory, rewrite=False, recall_limit=5, settings=RetrievalSettings(hop_weight=0.5)
    )
    found = await hop.candidates(query)
    assert [c.id for c in found][:2] == ["m2", "m9"]  # Oscar, named by m2, finds m9


def test_parse_settings() -> None:
    s = RetrievalSettings.parse(["hop_weight=0.3", "recall_limit=30", "fusion_weights=0.4,0.6"])
    assert s.changed() == {"hop_weight": 0.3, "recall_limit": 30, "fusion_weights": (0.4, 0.6)}
    assert RetrievalSettings.parse([]) == RetrievalSettings()
    with pytest.raises(ConfigError, match="expected name=value with a name among"):
        RetrievalSettings.parse(["hop=1"])
    with pytest.raises(ConfigError, match="`hop_weight` takes a number, got 'high'"):
        RetrievalSettings.parse(["hop_weight=high"])
    with pytest.raises(ConfigError, match="`hop_weight` takes one number"):
        RetrievalSettings.parse(["hop_weight=1,2"])
    with pytest.raises(ConfigError, match=r"`recall_limit` must be an int >= 1, got 2\.5"):
        RetrievalSettings.parse(["recall_limit=2.5"])

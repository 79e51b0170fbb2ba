"""The part of the store conformance suite on search as arrays: `Rank` finds what `Search`
and `VectorSearch` find, as row ids, versions and scores, and `Fetch` reads those records
as they were found, or None (see `loomctx.testing.store_conformance`, which runs it).

This module imports pytest: import it from test modules only.
"""

from __future__ import annotations

import numpy as np
import pytest

from loomctx.errors import ConfigError
from loomctx.stores.base import (
    BaseStore,
    Fetch,
    Found,
    Put,
    Rank,
    Search,
    VectorSearch,
)
from loomctx.testing._store_search import SearchConformance
from loomctx.testing._store_values import A, rec, unit

__all__ = ["RankConformance"]


class RankConformance(SearchConformance):
    """Tests of `Rank` and `Fetch`; `MemoryStoreConformance` includes them."""

    @staticmethod
    def _as_hits(store: BaseStore, found: Found) -> list[tuple[str, float]]:
        records = store.fetch(found)
        assert all(r is not None for r in records)
        return [
            (r.key, score)
            for r, score in zip(records, found.scores.tolist(), strict=True)
            if r is not None
        ]

    def test_rank_finds_what_search_finds_as_arrays(self, store: BaseStore) -> None:
        store.put_many(
            [
                rec(A, "both", "The database migration finished overnight"),
                rec(A, "one", "A migration of birds over the lake"),
                rec(A, "none", "Lunch was pasta with tomato sauce"),
                rec(A, "case", "DATABASE backups run nightly", kind="other"),
            ]
        )
        self._embed(store, A, {"both": unit(1, 0), "one": unit(1, 1), "case": unit(0, 1)})
        for search in (
            Search(prefix=A, query="database migration"),
            Search(prefix=A, query="database migration", limit=2),
            Search(prefix=A, query="database", kind="other", exact=True),
            VectorSearch(prefix=A, vector=unit(1, 0), model="m"),
            VectorSearch(prefix=A, vector=unit(0, 1), model="m", limit=1),
        ):
            found = store.rank(search)
            assert found.ids.dtype == np.int64
            assert found.seqs.dtype == np.int64
            assert found.scores.dtype == np.float64
            assert len(found) == found.seqs.shape[0] == found.scores.shape[0] > 0
            hits = store.batch([search])[0]
            assert self._as_hits(store, found) == [(h.record.key, h.score) for h in hits]
            assert found.seqs.tolist() == [h.record.seq for h in hits]

    def test_rank_of_nothing_is_empty_arrays(self, store: BaseStore) -> None:
        store.put(rec(A, "k", "some words"))
        for search in (
            Search(prefix=A, query="absent"),
            Search(prefix=A, query="words", limit=0),
            Search(prefix=A, query=""),
            VectorSearch(prefix=A, vector=unit(1, 0), model="unknown"),
        ):
            found = store.rank(search)
            assert len(found) == 0
            assert found.ids.dtype == np.int64
            assert found.scores.dtype == np.float64
        assert store.fetch(store.rank(Search(prefix=A, query="absent"))) == []

    def test_fetch_reads_records_as_found_and_none_once_changed(self, store: BaseStore) -> None:
        store.put_many(
            [rec(A, "keep", "alpha one", v=1), rec(A, "edit", "alpha two"), rec(A, "gone", "alpha")]
        )
        found = store.rank(Search(prefix=A, query="alpha"))
        first = [r for r in store.fetch(found) if r is not None]
        assert sorted(r.key for r in first) == ["edit", "gone", "keep"]
        assert next(r.data for r in first if r.key == "keep") == {"v": 1}
        store.put(rec(A, "edit", "alpha two", v=2))  # same text, a new version
        store.delete(A, "gone")
        store.put(rec(A, "new", "alpha again"))  # may take a freed row id
        after = store.fetch(found)
        assert [r.key if r is not None else None for r in after] == [
            r.key if r.key == "keep" else None for r in first
        ]
        again = store.rank(Search(prefix=A, query="alpha"))
        assert {r.key for r in store.fetch(again) if r is not None} == {"keep", "edit", "new"}

    def test_fetch_takes_any_order_and_a_lazy_read(self, store: BaseStore) -> None:
        store.put_many([rec(A, "a", "word one", v=1), rec(A, "b", "word two", v=2)])
        found = store.rank(Search(prefix=A, query="word"))
        ids, seqs = found.ids.tolist(), found.seqs.tolist()
        op = Fetch(ids=[*reversed(ids), ids[0]], seqs=[*reversed(seqs), seqs[0]], lazy=True)
        records = store.batch([op])[0]
        assert [r.seq for r in records] == [*reversed(seqs), seqs[0]]
        assert sorted(dict(r.data)["v"] for r in records[:2]) == [1, 2]
        assert store.batch([Fetch(ids=[], seqs=[])]) == [[]]

    def test_rank_in_a_batch_sees_its_earlier_writes(self, store: BaseStore) -> None:
        put, found = store.batch(
            [Put(record=rec(A, "k", "fresh words")), Rank(search=Search(prefix=A, query="fresh"))]
        )
        assert found.seqs.tolist() == [put.seq]
        (record,) = store.fetch(found)
        assert record == put

    def test_bad_rank_and_fetch_arguments_are_config_errors(self, store: BaseStore) -> None:
        with pytest.raises(ConfigError, match=r"Rank\.search"):
            store.batch([Rank(search="words")])  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="as long as each other"):
            store.batch([Fetch(ids=[1, 2], seqs=[1])])
        with pytest.raises(ConfigError, match=r"Fetch\.ids"):
            store.batch([Fetch(ids=[1.5], seqs=[1])])  # type: ignore[list-item]
        with pytest.raises(ConfigError, match=r"Fetch\.seqs"):
            store.batch([Fetch(ids=[1], seqs=["1"])])  # type: ignore[list-item]

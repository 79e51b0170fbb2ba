"""The search part of the store conformance suite: lexical search, vectors and
`Unembedded` (see `loomctx.testing.store_conformance`, which runs it with the rest).

This module imports pytest: import it from test modules only.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loomctx.errors import ConfigError, StoreError
from loomctx.stores.base import BaseStore, Namespace, PutVectors, Unembedded
from loomctx.testing._store_values import AB, A, keys, rec, unit

__all__ = ["SearchConformance"]


class SearchConformance:
    """Tests of search, vectors and `Unembedded`; `MemoryStoreConformance` includes them."""

    # --- lexical search ---------------------------------------------------------------------

    def test_search_english_ranks_better_matches_first(self, store: BaseStore) -> None:
        store.put_many(
            [
                rec(A, "both", "The database migration finished overnight"),
                rec(A, "one", "A migration of birds over the lake"),
                rec(A, "none", "Lunch was pasta with tomato sauce"),
                rec(A, "case", "DATABASE backups run nightly"),
            ]
        )
        hits = store.search(A, "database migration")
        assert keys(hits)[0] == "both"
        assert set(keys(hits)) == {"both", "one", "case"}
        assert all(h.score > 0 for h in hits)
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert keys(store.search(A, "database migration", limit=1)) == ["both"]
        assert store.search(A, "database", limit=0) == []

    def test_search_chinese(self, store: BaseStore) -> None:
        store.put_many(
            [
                rec(A, "db", "我们的数据库在北京机房"),
                rec(A, "weather", "今天北京的天气很好"),
                rec(A, "en", "an English sentence"),
            ]
        )
        assert keys(store.search(A, "数据库"))[0] == "db"
        assert set(keys(store.search(A, "北京"))) == {"db", "weather"}
        assert keys(store.search(A, "请问天气怎么样"))[0] == "weather"
        assert store.search(A, "上海") == []

    def test_search_of_stop_words_or_nothing_is_empty(self, store: BaseStore) -> None:
        store.put(rec(A, "k", "the and of it is a thing"))
        assert store.search(A, "") == []
        assert store.search(A, "the and of it is") == []
        assert store.search(A, "我们 的 了") == []
        assert store.search(A, "!!! ...") == []

    def test_search_filters_by_kind(self, store: BaseStore) -> None:
        store.put_many(
            [
                rec(A, "t", "kiwi fruit", kind="turn"),
                rec(A, "s", "kiwi fruit", kind="summary"),
            ]
        )
        assert keys(store.search(A, "kiwi", kind="summary")) == ["s"]
        assert keys(store.search(A, "kiwi", kind="absent")) == []
        assert set(keys(store.search(A, "kiwi"))) == {"t", "s"}

    def test_search_follows_rewrites(self, store: BaseStore) -> None:
        store.put(rec(A, "k", "apples and pears", kind="turn"))
        store.put(rec(A, "k", "bananas only", kind="turn"))
        assert store.search(A, "apples") == []
        assert keys(store.search(A, "bananas")) == ["k"]
        store.put(rec(A, "k", "bananas only", kind="summary"))
        assert keys(store.search(A, "bananas", kind="summary")) == ["k"]
        assert store.search(A, "bananas", kind="turn") == []
        store.put(rec(A, "k", ""))
        assert store.search(A, "bananas") == []

    def test_search_hits_carry_the_current_record(self, store: BaseStore) -> None:
        stored = store.put(rec(A, "k", "quantum physics", topic="science"))
        (hit,) = store.search(A, "quantum")
        assert hit.record == stored

    # --- vectors ------------------------------------------------------------------------------

    def _embed(
        self,
        store: BaseStore,
        namespace: Namespace | None,
        vectors: dict[Any, npt.NDArray[np.float32]],
        *,
        model: str = "m",
    ) -> int:
        """Put vectors for existing records, read at their current seq."""
        items: list[tuple[Namespace, str, int]] = []
        for where in vectors:
            ns, key = (namespace, where) if namespace is not None else where
            record = store.get(ns, key)
            assert record is not None
            items.append((ns, key, record.seq))
        matrix = np.stack(list(vectors.values())).astype(np.float32)
        stored: int = store.batch([PutVectors(model=model, items=items, vectors=matrix)])[0]
        return stored

    def test_vector_search_ranks_by_cosine_similarity(self, store: BaseStore) -> None:
        store.put_many([rec(A, k, f"text {k}") for k in ("x", "xy", "y", "neg")])
        stored = self._embed(
            store,
            A,
            {"x": unit(2, 0, 0), "xy": unit(1, 1, 0), "y": unit(0, 3, 0), "neg": unit(-1, 0, 0)},
        )
        assert stored == 4
        hits = store.vector_search(A, unit(1, 0, 0), model="m")
        assert keys(hits) == ["x", "xy", "y", "neg"]
        expected = [1.0, 1 / math.sqrt(2), 0.0, -1.0]
        assert [h.score for h in hits] == pytest.approx(expected, abs=1e-5)
        assert keys(store.vector_search(A, unit(0, 1, 0), model="m", limit=2)) == ["y", "xy"]
        assert store.vector_search(A, unit(1, 0, 0), model="m", limit=0) == []

    def test_vector_search_filters_by_kind_and_model(self, store: BaseStore) -> None:
        store.put_many([rec(A, "t", "one", kind="turn"), rec(A, "s", "two", kind="summary")])
        self._embed(store, A, {"t": unit(1, 0), "s": unit(1, 0.1)})
        self._embed(store, A, {"t": unit(0, 1, 0)}, model="other")
        assert keys(store.vector_search(A, unit(1, 0), model="m", kind="summary")) == ["s"]
        assert keys(store.vector_search(A, unit(1, 0), model="m", kind="absent")) == []
        assert keys(store.vector_search(A, unit(0, 1, 0), model="other")) == ["t"]
        assert store.vector_search(A, unit(1, 0), model="unknown") == []

    def test_vector_dimension_mismatches_raise(self, store: BaseStore) -> None:
        store.put_many([rec(A, "a", "one"), rec(A, "b", "two")])
        self._embed(store, A, {"a": unit(1, 0, 0)})
        with pytest.raises(StoreError, match=r"dimension|-d"):
            store.vector_search(A, unit(1, 0), model="m")
        with pytest.raises(StoreError, match="-d"):
            self._embed(store, A, {"b": unit(1, 0)})
        assert keys(store.vector_search(A, unit(1, 0, 0), model="m")) == ["a"]

    def test_put_vectors_rejects_malformed_arrays(self, store: BaseStore) -> None:
        record = store.put(rec(A, "a", "one"))
        item = (A, "a", record.seq)
        for vectors in (
            np.ones((2, 3), dtype=np.float32),  # two rows for one item
            np.ones(3, dtype=np.float32),  # not 2-d
            np.array([[np.nan, 1.0]], dtype=np.float32),
        ):
            with pytest.raises(ConfigError):
                store.batch([PutVectors(model="m", items=[item], vectors=vectors)])
        assert store.vector_search(A, unit(1, 0, 0), model="m") == []

    def test_a_text_change_drops_vectors_but_a_kind_change_keeps_them(
        self, store: BaseStore
    ) -> None:
        store.put_many([rec(A, "a", "first text", kind="turn"), rec(A, "b", "other")])
        self._embed(store, A, {"a": unit(1, 0), "b": unit(0, 1)})
        store.put(rec(A, "a", "first text", kind="summary"))  # same text: vectors kept
        assert keys(store.vector_search(A, unit(1, 0), model="m", kind="summary")) == ["a"]
        assert store.vector_search(A, unit(1, 0), model="m", kind="turn") == []
        store.put(rec(A, "a", "second text", kind="summary"))  # new text: vectors dropped
        assert keys(store.vector_search(A, unit(1, 0), model="m")) == ["b"]
        assert keys(store.batch([Unembedded(model="m", prefix=A)])[0]) == ["a"]

    def test_put_vectors_skips_deleted_and_rewritten_records(self, store: BaseStore) -> None:
        old = store.put(rec(A, "changed", "old text"))
        same = store.put(rec(A, "same", "unchanged text"))
        gone = store.put(rec(A, "gone", "to be deleted"))
        store.put(rec(A, "changed", "new text"))  # the embedder read "old text"
        store.put(rec(A, "same", "unchanged text", extra=1))  # text unchanged: still valid
        store.delete(A, "gone")
        items = [(A, "changed", old.seq), (A, "same", same.seq), (A, "gone", gone.seq)]
        vectors = np.eye(3, dtype=np.float32)
        assert store.batch([PutVectors(model="m", items=items, vectors=vectors)]) == [1]
        assert keys(store.vector_search(A, unit(0, 1, 0), model="m")) == ["same"]
        # A record put again with the same key after a delete is a new text, read later.
        again = store.put(rec(A, "gone", "to be deleted"))
        stale = PutVectors(model="m", items=[(A, "gone", gone.seq)], vectors=vectors[2:])
        assert store.batch([stale]) == [0]
        fresh = PutVectors(model="m", items=[(A, "gone", again.seq)], vectors=vectors[2:])
        assert store.batch([fresh]) == [1]

    def test_put_vectors_replaces_a_records_vector(self, store: BaseStore) -> None:
        store.put_many([rec(A, "a", "one"), rec(A, "b", "two")])
        self._embed(store, A, {"a": unit(1, 0), "b": unit(0, 1)})
        self._embed(store, A, {"a": unit(0, 1)})
        hits = store.vector_search(A, unit(0, 1), model="m")
        assert [h.score for h in hits] == pytest.approx([1.0, 1.0])
        assert sorted(keys(hits)) == ["a", "b"]

    # --- unembedded -------------------------------------------------------------------------

    def test_unembedded_lists_records_without_vectors_oldest_first(self, store: BaseStore) -> None:
        store.put_many(
            [
                rec(A, "1", "first"),
                rec(A, "empty", ""),
                rec(A, "2", "second"),
                rec(AB, "x", "elsewhere"),
                rec(A, "3", "third"),
            ]
        )
        pending = store.batch([Unembedded(model="m", prefix=A)])[0]
        assert keys(pending) == ["1", "2", "3"]
        self._embed(store, A, {"2": unit(1, 0)})
        assert keys(store.batch([Unembedded(model="m", prefix=A)])[0]) == ["1", "3"]
        assert keys(store.batch([Unembedded(model="m", prefix=A, limit=1)])[0]) == ["1"]
        assert keys(store.batch([Unembedded(model="other", prefix=A)])[0]) == ["1", "2", "3"]
        everywhere = store.batch([Unembedded(model="m")])[0]
        assert keys(everywhere) == ["1", "x", "3"]

    def test_unembedded_after_seq_steps_past_older_records(self, store: BaseStore) -> None:
        first, second, _ = store.put_many(
            [rec(A, "1", "one"), rec(A, "2", "two"), rec(A, "3", "3")]
        )
        after = store.batch([Unembedded(model="m", prefix=A, after_seq=first.seq)])[0]
        assert keys(after) == ["2", "3"]
        rewritten = store.put(rec(A, "1", "one again"))
        later = store.batch([Unembedded(model="m", prefix=A, after_seq=second.seq)])[0]
        assert keys(later) == ["3", "1"]
        assert store.batch([Unembedded(model="m", after_seq=rewritten.seq)])[0] == []

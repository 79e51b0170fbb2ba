"""The conformance suite every `MemoryStore` backend must pass.

Subclass `MemoryStoreConformance` in the backend's test module and give it a `store`
fixture that yields a fresh, empty store and closes it afterwards::

    import pytest
    from loomctx.testing.store_conformance import MemoryStoreConformance

    class TestMyStore(MemoryStoreConformance):
        @pytest.fixture
        def store(self):
            with MyStore(...) as store:
                yield store

pytest then runs every ``test_*`` method below against it. The tests go through `batch` /
`abatch` (the whole contract) plus the `BaseStore` shorthands, and they only use behaviour
that `loomctx.stores.base` documents: record round trips, upsert semantics (a growing `seq`,
`created_at` kept), all-or-nothing batches whose error names the failing op, write order,
namespace prefixes that match part-wise (``('t', 'a')`` never sees ``('t', 'ab')``), exact
namespace reads (``exact=True`` never sees ``('t', 'a', 's')`` from ``('t', 'a')``), kind and
`where` filters, English and Chinese lexical search, vector search and its dimension errors,
vectors dropped when text changes and never attached to a text they were not computed from,
search as arrays (`Rank`) and reading what it found (`Fetch`), `Unembedded`, namespace
versions and the `Expect` guard, text that is not valid Unicode, `abatch`, namespace validation
and closing.

This module imports pytest: import it from test modules only.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loomctx.errors import ConfigError, ConflictError, StoreError
from loomctx.stores.base import (
    BaseStore,
    Delete,
    Expect,
    Get,
    Namespace,
    NamespaceVersion,
    Put,
    Record,
    Scan,
    Search,
    Unembedded,
    VectorSearch,
    Version,
)
from loomctx.testing._store_rank import RankConformance
from loomctx.testing._store_values import A_S, AB, OTHER, A, keys, rec, unit

__all__ = ["MemoryStoreConformance", "keys", "rec", "unit"]


class MemoryStoreConformance(RankConformance):
    """Tests of the `MemoryStore` contract; a subclass provides the `store` fixture."""

    # --- put / get / delete -----------------------------------------------------------------

    def test_put_returns_the_stored_record_and_get_reads_it(self, store: BaseStore) -> None:
        stored = store.put(rec(A, "k", "hello world", kind="turn", n=1, tags=["x"], ok=True))
        assert stored.seq > 0
        assert stored.created_at > 0
        assert stored.updated_at == stored.created_at
        assert (stored.namespace, stored.key, stored.kind, stored.text) == (
            A,
            "k",
            "turn",
            "hello world",
        )
        assert dict(stored.data) == {"n": 1, "tags": ["x"], "ok": True}
        assert store.get(A, "k") == stored

    def test_get_of_a_missing_key_or_namespace_is_none(self, store: BaseStore) -> None:
        store.put(rec(A, "k"))
        assert store.get(A, "other") is None
        assert store.get(AB, "k") is None
        assert store.get(A_S, "k") is None

    def test_put_replaces_by_key_keeping_created_at(self, store: BaseStore) -> None:
        first = store.put(rec(A, "k", "one", n=1))
        second = store.put(rec(A, "k", "two", kind="other", m=2))
        assert second.seq > first.seq
        assert second.created_at == first.created_at
        assert second.updated_at >= first.updated_at
        assert store.get(A, "k") == second
        assert dict(second.data) == {"m": 2}
        assert len(store.scan(A)) == 1

    def test_seq_grows_across_and_within_batches(self, store: BaseStore) -> None:
        batch = store.put_many([rec(A, "a"), rec(A, "b"), rec(AB, "c")])
        later = store.put(rec(A, "a"))
        seqs = [r.seq for r in batch] + [later.seq]
        assert seqs == sorted(seqs)
        assert len(set(seqs)) == 4

    def test_seq_is_not_reused_after_a_delete(self, store: BaseStore) -> None:
        first = store.put(rec(A, "k", "text"))
        assert store.delete(A, "k") is True
        again = store.put(rec(A, "k", "text"))
        assert again.seq > first.seq

    def test_delete_removes_the_record_from_every_read(self, store: BaseStore) -> None:
        store.put(rec(A, "k", "zebra crossing"))
        store.put(rec(A, "j", "unrelated words"))
        self._embed(store, A, {"k": unit(1, 0), "j": unit(0, 1)})
        assert store.delete(A, "k") is True
        assert store.delete(A, "k") is False
        assert store.get(A, "k") is None
        assert keys(store.scan(A)) == ["j"]
        assert store.search(A, "zebra") == []
        assert keys(store.vector_search(A, unit(1, 0), model="m")) == ["j"]

    def test_delete_of_a_missing_record_is_false(self, store: BaseStore) -> None:
        assert store.delete(A, "nothing") is False

    # --- batches ------------------------------------------------------------------------------

    def test_batch_returns_one_result_per_op_in_order(self, store: BaseStore) -> None:
        results = store.batch(
            [
                Put(record=rec(A, "k", "hello")),
                Get(namespace=A, key="k"),
                Get(namespace=A, key="missing"),
                Scan(prefix=A),
                Search(prefix=A, query="hello"),
                Delete(namespace=A, key="k"),
                Get(namespace=A, key="k"),
            ]
        )
        assert len(results) == 7
        assert isinstance(results[0], Record)
        assert results[1] == results[0]
        assert results[2] is None
        assert results[3] == [results[0]]
        assert keys(results[4]) == ["k"]
        assert results[5] is True
        assert results[6] is None

    def test_an_empty_batch_returns_nothing(self, store: BaseStore) -> None:
        assert store.batch([]) == []

    def test_a_failing_op_writes_nothing_of_its_batch(self, store: BaseStore) -> None:
        store.put(rec(A, "kept", "before"))
        with pytest.raises(StoreError, match="#2"):
            store.batch(
                [
                    Put(record=rec(A, "new", "fresh words")),
                    Delete(namespace=A, key="kept"),
                    Put(record=rec(("t", "bad/part"), "x")),
                ]
            )
        assert store.get(A, "new") is None
        assert store.get(A, "kept") is not None
        assert store.search(A, "fresh") == []
        # The store still works, and seq did not go backwards.
        after = store.put(rec(A, "next"))
        assert after.seq > store.get(A, "kept").seq  # type: ignore[union-attr]

    def test_a_bad_argument_fails_the_batch_with_a_config_error(self, store: BaseStore) -> None:
        with pytest.raises(ConfigError, match="#1"):
            store.batch([Put(record=rec(A, "ok")), Put(record=rec(A, "bad", blob=object()))])
        assert store.get(A, "ok") is None

    def test_reads_in_a_batch_see_its_earlier_writes(self, store: BaseStore) -> None:
        results = store.batch(
            [
                Put(record=rec(A, "k", "orange juice")),
                Search(prefix=A, query="orange"),
                Unembedded(model="m", prefix=A),
            ]
        )
        assert keys(results[1]) == ["k"]
        assert keys(results[2]) == ["k"]

    async def test_abatch_runs_ops_like_batch(self, store: BaseStore) -> None:
        results = await store.abatch(
            [Put(record=rec(A, "k", "async text")), Search(prefix=A, query="async")]
        )
        assert keys(results[1]) == ["k"]
        many = await asyncio.gather(
            *(store.abatch([Put(record=rec(A, f"c{i}"))]) for i in range(5))
        )
        assert len({result[0].seq for result in many}) == 5
        assert len(await store.abatch([Scan(prefix=A)])) == 1
        with pytest.raises(StoreError, match="#0"):
            await store.abatch([Get(namespace=(), key="k")])

    # --- scan -------------------------------------------------------------------------------

    def test_scan_returns_write_order_and_newest_first(self, store: BaseStore) -> None:
        store.put_many([rec(A, "1"), rec(A, "2"), rec(A, "3")])
        store.put(rec(A, "1"))  # a rewrite moves it to the end
        assert keys(store.scan(A)) == ["2", "3", "1"]
        assert keys(store.scan(A, newest_first=True)) == ["1", "3", "2"]
        assert keys(store.scan(A, newest_first=True, limit=2)) == ["1", "3"]
        assert keys(store.scan(A, limit=0)) == []

    def test_scan_after_seq(self, store: BaseStore) -> None:
        first, second, third = store.put_many([rec(A, "1"), rec(A, "2"), rec(A, "3")])
        assert keys(store.scan(A, after_seq=first.seq)) == ["2", "3"]
        assert keys(store.scan(A, after_seq=third.seq)) == []
        assert keys(store.scan(A, after_seq=first.seq, newest_first=True, limit=1)) == ["3"]
        assert second.seq > first.seq

    def test_scan_filters_by_kind_and_where(self, store: BaseStore) -> None:
        store.put_many(
            [
                rec(A, "1", kind="turn", role="user", n=1, ok=True),
                rec(A, "2", kind="turn", role="assistant", n=2, ok=False),
                rec(A, "3", kind="summary", role="user", n=1, ok=True),
                rec(A, "4", kind="turn", role="user", n=1.5, label="1"),
            ]
        )
        assert keys(store.scan(A, kind="turn")) == ["1", "2", "4"]
        assert keys(store.scan(A, kind="nothing")) == []
        assert keys(store.scan(A, where={"role": "user"})) == ["1", "3", "4"]
        assert keys(store.scan(A, kind="turn", where={"role": "user", "n": 1})) == ["1"]
        assert keys(store.scan(A, where={"n": 1.5})) == ["4"]
        assert keys(store.scan(A, where={"ok": True})) == ["1", "3"]
        assert keys(store.scan(A, where={"ok": False})) == ["2"]
        assert keys(store.scan(A, where={"label": "1"})) == ["4"]
        assert keys(store.scan(A, where={"label": 1})) == []  # a string is not a number
        assert keys(store.scan(A, where={"missing": "x"})) == []

    # --- namespaces -----------------------------------------------------------------------

    def test_prefixes_match_whole_parts(self, store: BaseStore) -> None:
        store.put_many(
            [
                rec(A, "a", "shared words here"),
                rec(AB, "ab", "shared words here"),
                rec(A_S, "as", "shared words here"),
                rec(OTHER, "o", "shared words here"),
                rec(("t",), "t", "shared words here"),
            ]
        )
        self._embed(
            store,
            None,
            {
                (A, "a"): unit(1, 0),
                (AB, "ab"): unit(1, 0),
                (A_S, "as"): unit(1, 0),
                (OTHER, "o"): unit(1, 0),
                (("t",), "t"): unit(1, 0),
            },
        )
        everything = {"a", "ab", "as", "o", "t"}
        cases: list[tuple[Namespace, set[str]]] = [
            (A, {"a", "as"}),
            (AB, {"ab"}),
            (A_S, {"as"}),
            (("t",), {"a", "ab", "as", "t"}),
            (("u",), {"o"}),
            (("t", "a", "s", "x"), set()),
            (("t", "a", "x"), set()),
            (("v",), set()),
            ((), everything),
        ]
        for prefix, expected in cases:
            assert set(keys(store.scan(prefix))) == expected, prefix
            assert set(keys(store.search(prefix, "shared words"))) == expected, prefix
            found = store.vector_search(prefix, unit(1, 0), model="m", limit=10)
            assert set(keys(found)) == expected, prefix
            pending = store.batch([Unembedded(model="other", prefix=prefix)])[0]
            assert set(keys(pending)) == expected, prefix

    def test_exact_reads_see_their_namespace_only(self, store: BaseStore) -> None:
        store.put_many(
            [
                rec(A, "a", "shared words here"),
                rec(AB, "ab", "shared words here"),
                rec(A_S, "as", "shared words here"),
                rec(("t",), "t", "shared words here"),
            ]
        )
        self._embed(
            store,
            None,
            {
                (A, "a"): unit(1, 0),
                (AB, "ab"): unit(1, 0),
                (A_S, "as"): unit(1, 0),
                (("t",), "t"): unit(1, 0),
            },
        )
        cases: list[tuple[Namespace, set[str]]] = [
            (A, {"a"}),
            (A_S, {"as"}),
            (("t",), {"t"}),
            (("t", "a", "s", "x"), set()),
            (("u",), set()),
        ]
        for namespace, expected in cases:
            found = store.batch(
                [
                    Scan(prefix=namespace, exact=True),
                    Scan(prefix=namespace, exact=True, newest_first=True, limit=1),
                    Search(prefix=namespace, query="shared words", exact=True),
                    VectorSearch(prefix=namespace, vector=unit(1, 0), model="m", exact=True),
                    Unembedded(model="other", prefix=namespace, exact=True),
                ]
            )
            for result in found:
                assert set(keys(result)) <= expected, namespace
            assert set(keys(found[0])) == expected, namespace
            assert set(keys(found[2])) == expected, namespace
            assert set(keys(found[3])) == expected, namespace
            assert set(keys(found[4])) == expected, namespace
            assert len(found[1]) == len(expected)
        assert keys(store.scan(A, exact=True, kind="absent")) == []
        for read in (
            Scan(prefix=(), exact=True),
            Search(prefix=(), query="shared", exact=True),
            VectorSearch(prefix=(), vector=unit(1, 0), model="m", exact=True),
            Unembedded(model="m", prefix=(), exact=True),
        ):
            with pytest.raises(StoreError, match="namespace"):
                store.batch([read])

    def test_namespaces_are_validated(self, store: BaseStore) -> None:
        bad_namespaces: list[Any] = [(), ("t", ""), ("t", "a/b"), ["t", "a"], "t/a", ("t", 1)]
        for bad in bad_namespaces:
            for op in (Put(record=rec(bad, "k")), Get(namespace=bad, key="k")):
                with pytest.raises(StoreError, match="namespace"):
                    store.batch([op])
            with pytest.raises(StoreError, match="namespace"):
                store.batch([Delete(namespace=bad, key="k")])
        for bad_prefix in [("t", ""), ("a/b",), ["t"]]:
            for read in (
                Scan(prefix=bad_prefix),  # type: ignore[arg-type]
                Search(prefix=bad_prefix, query="x"),  # type: ignore[arg-type]
                VectorSearch(prefix=bad_prefix, vector=unit(1), model="m"),  # type: ignore[arg-type]
                Unembedded(model="m", prefix=bad_prefix),  # type: ignore[arg-type]
            ):
                with pytest.raises(StoreError, match="namespace"):
                    store.batch([read])
        assert store.scan(()) == []

    def test_a_key_is_unique_per_namespace_only(self, store: BaseStore) -> None:
        store.put_many([rec(A, "k", "in a"), rec(AB, "k", "in ab"), rec(A_S, "k", "in as")])
        assert store.get(A, "k").text == "in a"  # type: ignore[union-attr]
        assert store.get(AB, "k").text == "in ab"  # type: ignore[union-attr]
        assert store.delete(A, "k") is True
        assert store.get(A_S, "k") is not None

    # --- versions and guarded writes --------------------------------------------------------

    def test_a_namespace_version_moves_with_its_records_only(self, store: BaseStore) -> None:
        assert store.version(A) == NamespaceVersion(seq=0, deleted_seq=0)
        one, _ = store.put_many([rec(A, "1", "one"), rec(A, "2", "two")])
        two = store.get(A, "2")
        assert two is not None
        assert store.version(A) == NamespaceVersion(seq=two.seq, deleted_seq=0)
        before = store.version(A)
        store.put_many([rec(AB, "x", "elsewhere"), rec(A_S, "y", "below"), rec(("t",), "z")])
        self._embed(store, A, {"1": unit(1, 0)})  # vectors change no record
        assert store.version(A) == before
        assert store.delete(A, "missing") is False
        assert store.version(A) == before
        assert store.delete(A, "1") is True
        deleted = store.version(A)
        assert deleted.seq > before.seq
        assert deleted.deleted_seq == deleted.seq
        again = store.put(rec(A, "1", "back"))
        assert store.version(A) == NamespaceVersion(seq=again.seq, deleted_seq=deleted.seq)
        # A read in a batch sees the batch's earlier writes.
        put, version = store.batch([Put(record=rec(A, "3")), Version(namespace=A)])
        assert version.seq == put.seq
        assert one.seq < again.seq
        with pytest.raises(StoreError, match="namespace"):
            store.batch([Version(namespace=())])

    def test_expect_guards_a_batch(self, store: BaseStore) -> None:
        store.put(rec(A, "1", "one"))
        seen = store.version(A).seq
        results = store.batch([Expect(namespace=A, seq=seen), Put(record=rec(A, "2", "two"))])
        assert results[0] is None
        # Another writer came first: the guarded batch writes nothing.
        with pytest.raises(ConflictError, match="#0"):
            store.batch([Expect(namespace=A, seq=seen), Put(record=rec(A, "3", "three"))])
        assert store.get(A, "3") is None
        assert store.search(A, "three") == []
        with pytest.raises(ConflictError):
            store.batch([Put(record=rec(A, "4")), Expect(namespace=A, seq=seen)])
        assert store.get(A, "4") is None
        # A write elsewhere does not move the guarded namespace.
        store.put(rec(A_S, "below"))
        now = store.version(A).seq
        store.batch([Expect(namespace=A, seq=now), Put(record=rec(A, "5"))])
        assert store.batch([Expect(namespace=AB, seq=0)]) == [None]
        with pytest.raises(ConfigError):
            store.batch([Expect(namespace=A, seq="1")])  # type: ignore[arg-type]

    def test_text_that_is_not_unicode_is_refused_and_writes_nothing(self, store: BaseStore) -> None:
        bad = "caf\udce9 au lait"  # bytes decoded with errors="surrogateescape"
        for record in (
            rec(A, "k", bad),
            rec(A, "k", "fine", note=bad),
            rec(A, bad, "fine"),
            rec(A, "k", "fine", kind=bad),
            rec(("t", bad), "k", "fine"),
        ):
            with pytest.raises(ConfigError, match=r"#1.*not valid Unicode"):
                store.batch([Put(record=rec(A, "ok", "fine")), Put(record=record)])
        assert store.scan(()) == []
        assert store.version(A) == NamespaceVersion()

    # --- closing ------------------------------------------------------------------------------

    def test_a_closed_store_raises_and_closing_twice_is_harmless(self, store: BaseStore) -> None:
        store.put(rec(A, "k"))
        store.close()
        store.close()
        with pytest.raises(StoreError, match="closed"):
            store.get(A, "k")
        with pytest.raises(StoreError, match="closed"):
            store.batch([])

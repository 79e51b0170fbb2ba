"""DESIGN.md invariant 6 as a property: every read returns only records under its prefix,
part-wise (in exactly its namespace, when exact), and Scan returns all of them."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import loomctx.stores.sqlite as sqlite_module
from loomctx.stores.base import (
    Namespace,
    PutVectors,
    Record,
    Scan,
    Search,
    Unembedded,
    VectorSearch,
)
from loomctx.stores.sqlite import SQLiteStore
from loomctx.text import terms

PARTS = ["t", "a", "ab", "a b", "数据", "x.y"]
WORDS = ["apple", "banana", "cherry", "数据库", "北京", "river"]

namespaces = st.lists(st.sampled_from(PARTS), min_size=1, max_size=3).map(tuple)
prefixes = st.lists(st.sampled_from(PARTS), min_size=0, max_size=3).map(tuple)
texts = st.lists(st.sampled_from(WORDS), min_size=0, max_size=4).map(" ".join)
writes = st.lists(
    st.tuples(namespaces, st.sampled_from(["k1", "k2", "k3"]), texts, st.sampled_from(["x", "y"])),
    min_size=1,
    max_size=12,
)


def under(namespace: Namespace, prefix: Namespace) -> bool:
    return namespace[: len(prefix)] == prefix


@given(writes=writes, prefix=prefixes, query=texts, kind=st.sampled_from([None, "x", "y"]))
def test_reads_stay_under_their_prefix(
    writes: list[tuple[Namespace, str, str, str]], prefix: Namespace, query: str, kind: str | None
) -> None:
    with SQLiteStore() as store:
        stored = store.put_many(
            [Record(namespace=ns, key=key, kind=k, text=text) for ns, key, text, k in writes]
        )
        latest = {(r.namespace, r.key): r for r in stored}
        embedded = [r for r in latest.values() if r.text]
        rng = np.random.default_rng(len(writes))
        if embedded:
            vectors = rng.standard_normal((len(embedded), 4)).astype(np.float32)
            items = [(r.namespace, r.key, r.seq) for r in embedded]
            store.batch([PutVectors(model="m", items=items, vectors=vectors)])
        scan, search, nearest, pending = store.batch(
            [
                Scan(prefix=prefix, kind=kind),
                Search(prefix=prefix, query=query or "apple", kind=kind, limit=50),
                VectorSearch(
                    prefix=prefix, vector=np.ones(4, np.float32), model="m", kind=kind, limit=50
                ),
                Unembedded(model="other", prefix=prefix, limit=50),
            ]
        )
        expected = {
            key
            for key, r in latest.items()
            if under(r.namespace, prefix) and kind in (None, r.kind)
        }
        assert {(r.namespace, r.key) for r in scan} == expected
        wanted = set(terms(query or "apple"))
        assert {(h.record.namespace, h.record.key) for h in search} == {
            key for key in expected if wanted & set(terms(latest[key].text))
        }
        assert {(h.record.namespace, h.record.key) for h in nearest} == {
            key for key in expected if latest[key].text
        }
        assert all(under(r.namespace, prefix) for r in pending)


@given(writes=writes, namespace=namespaces, query=texts, kind=st.sampled_from([None, "x", "y"]))
def test_exact_reads_stay_in_their_namespace(
    writes: list[tuple[Namespace, str, str, str]],
    namespace: Namespace,
    query: str,
    kind: str | None,
) -> None:
    with SQLiteStore() as store:
        stored = store.put_many(
            [Record(namespace=ns, key=key, kind=k, text=text) for ns, key, text, k in writes]
        )
        latest = {(r.namespace, r.key): r for r in stored}
        embedded = [r for r in latest.values() if r.text]
        if embedded:
            vectors = np.ones((len(embedded), 4), dtype=np.float32)
            items = [(r.namespace, r.key, r.seq) for r in embedded]
            store.batch([PutVectors(model="m", items=items, vectors=vectors)])
        scan, search, nearest, pending = store.batch(
            [
                Scan(prefix=namespace, kind=kind, exact=True),
                Search(prefix=namespace, query=query or "apple", kind=kind, limit=50, exact=True),
                VectorSearch(
                    prefix=namespace,
                    vector=np.ones(4, np.float32),
                    model="m",
                    kind=kind,
                    limit=50,
                    exact=True,
                ),
                Unembedded(model="other", prefix=namespace, limit=50, exact=True),
            ]
        )
        expected = {
            key for key, r in latest.items() if r.namespace == namespace and kind in (None, r.kind)
        }
        assert {(r.namespace, r.key) for r in scan} == expected
        wanted = set(terms(query or "apple"))
        assert {(h.record.namespace, h.record.key) for h in search} == {
            key for key in expected if wanted & set(terms(latest[key].text))
        }
        assert {(h.record.namespace, h.record.key) for h in nearest} == {
            key for key in expected if latest[key].text
        }
        assert all(r.namespace == namespace for r in pending)


scans = st.fixed_dictionaries(
    {
        "prefix": prefixes,
        "kind": st.sampled_from([None, "x", "y"]),
        "limit": st.sampled_from([None, 0, 1, 2, 5]),
        "newest_first": st.booleans(),
        "after_seq": st.integers(0, 12),
        "window": st.sampled_from([1, 3, 2048]),
    }
)


@given(writes=writes, scan=scans)
def test_scan_matches_a_reference(
    writes: list[tuple[Namespace, str, str, str]], scan: dict[str, Any]
) -> None:
    """Scan (whose plan depends on the namespaces below the prefix and on how dense they
    are among recent rows) returns exactly what filtering and sorting every record gives."""
    window = scan.pop("window")
    saved, sqlite_module._SCAN_WINDOW = sqlite_module._SCAN_WINDOW, window
    try:
        with SQLiteStore() as store:
            for ns, key, text, kind in writes:
                store.put(Record(namespace=ns, key=key, kind=kind, text=text))
            everything = store.scan(())
            expected = sorted(
                (
                    r
                    for r in everything
                    if under(r.namespace, scan["prefix"])
                    and scan["kind"] in (None, r.kind)
                    and r.seq > scan["after_seq"]
                ),
                key=lambda r: r.seq,
                reverse=scan["newest_first"],
            )[: scan["limit"]]
            assert store.scan(**scan) == expected
    finally:
        sqlite_module._SCAN_WINDOW = saved

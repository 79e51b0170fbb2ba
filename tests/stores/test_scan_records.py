"""A scan of one namespace takes the records the store keeps (as `Fetch` does) rather than
decoding them again; what it returns is always the current version of each record."""

from __future__ import annotations

from pathlib import Path

from loomctx.stores.base import Fetch, Put, Record, Scan
from loomctx.stores.sqlite import SQLiteStore

NS = ("tenant", "session")


def _put(store: SQLiteStore, key: str, value: int) -> None:
    store.batch([Put(record=Record(namespace=NS, key=key, kind="task", data={"v": value}))])


def _scan(store: SQLiteStore) -> dict[str, int]:
    found = store.batch([Scan(prefix=NS, kind="task", exact=True, newest_first=True)])[0]
    return {r.key: r.data["v"] for r in found}


def test_a_scan_sees_each_record_as_it_is_now(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    other = SQLiteStore(tmp_path / "s.db")
    try:
        for i in range(5):
            _put(store, f"k{i}", i)
        first = store.batch([Scan(prefix=NS, kind="task", exact=True)])[0]
        again = store.batch([Scan(prefix=NS, kind="task", exact=True)])[0]
        assert [r.key for r in again] == [r.key for r in first]
        assert all(a is b for a, b in zip(first, again, strict=True))  # kept, not decoded
        _put(store, "k2", 20)  # a write of this connection
        assert _scan(store) == {"k0": 0, "k1": 1, "k2": 20, "k3": 3, "k4": 4}
        _put(other, "k3", 30)  # a write of another connection
        assert _scan(store) == {"k0": 0, "k1": 1, "k2": 20, "k3": 30, "k4": 4}
    finally:
        other.close()
        store.close()


def test_a_scan_and_a_fetch_share_the_records_kept(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    try:
        _put(store, "k0", 0)
        scanned = store.batch([Scan(prefix=NS, kind="task", exact=True)])[0]
        row = store.batch([Scan(prefix=NS, kind="task", exact=True)])[0][0]
        assert row is scanned[0]
        assert store.batch([Fetch(ids=[1], seqs=[row.seq])])[0] == [row]
    finally:
        store.close()

"""`SQLiteStore` against the store conformance suite, in memory and in a file, and the
behaviour specific to it: options, opening errors, deadlines, concurrent use."""

from __future__ import annotations

import copy
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from loomctx.errors import ConfigError, StoreError
from loomctx.stores.base import (
    Get,
    MemoryStore,
    Put,
    PutVectors,
    Record,
    Scan,
    Search,
    StoreContext,
    Unembedded,
)
from loomctx.stores.sqlite import SQLiteStore
from loomctx.testing.store_conformance import MemoryStoreConformance, keys

NS = ("t", "a")


def rec(key: str, text: str = "", kind: str = "note") -> Record:
    return Record(namespace=NS, key=key, kind=kind, text=text)


class TestInMemory(MemoryStoreConformance):
    @pytest.fixture
    def store(self) -> Iterator[SQLiteStore]:
        with SQLiteStore(":memory:") as store:
            yield store


class TestInAFile(MemoryStoreConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SQLiteStore]:
        with SQLiteStore(tmp_path / "loom.db") as store:
            yield store


def test_it_is_a_memory_store() -> None:
    with SQLiteStore() as store:
        assert isinstance(store, MemoryStore)


@pytest.mark.parametrize("durability", ["normal", "full"])
def test_pragmas(tmp_path: Path, durability: str) -> None:
    with SQLiteStore(tmp_path / "x.db", durability=durability) as store:  # type: ignore[arg-type]
        conn = store._conn
        assert conn is not None
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == (
            1 if durability == "normal" else 2
        )
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000


def test_a_bad_durability_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="durability"):
        SQLiteStore(durability="sometimes")  # type: ignore[arg-type]


def test_opening_a_file_that_is_not_a_database_raises(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database, not at all" * 200)
    with pytest.raises(StoreError, match="cannot open"):
        SQLiteStore(path)


def test_opening_in_a_missing_directory_raises(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="directory"):
        SQLiteStore(tmp_path / "missing" / "x.db")


def test_a_passed_deadline_fails_the_batch() -> None:
    with SQLiteStore() as store:
        late = StoreContext(deadline=time.monotonic() - 1)
        with pytest.raises(StoreError, match="deadline"):
            store.batch([Put(record=rec("k"))], ctx=late)
        assert store.get(NS, "k") is None
        soon = StoreContext(deadline=time.monotonic() + 60, tag="test")
        assert store.batch([Put(record=rec("k")), Get(namespace=NS, key="k")], ctx=soon)[1]


def test_an_unknown_op_is_a_config_error() -> None:
    with SQLiteStore() as store, pytest.raises(ConfigError, match=r"#0.*unknown operation"):
        store.batch(["not an op"])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("scan", "match"),
    [
        (Scan(prefix=NS, limit=-1), "limit"),
        (Scan(prefix=NS, where={"a": None}), "where"),  # type: ignore[dict-item]
        (Scan(prefix=NS, where={'a"b': 1}), "where"),
        (Scan(prefix=NS, where={"": 1}), "where"),
    ],
)
def test_bad_scan_arguments_are_config_errors(scan: Scan, match: str) -> None:
    with SQLiteStore() as store, pytest.raises(ConfigError, match=match):
        store.batch([scan])


def test_bad_record_fields_are_config_errors() -> None:
    with SQLiteStore() as store:
        for bad in (
            Record(namespace=NS, key=1, kind="k"),  # type: ignore[arg-type]
            Record(namespace=NS, key="k", kind=None),  # type: ignore[arg-type]
            Record(namespace=NS, key="k", kind="k", text=b"bytes"),  # type: ignore[arg-type]
            Record(namespace=NS, key="k", kind="k", data={"x": float("nan")}),
        ):
            with pytest.raises(ConfigError):
                store.put(bad)


def test_sqlite_errors_become_store_errors() -> None:
    with SQLiteStore() as store:
        stored = store.put(rec("k", "text"))
        conn = store._conn
        assert conn is not None
        conn.execute("DROP TABLE vector_sets")  # sabotage: every vector write now fails
        op = PutVectors(model="m", items=[(NS, "k", stored.seq)], vectors=np.ones((1, 2)))
        with pytest.raises(StoreError, match=r"#0.*SQLite"):
            store.batch([op])


def test_threads_share_one_store(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "x.db") as store:

        def write(worker: int) -> None:
            for i in range(50):
                store.put(rec(f"{worker}-{i}", f"thread {worker} item {i}"))

        threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        records = store.scan(NS)
        assert len(records) == 200
        assert [r.seq for r in records] == sorted({r.seq for r in records})


def test_a_second_connection_waits_for_the_write_lock(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    with SQLiteStore(path) as store:
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        timer = threading.Timer(0.2, lambda: other.execute("COMMIT"))
        timer.start()
        try:
            store.put(rec("k"))  # waits for the other writer, then succeeds
        finally:
            timer.join()
            other.close()
        assert store.get(NS, "k") is not None


def test_a_busy_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    with SQLiteStore(path) as store:
        assert store._conn is not None
        store._conn.execute("PRAGMA busy_timeout = 0")
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreError, match="write lock"):
                store.put(rec("k"))
            other.execute("COMMIT")
        finally:
            other.close()
        assert store.put(rec("k")).seq == 1


def test_an_sqlite_failure_mid_batch_rolls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    with SQLiteStore() as store:
        store.put(rec("k", "text"))

        def broken(conn: sqlite3.Connection) -> None:
            raise sqlite3.OperationalError("disk I/O error")

        monkeypatch.setattr(store, "_check_external_writes", broken)
        with pytest.raises(StoreError, match="disk I/O error"):
            store.put(rec("j"))
        monkeypatch.undo()
        assert keys(store.scan(NS)) == ["k"]


def test_live_indexes_follow_kind_changes_and_deletes() -> None:
    with SQLiteStore() as store:
        a = store.put(rec("a", "shared words", kind="turn"))
        b = store.put(rec("b", "shared words", kind="turn"))
        items = [(NS, "a", a.seq), (NS, "b", b.seq)]
        store.batch([PutVectors(model="m", items=items, vectors=np.eye(2, dtype=np.float32))])
        assert len(store.search(NS, "shared")) == 2  # load both indexes
        assert len(store.vector_search(NS, np.ones(2, dtype=np.float32), model="m")) == 2
        store.put(rec("a", "shared words", kind="summary"))
        assert keys(store.search(NS, "shared", kind="summary")) == ["a"]
        found = store.vector_search(NS, np.ones(2, np.float32), model="m", kind="summary")
        assert keys(found) == ["a"]
        store.delete(NS, "a")
        assert keys(store.search(NS, "shared")) == ["b"]
        assert keys(store.vector_search(NS, np.ones(2, np.float32), model="m")) == ["b"]


def test_bad_vectors_are_config_errors() -> None:
    with SQLiteStore() as store:
        stored = store.put(rec("a", "text"))
        store.batch([PutVectors(model="m", items=[(NS, "a", stored.seq)], vectors=np.ones((1, 2)))])
        with pytest.raises(ConfigError, match="1-d"):
            store.vector_search(NS, np.ones((1, 2), np.float32), model="m")
        with pytest.raises(ConfigError, match="numbers"):
            store.vector_search(NS, ["a", "b"], model="m")  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="NaN"):
            store.vector_search(NS, np.array([np.inf, 1.0], np.float32), model="m")


def test_another_process_writing_records_only_keeps_the_vector_index(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    with SQLiteStore(path) as reader, SQLiteStore(path) as writer:
        stored = reader.put(rec("a", "text"))
        op = PutVectors(model="m", items=[(NS, "a", stored.seq)], vectors=np.ones((1, 2)))
        reader.batch([op])
        reader.vector_search(NS, np.ones(2, np.float32), model="m")
        index = reader._vectors["m"]
        writer.put(rec("b", "more text"))
        assert keys(reader.vector_search(NS, np.ones(2, np.float32), model="m")) == ["a"]
        assert reader._vectors["m"] is index  # still current: not rebuilt


# --- the decoded-record cache of search ------------------------------------------------------


def data_rec(key: str, version: int, text: str = "alpha words") -> Record:
    return Record(namespace=NS, key=key, kind="note", text=text, data={"v": version})


def test_search_reuses_decoded_records_until_a_write_changes_them() -> None:
    with SQLiteStore() as store:
        store.put(data_rec("a", 1))
        first = store.search(NS, "alpha")[0].record
        assert store.search(NS, "alpha")[0].record is first  # decoded once
        store.put(data_rec("a", 2))  # same text: the indexes keep the row, the data changed
        second = store.search(NS, "alpha")[0].record
        assert second.data == {"v": 2}
        assert second is not first
        store.delete(NS, "a")
        assert store.search(NS, "alpha") == []
        assert store._records == {}


def test_a_rolled_back_batch_leaves_no_record_it_wrote_in_the_cache() -> None:
    with SQLiteStore() as store:
        store.put(data_rec("a", 1))
        store.search(NS, "alpha")
        bad = Record(namespace=NS, key="b", kind="note", data={"x": object()})
        with pytest.raises(ConfigError, match="JSON-serializable"):
            store.batch(
                [Put(record=data_rec("a", 2)), Search(prefix=NS, query="alpha"), Put(record=bad)]
            )
        assert store.search(NS, "alpha")[0].record.data == {"v": 1}


def test_another_connection_writing_drops_the_cache(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    with SQLiteStore(path) as reader, SQLiteStore(path) as writer:
        reader.put(data_rec("a", 1))
        assert reader.search(NS, "alpha")[0].record.data == {"v": 1}
        writer.put(data_rec("a", 2))
        assert reader.search(NS, "alpha")[0].record.data == {"v": 2}


def test_the_cache_keeps_the_most_recent_records_or_none() -> None:
    with SQLiteStore(record_cache=2) as store:
        for i in range(3):
            store.put(data_rec(f"k{i}", i))
        assert len(store.search(NS, "alpha")) == 3
        assert len(store._records) == 2
        assert {h.record.key for h in store.search(NS, "alpha")} == {"k0", "k1", "k2"}
    with SQLiteStore(record_cache=0) as store:
        store.put(data_rec("a", 1))
        first = store.search(NS, "alpha")[0].record
        again = store.search(NS, "alpha")[0].record
        assert again == first
        assert again is not first
        assert store._records == {}


@pytest.mark.parametrize("size", [-1, 1.5, True, "8"])
def test_a_bad_record_cache_is_a_config_error(size: object) -> None:
    with pytest.raises(ConfigError, match=r"`record_cache` must be an int >= 0"):
        SQLiteStore(record_cache=size)  # type: ignore[arg-type]


def test_reads_with_strings_sqlite_cannot_take_are_config_errors() -> None:
    with SQLiteStore() as store:
        with pytest.raises(ConfigError, match=r"#0.*not valid Unicode"):
            store.batch([Scan(prefix=NS, where={"name": "caf\udce9"})])
        with pytest.raises(ConfigError, match="`after_seq`"):
            store.batch([Unembedded(model="m", after_seq="1")])  # type: ignore[arg-type]


def test_a_lazy_search_decodes_a_record_s_data_when_it_is_read() -> None:
    with SQLiteStore() as store:
        store.put(Record(namespace=NS, key="a", kind="note", text="alpha", data={"v": [1, 2]}))
        lazy = store.batch([Search(prefix=NS, query="alpha", lazy=True)])[0][0].record
        assert not isinstance(lazy.data, dict)  # JSON text until read
        assert lazy.data["v"] == [1, 2]
        assert lazy.data.get("w") is None
        assert "v" in lazy.data
        assert dict(lazy.data) == {"v": [1, 2]}
        assert len(lazy.data) == 1
        assert lazy == store.get(NS, "a")  # the same record as an eager read's
        assert copy.deepcopy(lazy.data) == {"v": [1, 2]}
        # A caller that did not ask for it gets a dict, from the same cache entry.
        eager = store.search(NS, "alpha")[0].record
        assert type(eager.data) is dict
        assert eager == lazy
        assert store.search(NS, "alpha")[0].record is eager

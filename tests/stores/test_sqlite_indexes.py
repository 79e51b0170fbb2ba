"""The indexes beside SQLite: saved on close, reused when current, rebuilt from SQLite when
missing, stale, corrupt or changed by another process; and their search paths checked
against brute-force references."""

from __future__ import annotations

import math
import random
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from loomctx.errors import StoreError
from loomctx.stores import _lexical, _vectors
from loomctx.stores._lexical import LexicalIndex
from loomctx.stores._vectors import VectorIndex
from loomctx.stores.base import (
    Get,
    Hit,
    Namespace,
    Put,
    PutVectors,
    Record,
    Scan,
    Search,
    VectorSearch,
)
from loomctx.stores.sqlite import SQLiteStore
from loomctx.text import terms

NS = ("t", "a")
WORDS = [
    *("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"),
    *("lambda", "数据库", "北京", "天气"),
]


def fill(store: SQLiteStore, n: int, *, seed: int = 0, namespace: Namespace = NS) -> None:
    rng = random.Random(seed)
    stored = store.put_many(
        [
            Record(
                namespace=namespace,
                key=f"k{i}",
                kind=rng.choice(["turn", "summary"]),
                text=" ".join(rng.choices(WORDS, k=rng.randint(1, 8))),
                data={"i": i},
            )
            for i in range(n)
        ]
    )
    vectors = np.random.default_rng(seed).standard_normal((n, 8)).astype(np.float32)
    items = [(r.namespace, r.key, r.seq) for r in stored]
    store.batch([PutVectors(model="m", items=items, vectors=vectors)])


def answers(store: SQLiteStore) -> list[object]:
    query = np.linspace(-1, 1, 8).astype(np.float32)
    return store.batch(
        [
            Scan(prefix=NS, newest_first=True, limit=20),
            Search(prefix=NS, query="alpha 数据库 theta", limit=20),
            Search(prefix=("t",), query="gamma", kind="summary", limit=20),
            VectorSearch(prefix=NS, vector=query, model="m", limit=20),
            VectorSearch(prefix=(), vector=-query, model="m", kind="turn", limit=20),
        ]
    )


def test_a_reopened_store_answers_the_same(tmp_path: Path) -> None:
    path = tmp_path / "loom.db"
    with SQLiteStore(path) as store:
        fill(store, 300)
        before = answers(store)
    assert (tmp_path / "loom.db.index" / "lexical.npz").is_file()
    with SQLiteStore(path) as store:
        assert answers(store) == before
        assert store._index_origin == {"lexical": "file", "m": "file"}


def test_deleted_side_files_are_rebuilt_from_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "loom.db"
    with SQLiteStore(path) as store:
        fill(store, 300)
        before = answers(store)
    shutil.rmtree(tmp_path / "loom.db.index")
    with SQLiteStore(path) as store:
        assert answers(store) == before
        assert store._index_origin == {"lexical": "sqlite", "m": "sqlite"}
    with SQLiteStore(path) as store:  # and saved again
        assert answers(store) == before
        assert store._index_origin == {"lexical": "file", "m": "file"}


def test_stale_side_files_are_rebuilt_from_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "loom.db"
    with SQLiteStore(path) as store:
        fill(store, 100)
        answers(store)
    old = tmp_path / "old-index"
    shutil.copytree(tmp_path / "loom.db.index", old)
    with SQLiteStore(path) as store:
        fill(store, 50, seed=1, namespace=("t", "a", "more"))
        store.delete(NS, "k3")
        store.put(Record(namespace=NS, key="k4", kind="note", text="changed text"))
        after = answers(store)
    shutil.rmtree(tmp_path / "loom.db.index")
    shutil.copytree(old, tmp_path / "loom.db.index")
    with SQLiteStore(path) as store:
        assert answers(store) == after
        assert store._index_origin == {"lexical": "sqlite", "m": "sqlite"}


def test_corrupt_or_foreign_side_files_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "loom.db"
    with SQLiteStore(path) as store:
        fill(store, 50)
        before = answers(store)
    for file in (tmp_path / "loom.db.index").iterdir():
        file.write_bytes(b"garbage")
    with SQLiteStore(path) as store:
        assert answers(store) == before
        assert store._index_origin == {"lexical": "sqlite", "m": "sqlite"}
    # Another database at the same path (a new store_id) never reuses them.
    index = tmp_path / "loom.db.index"
    saved = tmp_path / "saved-index"
    shutil.copytree(index, saved)
    path.unlink()
    for extra in tmp_path.glob("loom.db-*"):
        extra.unlink()
    shutil.rmtree(index)
    with SQLiteStore(path) as store:
        fill(store, 50)  # the same content, but another database
    assert not index.exists()
    shutil.copytree(saved, index)
    with SQLiteStore(path) as store:
        answers(store)
        assert store._index_origin == {"lexical": "sqlite", "m": "sqlite"}


def test_an_unwritable_index_directory_is_not_an_error(tmp_path: Path) -> None:
    path = tmp_path / "loom.db"
    (tmp_path / "loom.db.index").write_text("a file where the directory should be")
    with SQLiteStore(path) as store:
        fill(store, 20)
        before = answers(store)
    with SQLiteStore(path) as store:
        assert answers(store) == before


def test_memory_stores_write_no_side_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with SQLiteStore() as store:
        fill(store, 20)
        answers(store)
    assert list(tmp_path.iterdir()) == []


def test_writes_of_another_process_are_seen(tmp_path: Path) -> None:
    path = tmp_path / "loom.db"
    with SQLiteStore(path) as reader, SQLiteStore(path) as writer:
        fill(reader, 30)
        answers(reader)  # load both indexes
        stored = writer.put(Record(namespace=NS, key="new", kind="turn", text="omega omega"))
        vector = np.full((1, 8), 5.0, dtype=np.float32)
        writer.batch([PutVectors(model="m", items=[(NS, "new", stored.seq)], vectors=vector)])
        writer.delete(NS, "k0")
        hits = reader.search(NS, "omega")
        assert [h.record.key for h in hits] == ["new"]
        nearest = reader.vector_search(NS, np.ones(8, dtype=np.float32), model="m", limit=1)
        assert [h.record.key for h in nearest] == ["new"]
        assert reader.get(NS, "k0") is None
        assert "k0" not in {h.record.key for h in reader.search(NS, " ".join(WORDS), limit=100)}


def test_a_read_only_batch_reads_one_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "loom.db"
    with SQLiteStore(path) as reader, SQLiteStore(path) as writer:
        fill(reader, 5)
        answers(reader)
        check = SQLiteStore._check_external_writes

        def commit_meanwhile(self: SQLiteStore, conn: object) -> None:
            check(self, conn)  # type: ignore[arg-type]
            if self is reader:  # another process commits after the indexes were checked
                writer.put(Record(namespace=NS, key="late", kind="turn", text="omega"))

        monkeypatch.setattr(SQLiteStore, "_check_external_writes", commit_meanwhile)
        late: list[Get | Search] = [Get(namespace=NS, key="late"), Search(prefix=NS, query="omega")]
        assert reader.batch(late) == [None, []]
        monkeypatch.undo()
        found, hits = reader.batch(late)
        assert found is not None
        assert [hit.record.key for hit in hits] == ["late"]


def test_a_loaded_vector_index_still_checks_the_query_dimension() -> None:
    with SQLiteStore() as store:
        fill(store, 5)
        assert store.vector_search(NS, np.ones(8, dtype=np.float32), model="m")  # loads it
        with pytest.raises(StoreError, match="8-d"):
            store.vector_search(NS, np.ones(3, dtype=np.float32), model="m")


def test_a_rolled_back_batch_leaves_no_trace_in_the_indexes() -> None:
    with SQLiteStore() as store:
        fill(store, 20)
        answers(store)
        stored = store.get(NS, "k1")
        assert stored is not None
        vector = np.full((1, 8), 9.0, dtype=np.float32)
        with pytest.raises(Exception, match="#2"):
            store.batch(
                [
                    Put(record=Record(namespace=NS, key="ghost", kind="turn", text="phantom")),
                    PutVectors(model="m", items=[(NS, "k1", stored.seq)], vectors=vector),
                    Put(record=Record(namespace=("bad/ns",), key="x", kind="turn")),
                ]
            )
        assert store.search(NS, "phantom") == []
        nearest = store.vector_search(NS, np.ones(8, dtype=np.float32), model="m", limit=1)
        assert nearest[0].score < 0.99 or nearest[0].record.key != "k1"


# --- the lexical index against a reference BM25 ---------------------------------------------


def reference_bm25(
    docs: dict[int, tuple[str, str, list[str]]], query: list[str], prefix: str, kind: str | None
) -> dict[int, float]:
    live = {rid: d for rid, d in docs.items() if d[2]}
    n = len(live)
    average = sum(len(d[2]) for d in live.values()) / n
    df = Counter(t for d in live.values() for t in set(d[2]))
    out: dict[int, float] = {}
    for rid, (namespace, doc_kind, doc_terms) in live.items():
        if not namespace.startswith(prefix) or kind not in (None, doc_kind):
            continue
        counts = Counter(doc_terms)
        score = 0.0
        for t in dict.fromkeys(query):
            if counts[t]:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                tf = counts[t]
                score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len(doc_terms) / average))
        if score > 0:
            out[rid] = score
    return out


def plain_postings(
    index: LexicalIndex, term_ids: list[int]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.float64]]:
    """`LexicalIndex._postings` written term by term: each term's IDF a scalar, its weights
    a `np.full`; base postings of every term, then the tail's."""
    rows, tfs, weights = [], [], []
    idf = {
        t: float(np.log(1 + (index._live - index._df[t] + 0.5) / (index._df[t] + 0.5)))
        for t in term_ids
    }
    for t in term_ids:
        if t < len(index._offsets) - 1:
            lo, hi = index._offsets[t], index._offsets[t + 1]
            rows.append(index._rows[lo:hi])
            tfs.append(index._tfs[lo:hi])
            weights.append(np.full(hi - lo, idf[t]))
    for t in term_ids:
        positions = index._tail_by_term.get(t, [])
        rows.append(index._tail[1, positions])
        tfs.append(index._tail[2, positions].astype(np.float32))
        weights.append(np.full(len(positions), idf[t]))
    return (
        np.concatenate([np.empty(0, dtype=np.int64), *rows]).astype(np.int64),
        np.concatenate([np.empty(0, dtype=np.float32), *tfs]),
        np.concatenate([np.empty(0), *weights]),
    )


@pytest.mark.parametrize("min_merge", [3, 2_000])
def test_lexical_index_matches_a_reference_bm25(
    monkeypatch: pytest.MonkeyPatch, min_merge: int
) -> None:
    monkeypatch.setattr(_lexical, "_MIN_MERGE", min_merge)
    rng = random.Random(min_merge)
    index = LexicalIndex(capacity=2)
    docs: dict[int, tuple[str, str, list[str]]] = {}
    namespaces = ["t/a/", "t/ab/", "t/a/s/", "u/"]
    for step in range(400):
        rid = rng.randrange(60)
        action = rng.random()
        if rid in docs and action < 0.3:
            index.remove(rid, docs.pop(rid)[2])
        elif rid in docs and action < 0.4:
            namespace, _, doc_terms = docs[rid]
            kind = rng.choice(["x", "y"])
            index.set_kind(rid, kind)
            docs[rid] = (namespace, kind, doc_terms)
        else:
            if rid in docs:
                index.remove(rid, docs[rid][2])
            doc_terms = terms(" ".join(rng.choices(WORDS, k=rng.randint(0, 6))))
            docs[rid] = (rng.choice(namespaces), rng.choice(["x", "y"]), doc_terms)
            index.add(rid, docs[rid][0], docs[rid][1], doc_terms)
        if step % 20 == 0 and any(d[2] for d in docs.values()):
            query = terms(" ".join(rng.choices(WORDS, k=3)))
            term_ids = [index._vocab[t] for t in dict.fromkeys(query) if t in index._vocab]
            for got, plain in zip(
                index._postings(term_ids), plain_postings(index, term_ids), strict=True
            ):
                assert got.dtype == plain.dtype
                assert got.tobytes() == plain.tobytes()  # the same scores, to the bit
            for prefix, kind in [("", None), ("t/a/", None), ("t/a/", "x"), ("v/", None)]:
                expected = reference_bm25(docs, query, prefix, kind)
                found = index.search(query, prefix=prefix, kind=kind, limit=100)
                assert dict(found) == pytest.approx(expected, rel=1e-5)
                ranked = sorted(expected.items(), key=lambda item: (-item[1], item[0]))
                assert [rid for rid, _ in found] == [rid for rid, _ in ranked] or math.isclose(
                    found[0][1], ranked[0][1], rel_tol=1e-5
                )
                top = index.search(query, prefix=prefix, kind=kind, limit=3)
                assert [score for _, score in top] == pytest.approx(
                    [score for _, score in ranked[:3]], rel=1e-5
                )


def test_lexical_index_edge_cases(tmp_path: Path) -> None:
    index = LexicalIndex()
    assert index.search(["x"], prefix="", kind=None, limit=5) == []
    index.add(1, "t/", "k", [])  # nothing to index
    assert index.count == 0
    index.add(1, "t/", "k", ["alpha"])
    index.remove(99, ["alpha"])  # unknown: ignored
    index.set_kind(99, "k")
    assert index.search(["alpha"], prefix="", kind=None, limit=0) == []
    assert index.search(["alpha"], prefix="t/", kind="other", limit=5) == []
    assert index.search(["beta"], prefix="", kind=None, limit=5) == []
    assert [rid for rid, _ in index.search(["alpha"], prefix="t/", kind="k", limit=5)] == [1]
    path = tmp_path / "lexical.npz"
    index.save(path, stamp={"v": 1})
    assert LexicalIndex.load(path, stamp={"v": 2}) is None
    loaded = LexicalIndex.load(path, stamp={"v": 1})
    assert loaded is not None
    assert loaded.search(["alpha"], prefix="", kind=None, limit=5) == index.search(
        ["alpha"], prefix="", kind=None, limit=5
    )
    assert LexicalIndex.from_rows([]).count == 0


# --- the vector index against brute force ----------------------------------------------------


def brute_force(
    vectors: dict[int, tuple[str, str, npt.NDArray[np.float32]]],
    query: npt.NDArray[np.float32],
    prefix: str,
    kind: str | None,
) -> dict[int, float]:
    q = query / np.linalg.norm(query)
    return {
        rid: float(v @ q / np.linalg.norm(v))
        for rid, (namespace, k, v) in vectors.items()
        if namespace.startswith(prefix) and kind in (None, k)
    }


@pytest.mark.parametrize("codes_from", [_vectors.CODES_FROM, 0])  # float32 rows, int16 codes
def test_vector_index_exact_path_matches_brute_force(
    monkeypatch: pytest.MonkeyPatch, codes_from: int
) -> None:
    monkeypatch.setattr(_vectors, "CODES_FROM", codes_from)
    rng = np.random.default_rng(1)
    index = VectorIndex("m", 16, capacity=2)
    vectors: dict[int, tuple[str, str, npt.NDArray[np.float32]]] = {}
    for step in range(300):
        rid = int(rng.integers(80))
        if rid in vectors and rng.random() < 0.3:
            index.remove(rid)
            del vectors[rid]
            continue
        if rid in vectors and rng.random() < 0.2:
            kind = str(rng.choice(["x", "y"]))
            index.touch(rid, kind, step)
            vectors[rid] = (vectors[rid][0], kind, vectors[rid][2])
            continue
        v = rng.standard_normal(16).astype(np.float32)
        vectors[rid] = (str(rng.choice(["t/a/", "t/ab/", "u/"])), str(rng.choice(["x", "y"])), v)
        index.upsert(rid, v, vectors[rid][0], vectors[rid][1], step)
    assert index.count == len(vectors)
    query = rng.standard_normal(16).astype(np.float32)
    for prefix, kind in [("", None), ("t/a/", None), ("t/", "y"), ("zz/", None)]:
        expected = brute_force(vectors, query, prefix, kind)
        found = index.search(query, prefix=prefix, kind=kind, limit=1000)
        # int16 codes: each coordinate within 1/65534 of the row's largest, so < 1e-4 here
        assert dict(found) == pytest.approx(expected, abs=1e-5 if codes_from else 1e-4)
        assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)
    assert index.search(query, prefix="", kind="absent", limit=5) == []


@pytest.mark.parametrize("codes_from", [_vectors.CODES_FROM, 0])
def test_vector_index_shortlist_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, codes_from: int
) -> None:
    """Above `EXACT_ROWS` candidates the sign-bit shortlist runs; on clustered vectors (like
    real embeddings) it finds the exact top hits, and namespace and kind masks stay exact."""
    monkeypatch.setattr(_vectors, "CODES_FROM", codes_from)
    monkeypatch.setattr(_vectors, "EXACT_ROWS", 100)
    monkeypatch.setattr(_vectors, "RERANK", 64)
    rng = np.random.default_rng(2)
    centers = rng.standard_normal((20, 70)).astype(np.float32)
    index = VectorIndex("m", 70)
    vectors: dict[int, tuple[str, str, npt.NDArray[np.float32]]] = {}
    for rid in range(1500):
        v = centers[rid % 20] + 0.1 * rng.standard_normal(70).astype(np.float32)
        vectors[rid] = ("t/a/" if rid % 3 else "t/b/", "x" if rid % 2 else "y", v)
        index.upsert(rid, v, vectors[rid][0], vectors[rid][1], rid)
    for rid in range(0, 1500, 7):  # removals after the bits exist move rows with their bits
        if rid == 0:
            index.search(centers[0], prefix="", kind=None, limit=1)
        index.remove(rid)
        del vectors[rid]
    for rid in range(1500, 1700):  # rows added after the bits exist get bits too
        v = centers[rid % 20] + 0.1 * rng.standard_normal(70).astype(np.float32)
        vectors[rid] = ("t/a/", "x", v)
        index.upsert(rid, v, "t/a/", "x", rid)
    for prefix, kind in [("", None), ("t/a/", None), ("t/a/", "y")]:
        for c in range(0, 20, 5):
            query = centers[c] + 0.05 * rng.standard_normal(70).astype(np.float32)
            expected = brute_force(vectors, query, prefix, kind)
            best = sorted(expected.items(), key=lambda item: -item[1])[:5]
            found = index.search(query, prefix=prefix, kind=kind, limit=5)
            assert [rid for rid, _ in found] == [rid for rid, _ in best]
            assert all(vectors[rid][0].startswith(prefix) for rid, _ in found)
    path = tmp_path / "v.npz"
    index.save(path, store_id="s")
    assert VectorIndex.load(path, store_id="s", model="m", dim=70, count=1, high_seq=1) is None
    loaded = VectorIndex.load(
        path, store_id="s", model="m", dim=70, count=index.count, high_seq=index.high_seq
    )
    assert loaded is not None
    query = centers[3]
    assert loaded.search(query, prefix="t/", kind="x", limit=7) == index.search(
        query, prefix="t/", kind="x", limit=7
    )


@pytest.mark.parametrize("dim", [1, 7, 128, 384])
def test_vectors_are_normalised_as_linalg_norm_does(dim: int) -> None:
    vectors = np.random.default_rng(dim).standard_normal((50, dim)).astype(np.float32)
    vectors[0] = 0
    vectors[1] *= 1e-20
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1
    assert _vectors._normalise(vectors).tobytes() == (vectors / norms).tobytes()
    one = _vectors._normalise(vectors[7].reshape(1, -1))
    assert one.tobytes() == (vectors[7] / norms[7]).tobytes()


def test_vector_index_edge_cases() -> None:
    index = VectorIndex("m", 3)
    assert index.search(np.ones(3, np.float32), prefix="", kind=None, limit=5) == []
    index.upsert(1, np.zeros(3, np.float32), "t/", "k", 1)  # a zero vector scores 0
    assert index.search(np.ones(3, np.float32), prefix="", kind=None, limit=5) == [(1, 0.0)]
    assert index.search(np.ones(3, np.float32), prefix="u/", kind=None, limit=5) == []
    assert index.search(np.ones(3, np.float32), prefix="", kind=None, limit=0) == []
    index.remove(1)
    index.remove(1)
    index.touch(1, "k", 2)
    assert index.count == 0


def test_hits_are_in_rank_order_through_the_store() -> None:
    with SQLiteStore() as store:
        fill(store, 200)
        hits: list[Hit] = store.search(NS, "alpha beta", limit=50)
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_lexical_index_terms_whose_records_are_all_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_lexical, "_MIN_MERGE", 1)
    index = LexicalIndex()
    index.add(1, "t/", "k", ["gone", "kept"])
    index.add(2, "t/", "k", ["kept"])
    index.remove(1, ["gone", "kept"])  # merges: `gone` keeps a vocabulary entry, no postings
    assert index.search(["gone"], prefix="", kind=None, limit=5) == []
    assert [rid for rid, _ in index.search(["gone", "kept"], prefix="", kind=None, limit=5)] == [2]


def test_lexical_index_tail_grows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_lexical, "_MIN_MERGE", 10**9)
    index = LexicalIndex()
    for rid in range(1500):
        index.add(rid, "t/", "k", [f"w{rid}", "common", "shared"])
    assert index.count == 1500
    assert [rid for rid, _ in index.search(["w7"], prefix="t/", kind=None, limit=3)] == [7]


@pytest.mark.parametrize("codes_from", [_vectors.CODES_FROM, 0])
def test_vector_index_branches(monkeypatch: pytest.MonkeyPatch, codes_from: int) -> None:
    monkeypatch.setattr(_vectors, "CODES_FROM", codes_from)
    monkeypatch.setattr(_vectors, "EXACT_ROWS", 50)
    monkeypatch.setattr(_vectors, "RERANK", 8)
    index = VectorIndex("m", 64, capacity=16)  # 64-d: sign bits need no padding
    same = np.ones(64, dtype=np.float32)
    for rid in range(60):  # identical vectors: every distance ties at the cutoff
        index.upsert(rid, same, "t/a/", "k", rid)
    for rid in range(60, 64):
        index.upsert(rid, -same, "t/b/", "k", rid)
    top = index.search(same, prefix="", kind=None, limit=1)
    assert top == [(0, pytest.approx(1.0))]
    for rid in range(64, 200):  # grows the arrays after the bits exist
        index.upsert(rid, same, "t/a/", "k", rid)
    assert index.search(same, prefix="", kind=None, limit=1)[0][1] == pytest.approx(1.0)
    small = index.search(same, prefix="t/b/", kind=None, limit=2)  # few rows: exact
    assert [rid for rid, _ in small] == [60, 61]
    assert small[0][1] == pytest.approx(-1.0)
    assert VectorIndex.from_rows("m", 4, [], expected=0).count == 0

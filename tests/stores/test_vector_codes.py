"""int16 vector codes against float32 scoring (random and real vectors), the switch to codes
as an index grows, and side files of the new format (older ones are rebuilt from SQLite)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from loomctx.embeddings import StaticEmbedder
from loomctx.stores import _vectors
from loomctx.stores._snapshot import read_snapshot, write_snapshot
from loomctx.stores._vectors import VectorIndex
from loomctx.stores.sqlite import SQLiteStore

from .test_sqlite_indexes import answers, fill

DOCS = Path(__file__).parents[2] / "docs"


def _real_vectors() -> npt.NDArray[np.float32]:
    """Vectors of real sentences (the docs), by the shipped static table."""
    text = " ".join(path.read_text() for path in sorted(DOCS.glob("*.md")))
    sentences = sorted({s.strip() for s in re.split(r"[.\n]", text) if len(s.split()) >= 4})
    return np.asarray(StaticEmbedder().embed(sentences[:3000], kind="document"), dtype=np.float32)


@pytest.mark.parametrize("source", ["random", "real"])
def test_codes_rank_as_float32_does(monkeypatch: pytest.MonkeyPatch, source: str) -> None:
    """int16 codes move scores by less than 1e-4 and leave the top 10 as float32 ranks it."""
    rng = np.random.default_rng(5)
    if source == "random":
        vectors = rng.standard_normal((3000, 384)).astype(np.float32)
    else:
        vectors = _real_vectors()
    assert len(vectors) > 500
    queries = vectors[rng.choice(len(vectors), 40, replace=False)]
    queries = queries + 0.3 * rng.standard_normal(queries.shape).astype(np.float32)
    indexes = {}
    for codes_from in (10**9, 0):
        monkeypatch.setattr(_vectors, "CODES_FROM", codes_from)
        index = VectorIndex("m", vectors.shape[1])
        for record_id, vector in enumerate(vectors):
            index.upsert(record_id, vector, "t/", "k", record_id)
        indexes[codes_from] = index
    assert indexes[0]._scales is not None
    assert indexes[10**9]._scales is None
    units = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    overlap = []
    for query in queries:
        exact = units.astype(np.float64) @ (query / np.linalg.norm(query))
        plain = indexes[10**9].search(query, prefix="", kind=None, limit=10)
        coded = indexes[0].search(query, prefix="", kind=None, limit=10)
        assert max(abs(score - exact[rid]) for rid, score in coded) < 1e-4
        overlap.append(len({rid for rid, _ in plain} & {rid for rid, _ in coded}))
        # Any difference is a near-tie: the 10th float32 score is within the error bound.
        for rid in {rid for rid, _ in plain} ^ {rid for rid, _ in coded}:
            assert abs(exact[rid] - plain[-1][1]) < 2e-4
    assert sum(overlap) / len(overlap) >= 9.9


@pytest.mark.parametrize("chunk", [7, 1024])
def test_an_index_switches_to_codes_as_it_grows(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, chunk: int
) -> None:
    monkeypatch.setattr(_vectors, "CODES_FROM", 100)
    monkeypatch.setattr(_vectors, "_CHUNK", chunk)
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((300, 24)).astype(np.float32)
    vectors[5] = 0  # a zero vector: zero codes, scores 0
    index = VectorIndex("m", 24, capacity=16)
    for record_id in range(100):
        index.upsert(record_id, vectors[record_id], "t/", "k", record_id)
    assert index._scales is None
    index.search(vectors[0], prefix="", kind=None, limit=3)  # sign bits before the switch
    for record_id in range(100, 300):
        index.upsert(record_id, vectors[record_id], "t/", "k", record_id)
    assert index._scales is not None
    assert index._vecs.dtype == np.int16
    for record_id in range(0, 300, 4):  # removals move codes with their scales
        index.remove(record_id)
    index.upsert(1, -vectors[1], "t/", "k", 301)  # an update re-encodes the row
    live = {rid: (-vectors[1] if rid == 1 else vectors[rid]) for rid in range(300) if rid % 4}
    units = {rid: v / (np.linalg.norm(v) or 1) for rid, v in live.items()}
    query = rng.standard_normal(24).astype(np.float32)
    found = dict(index.search(query, prefix="", kind=None, limit=1000))
    expected = {rid: float(u @ query / np.linalg.norm(query)) for rid, u in units.items()}
    assert found == pytest.approx(expected, abs=1e-4)
    assert found[5] == 0.0
    # Built from SQLite's rows (in chunks) and reloaded from its side file: the same codes.
    rows = [(rid, "t/", "k", v.astype("<f4").tobytes(), rid) for rid, v in live.items()]
    built = VectorIndex.from_rows("m", 24, rows, expected=len(rows))
    assert built._scales is not None
    assert dict(built.search(query, prefix="", kind=None, limit=50)) == pytest.approx(
        dict(index.search(query, prefix="", kind=None, limit=50)), abs=1e-6
    )
    index.save(tmp_path / "v.npz", store_id="s")
    loaded = VectorIndex.load(
        tmp_path / "v.npz", store_id="s", model="m", dim=24, count=index.count, high_seq=301
    )
    assert loaded is not None
    assert loaded._vecs.dtype == np.int16
    assert loaded.search(query, prefix="", kind=None, limit=50) == index.search(
        query, prefix="", kind=None, limit=50
    )
    loaded.upsert(999, vectors[0], "t/", "k", 302)  # a loaded index grows as any other
    assert loaded.search(vectors[0], prefix="", kind=None, limit=1)[0][0] == 999
    # Codes without their scales, or arrays of another length than the manifest says: rebuilt.
    found = read_snapshot(tmp_path / "v.npz", {})
    assert found is not None
    manifest, arrays = found
    for broken in (
        {name: array for name, array in arrays.items() if name != "scales"},
        {**arrays, "vectors": arrays["vectors"][:-1], "scales": arrays["scales"][:-1]},
    ):
        write_snapshot(tmp_path / "v.npz", manifest, broken)
        stamp = {"store_id": "s", "model": "m", "dim": 24, "count": index.count}
        assert VectorIndex.load(tmp_path / "v.npz", **stamp, high_seq=301) is None


@pytest.mark.parametrize("codes_from", [0, 10**9])
def test_side_files_of_the_old_format_are_rebuilt(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, codes_from: int
) -> None:
    monkeypatch.setattr(_vectors, "CODES_FROM", codes_from)
    path = tmp_path / "loom.db"
    with SQLiteStore(path) as store:
        fill(store, 300)
        before = answers(store)
    with SQLiteStore(path) as store:  # the new format is read back
        assert answers(store) == before
        assert store._index_origin["m"] == "file"
    (side,) = (tmp_path / "loom.db.index").glob("vectors-*.npz")
    found = read_snapshot(side, {})
    assert found is not None
    manifest, arrays = found
    assert manifest["format"] == 2
    assert ("scales" in arrays) == (codes_from == 0)
    # What format 1 wrote: float32 vectors, no scales.
    old = {name: array for name, array in arrays.items() if name != "scales"}
    old["vectors"] = np.zeros((manifest["count"], manifest["dim"]), dtype=np.float32)
    write_snapshot(side, {**manifest, "format": 1}, old)
    with SQLiteStore(path) as store:
        assert answers(store) == before
        assert store._index_origin["m"] == "sqlite"
    found = read_snapshot(side, {})
    assert found is not None
    assert found[0]["format"] == 2

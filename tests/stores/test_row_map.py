"""`RowMap` and `SeqsById`, the id maps of the SQLite indexes and search, against a dict."""

from __future__ import annotations

import random

import numpy as np
import pytest

from loomctx.stores import _rows
from loomctx.stores._rows import RowMap, SeqsById


@pytest.mark.parametrize("min_compact", [1, 3, 1024])
def test_row_map_matches_a_dict(monkeypatch: pytest.MonkeyPatch, min_compact: int) -> None:
    monkeypatch.setattr(_rows, "_MIN_COMPACT", min_compact)
    rng = random.Random(min_compact)
    # Ids that agree in their low bits, far apart, negative: exact keys, so none collide.
    pool = [*range(50), *(2**40 + k for k in range(0, 50 * 2**20, 2**20)), -5, 2**62]
    start = rng.sample(pool, 30)
    expected = {record_id: row for row, record_id in enumerate(start)}
    rows = RowMap(np.array(start, dtype=np.int64))
    for _ in range(2000):
        record_id = rng.choice(pool)
        action = rng.random()
        if action < 0.4:
            row = rng.randrange(10_000)
            rows.set(record_id, row)
            expected[record_id] = row
        elif action < 0.7:
            assert rows.pop(record_id) == expected.pop(record_id, None)
        else:
            assert rows.get(record_id) == expected.get(record_id)
    rows.compact()
    assert {record_id: rows.get(record_id) for record_id in pool} == {
        record_id: expected.get(record_id) for record_id in pool
    }


def test_row_map_empty_and_rebuilt() -> None:
    rows = RowMap()
    assert rows.get(1) is None
    assert rows.pop(1) is None
    rows.compact()  # nothing to fold
    rows.set(7, 0)
    rows.compact()
    assert rows.get(7) == 0
    assert RowMap(np.array([9, 3, 5], dtype=np.int64)).get(5) == 2


def test_seqs_by_id_matches_a_dict() -> None:
    rng = random.Random(7)
    seqs = SeqsById(limit=200)
    expected: dict[int, int] = {}
    ids = np.arange(0, 260, dtype=np.int64)
    assert seqs.get(ids).tolist() == [-1] * 260  # nothing known yet, the array still empty
    for step in range(3000):
        action = rng.random()
        if action < 0.5:
            chosen = np.asarray(rng.sample(range(260), rng.randint(1, 8)), dtype=np.int64)
            values = np.asarray([rng.randint(1, 10**6) for _ in chosen], dtype=np.int64)
            seqs.set(chosen, values)
            expected.update(
                (i, v) for i, v in zip(chosen.tolist(), values.tolist(), strict=True) if i < 200
            )
        elif action < 0.9:
            gone = rng.randrange(260)
            seqs.forget(gone)
            expected.pop(gone, None)
        elif step % 50 == 0:
            seqs.clear()
            expected.clear()
        assert seqs.get(ids).tolist() == [expected.get(i, -1) for i in range(260)]

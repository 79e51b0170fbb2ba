"""Rankings and windows are byte-identical to the golden ones (`tests/search/golden.py`)."""

from __future__ import annotations

import json

from tests.search.golden import GOLDEN, dumps, snapshot


def test_rankings_and_blocks_match_the_golden_ones_exactly() -> None:
    expected = json.loads(GOLDEN.read_text(encoding="utf-8"))
    got = json.loads(dumps(snapshot()))
    assert sorted(got) == sorted(expected)
    for part in expected:
        for query, ranking in expected[part].items():
            assert got[part][query] == ranking, f"{part}: {query!r}"

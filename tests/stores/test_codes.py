"""`stores._codes.row_mask`: the rows a namespace and kind filter keeps, against a reference
that tests every row's names."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from loomctx.stores._codes import Codes, row_mask

NAMESPACES = ["a/", "a/b/", "ab/", "b/"]
KINDS = ["turn", "summary", "task"]


@given(
    st.lists(st.tuples(st.sampled_from(NAMESPACES), st.sampled_from(KINDS)), max_size=30),
    st.sampled_from(["", "a/", "a/b/", "b/", "c/"]),
    st.sampled_from([None, "turn", "task", "absent"]),
    st.booleans(),
)
def test_the_mask_keeps_the_reference_rows(
    rows: list[tuple[str, str]], prefix: str, kind: str | None, exact: bool
) -> None:
    ns_codes, kind_codes = Codes(), Codes()
    ns = np.array([ns_codes.code(name) for name, _ in rows], dtype=np.int32)
    kinds = np.array([kind_codes.code(k) for _, k in rows], dtype=np.int32)
    expected = [
        (name == prefix if exact else name.startswith(prefix)) and kind in (None, row_kind)
        for name, row_kind in rows
    ]
    mask = row_mask(ns_codes, ns, kind_codes, kinds, prefix=prefix, kind=kind, exact=exact)
    if isinstance(mask, bool):
        assert expected == [mask] * len(rows)
    else:
        assert mask.tolist() == expected


def test_a_filter_on_the_only_name_is_no_pass_over_the_rows() -> None:
    ns_codes, kind_codes = Codes(["t/a/"]), Codes(["turn"])
    ns = np.zeros(5, dtype=np.int32)
    kinds = np.zeros(5, dtype=np.int32)
    keep = row_mask(ns_codes, ns, kind_codes, kinds, prefix="t/a/", kind="turn", exact=True)
    assert keep is True
    kind_codes.code("summary")
    mask = row_mask(ns_codes, ns, kind_codes, kinds, prefix="t/a/", kind="turn", exact=True)
    assert not isinstance(mask, bool)
    assert mask.tolist() == [True] * 5

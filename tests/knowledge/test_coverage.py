"""Fusion's coverage test against the plain one it stands for: a probe counts when it occurs
in the lowercased text, whatever the character pairs a text keeps to skip scanning say."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from loomctx.knowledge._fusion import _covered, _pairs, _searchable

# Few letters, so probes often occur; CJK, an accent, upper case and a lone surrogate too.
_CHARS = st.sampled_from(list("abcdeABé 中文\ud800"))
_TEXT = st.text(_CHARS, max_size=300)


@given(_TEXT, st.lists(st.text(_CHARS, max_size=6), max_size=6), st.data())
def test_coverage_counts_what_a_scan_of_the_lowercased_text_finds(
    text: str, probes: list[str], data: st.DataObject
) -> None:
    _searchable.cache_clear()  # this text's first search, whatever an earlier example was
    lowered = text.lower()
    if lowered:  # pieces of the text itself, which must be found
        start = data.draw(st.integers(0, len(lowered) - 1))
        probes.append(lowered[start : start + data.draw(st.integers(1, 8))])
    probes = [p.lower() for p in probes]
    expected = sum(p in lowered for p in probes)
    with_pairs = [(p, _pairs(p)) for p in probes]
    # A text's first search scans it; the next ones read its pairs first.
    assert [_covered(text, with_pairs) for _ in range(3)] == [expected] * 3


@given(_TEXT)
def test_short_and_long_texts_set_the_same_bit_for_a_pair(text: str) -> None:
    # Probes (under 64 characters) take their pairs in Python, chunk texts in numpy.
    padded = text + " " * 64
    assert _pairs(text) & _pairs(padded) == _pairs(text)

"""`loomctx.text`: terms of English and Chinese text, and query overlap."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from loomctx.text import (
    CHINESE_STOP_WORDS,
    ENGLISH_STOP_WORDS,
    STOP_WORDS,
    coverage,
    overlap,
    terms,
    words,
)
from tests.strategies import texts


def test_english_words_are_lowercased_and_stemmed_without_stop_words_or_single_letters() -> None:
    assert terms("What is the Weather in PARIS, x 5 42 times?") == [
        "weather",
        "pari",
        "5",
        "42",
        "time",
    ]


def test_stemming_lets_word_forms_match() -> None:
    # Snowball English: both sides are stemmed the same way, so the forms meet.
    assert terms("adopted adoption adopting") == ["adopt", "adopt", "adopt"]
    assert overlap("When did she paint the sunrise?", "I painted a sunrise last year") == 1.0


def test_underscores_and_punctuation_separate_words_and_repeats_are_kept() -> None:
    assert terms("run_sql: SQL-query sql") == ["run", "sql", "sql", "queri", "sql"]


def test_chinese_runs_become_bigrams_cut_at_stop_words() -> None:
    assert terms("数据库") == ["数据", "据库"]
    # 帮我, 一下 and 的 are stop words: they cut the run, and a one-character piece stays.
    assert terms("帮我查一下数据库里的订单") == ["查", "数据", "据库", "库里", "订单"]
    assert terms("的") == []
    assert terms("我们的") == []


def test_mixed_scripts_and_kana() -> None:
    assert terms("SQL数据库 orders") == ["sql", "数据", "据库", "order"]
    assert terms("データ") == ["デー", "ータ"]


def test_stop_word_lists() -> None:
    assert len(ENGLISH_STOP_WORDS) >= 150
    assert len(CHINESE_STOP_WORDS) >= 60
    assert STOP_WORDS == ENGLISH_STOP_WORDS | CHINESE_STOP_WORDS
    assert {"the", "which", "的", "我们", "什么"} <= STOP_WORDS
    assert all(w == w.lower() for w in ENGLISH_STOP_WORDS)


def test_overlap_is_the_share_of_distinct_query_terms_found() -> None:
    assert overlap("weather in Paris", "Paris weather forecast") == 1.0
    assert overlap("weather weather tokyo", "Paris weather") == 0.5
    assert overlap("sql orders", "weather") == 0.0
    assert overlap("Paris weather forecast tomorrow", "weather in Paris") == 0.5


def test_overlap_of_an_empty_or_stop_word_query_is_zero() -> None:
    assert overlap("", "anything at all") == 0.0
    assert overlap("what is the", "what is the") == 0.0
    assert overlap("了的", "的了") == 0.0


def test_overlap_in_chinese() -> None:
    # query terms: 查, 数据, 据库, 库里, 订单; the text has 数据 and 据库.
    assert overlap("帮我查一下数据库里的订单", "数据库") == 0.4
    assert overlap("数据库", "帮我查一下数据库里的订单") == 1.0
    assert overlap("天气预报", "数据库") == 0.0


def test_coverage_on_term_sets() -> None:
    assert coverage(frozenset(), frozenset({"a"})) == 0.0
    assert coverage(frozenset({"ab", "cd"}), {"cd", "ef"}) == 0.5


@given(texts(max_size=40), texts(max_size=40))
def test_overlap_is_a_share(query: str, text: str) -> None:
    value = overlap(query, text)
    assert 0.0 <= value <= 1.0
    assert overlap(query, query) == (1.0 if terms(query) else 0.0)


@given(st.text(max_size=60))
def test_terms_hold_no_stop_words_and_no_single_latin_letters(text: str) -> None:
    for term in terms(text):
        assert term == term.lower()
        assert len(term) >= 2 or term.isdigit() or "\u3040" <= term <= "\U0002ffff"
    for word in words(text):  # a stop word gives no term (a stem may spell one: UPS -> up)
        if word.lower() in STOP_WORDS:
            assert terms(word) == []


def test_a_word_whose_stem_spells_a_stop_word_stays_searchable() -> None:
    assert terms("UPS") == ["up"]
    assert terms("up") == []


def _reference_terms(text: str) -> list[str]:
    """`terms` as its docstring defines it, one word at a time, with no cache or fast path."""
    import re

    import Stemmer

    from loomctx.text import _CJK, ENGLISH_STOP_WORDS, _add_cjk

    stem = Stemmer.Stemmer("english").stemWord
    out: list[str] = []
    for match in re.finditer(f"([{_CJK}]+)|[^\\W_{_CJK}]+", text):
        if match.group(1) is not None:
            _add_cjk(match.group(1), out)
        elif (len(w := match.group().lower()) >= 2 or w.isdigit()) and w not in ENGLISH_STOP_WORDS:
            out.append(stem(w))
    return out


@given(
    st.text(
        alphabet=st.sampled_from(list("aAbeiNnorsTtxy_-.,' 07²ÉéßçöИи数据库的认证かナ\n")),
        max_size=80,
    )
)
def test_terms_match_the_plain_word_by_word_analysis(text: str) -> None:
    """The word cache and the words-only fast path change nothing, cached or not, with CJK
    or without (mixed scripts, non-ASCII letters and digits, case)."""
    expected = _reference_terms(text)
    assert terms(text) == expected
    assert terms(text) == expected  # every word now cached
    assert terms(text.upper()) == _reference_terms(text.upper())

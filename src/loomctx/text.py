"""Terms of a text, for lexical matching in English and Chinese, without a segmenter.

`terms` cuts a text into the words a query and a document are compared on:

- runs of letters and digits are lowercased words; words shorter than 2 characters (but
  not numbers) and English stop words are dropped (``_`` separates words, so
  ``get_weather`` gives ``get`` and ``weather``); the rest are stemmed with the Snowball
  English stemmer (PyStemmer), so "adopted" meets "adoption" (on LoCoMo: +3.4 points of R@10);
- runs of CJK ideographs and kana are first cut at Chinese stop words (longest match first),
  then each piece gives its overlapping character bigrams (``数据库`` -> ``数据``, ``据库``);
  a piece of one character is kept as it is. Bigrams match Chinese words of any length without
  a dictionary, and both sides of a comparison are cut the same way.

`overlap(query, text)` is the share of the query's distinct terms that occur in the text;
`coverage` is the same on precomputed term sets, for callers that index texts once.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Set
from typing import Final

import Stemmer

__all__ = [
    "CHINESE_STOP_WORDS",
    "ENGLISH_STOP_WORDS",
    "STOP_WORDS",
    "coverage",
    "overlap",
    "terms",
    "words",
]

# Contractions appear as their stems ("don't" tokenizes to "don" and "t", which is too short).
_ENGLISH: Final = """
a about above after again against all almost also am an and any are aren as at be because been
before being below between both but by can cannot could couldn did didn do does doesn doing don
down during each either else ever every few for from further get gets had hadn has hasn have
haven having he her here hers herself him himself his how however if in into is isn it its
itself just let ll me might more most much must my myself no nor not now of off often on once
only or other ought our ours ourselves out over own per please quite rather re really same
shall she should shouldn so some such than that the their theirs them themselves then there
these they this those though through thus to too under until up upon us ve very via was wasn
we were weren what when where whether which while who whom whose why will with within without
won would wouldn yes yet you your yours yourself yourselves
"""
_CHINESE: Final = """
的 了 着 过 吗 呢 吧 啊 呀 哦 嘛 和 与 及 或 在 是 把 被 给 让 我 你 您 他 她 它 这 那 也 都 就
很 请 我们 你们 他们 她们 它们 咱们 这个 那个 这些 那些 这里 那里 这样 那样 什么 怎么 怎样 如何
为什么 哪个 哪些 哪里 一个 一些 一下 一点 可以 能够 需要 请问 帮我 帮忙 所以 因为 如果 虽然 但是
然后 而且 或者 还是 就是 不是 没有 已经 以及 关于 其中 其他 自己 非常 一直 只是 的话 之后 之前
"""

ENGLISH_STOP_WORDS: Final = frozenset(_ENGLISH.split())
"""Function words of English."""

CHINESE_STOP_WORDS: Final = frozenset(_CHINESE.split())
"""Function words of Chinese: pronouns, particles, conjunctions and request phrases."""

STOP_WORDS: Final = ENGLISH_STOP_WORDS | CHINESE_STOP_WORDS
"""Every stop word `terms` drops, English and Chinese."""

# Han ideographs (with extension A, compatibility forms and the supplementary planes) and
# kana: scripts written without spaces, so words are found by bigrams instead.
_CJK: Final = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff"
_TOKEN: Final = re.compile(f"([{_CJK}]+)|[^\\W_{_CJK}]+")
_HAS_CJK: Final = re.compile(f"[{_CJK}]")
_WORD: Final = re.compile(r"[^\W_]+")  # `_TOKEN`'s second branch, in a text without CJK
_CJK_STOP_MAX: Final = max(len(w) for w in CHINESE_STOP_WORDS)


def _add_cjk(run: str, out: list[str]) -> None:
    """Append the bigrams of `run`, cut at Chinese stop words, to `out`."""
    start = i = 0
    n = len(run)
    while i < n:
        for size in range(min(_CJK_STOP_MAX, n - i), 0, -1):
            if run[i : i + size] in CHINESE_STOP_WORDS:
                _add_piece(run[start:i], out)
                i += size
                start = i
                break
        else:
            i += 1
    _add_piece(run[start:], out)


def _add_piece(piece: str, out: list[str]) -> None:
    if len(piece) == 1:
        out.append(piece)
    else:
        out.extend(piece[k : k + 2] for k in range(len(piece) - 1))


_LOCAL: Final = threading.local()  # a Snowball stemmer is not safe to share between threads


def _stemmer() -> Stemmer.Stemmer:
    try:
        return _LOCAL.stemmer
    except AttributeError:
        _LOCAL.stemmer = Stemmer.Stemmer("english")
        return _LOCAL.stemmer


_WORDS: Final[dict[str, str]] = {}
"""Each word as written -> its term ("" for a stop word or a lone letter): a text's words are
mostly words seen before, and a dict lookup is 4x cheaper than lowercasing and stemming."""
_WORDS_MAX: Final = 200_000  # ~20 MB; past that, new words are analysed every time


def _term(word: str) -> str:
    low = word.lower()
    # Numbers are kept whatever their length: "order 7" must not match every order.
    if (len(low) >= 2 or low.isdigit()) and low not in ENGLISH_STOP_WORDS:
        term: str = _stemmer().stemWord(low)
    else:
        term = ""
    if len(_WORDS) < _WORDS_MAX:
        _WORDS[word] = term  # one dict store: safe between threads
    return term


def terms(text: str) -> list[str]:
    """The terms of `text` in order, repeats kept: lowercased words and CJK bigrams, stop
    words removed (see the module docstring)."""
    out: list[str] = []
    if _HAS_CJK.search(text) is None:  # the common case, faster: words only
        _add_words(_WORD.findall(text), out)
        return out
    for match in _TOKEN.finditer(text):
        run = match.group(1)
        if run is not None:
            _add_cjk(run, out)
        else:
            _add_words((match.group(),), out)
    return out


def _add_words(words: Iterable[str], out: list[str]) -> None:
    known = _WORDS.get
    for word in words:
        term = known(word)
        if term is None:
            term = _term(word)
        if term:
            out.append(term)


def words(text: str) -> list[str]:
    """The words of `text` as written, the runs `terms` cuts: CJK runs apart from runs of
    other letters and digits (``"用OAuth2做认证"`` -> ``用``, ``OAuth2``, ``做认证``)."""
    return [m.group() for m in _TOKEN.finditer(text)]


def coverage(query_terms: Set[str], text_terms: Set[str]) -> float:
    """The share of `query_terms` found in `text_terms` (0 for no query terms)."""
    if not query_terms:
        return 0.0
    return len(query_terms & text_terms) / len(query_terms)


def overlap(query: str, text: str) -> float:
    """The share of the query's distinct terms found among the terms of `text`, from 0 to 1
    (0 when the query has no terms)."""
    return coverage(frozenset(terms(query)), frozenset(terms(text)))

"""`QueryRewriter` (seed 002): the query plus the frequent content words of the conversation.

A follow-up such as "and the refresh interval?" names none of what it is about; the last few
messages do. The rewriter counts the content words of the last `window` messages and appends
the `top_k` most frequent that the query does not already contain:

    "认证方案" + recent messages about OAuth2, tokens, security -> "认证方案 [OAuth2 安全 token]"

Words are real words in both languages. English (and other space-separated) words are
compared by `loomctx.text.terms` (stop words removed, stemmed: "tokens" counts as "token").
Chinese has no spaces: its runs are cut into words by jieba's dictionary (`rjieba`, the Rust
port), and a word counts every time it occurs in the window, inside a longer word too (安全
in 注意安全). Stop words and single characters are not added. A rewrite appends words a reader
can check, not bigram fragments such as 证方 (of 认证方案) or 论认 (of 论证 and 认证 side by
side).

jieba's HMM is off: it joins characters the dictionary does not know into new words, and on
the seed documents 14 of the 558 words of 2+ characters it makes are not in the dictionary,
mostly non-words (前要 of 迁移前要备份, 越高越, 表不在, 从父, 将重), with a few real ones
(会话, 三楼). Without it every word added is a dictionary word; a word the dictionary lacks is
left out (its characters are single). Cutting is as fast either way (``bench/segmenter_bench.py``).

The search side keeps `terms`' character bigrams, which need no dictionary and match both
sides the same way: measured with one BM25 over the seed documents (83 Chinese headings, each
asking for its section) bigrams find the section first 16.9% of the time against 10.8% for
rjieba's words (MRR 0.249 against 0.207; search mode 0.237), and tie on the test suite's 9
Chinese questions (``bench/segmenter_bench.py --recall-only``).

Why rjieba: it segments exactly as jieba does (the same dictionary and HMM: identical on all
1,336 Chinese runs of the seed documents) but 30-50x faster on those runs and about 70x on
short queries, loads in 0.3 s instead of 2 s, installs 4.6 MB instead of 42 MB, ships abi3
wheels for Linux, macOS and Windows, and writes no cache file (``bench/segmenter_bench.py``;
medians on 2 cores). It is imported on the first Chinese message, so ``import loomctx``
does not pay its load.

Seed 002 appends the words to the query used for recall. Used alone, that drifts: when the query
is already specific, the added words pull in whatever the conversation was about instead.
`UnifiedRetrievalSource` therefore recalls with the original query and, separately, with the
rewritten one, and keeps the rewritten recall as extra candidates ranked after the original's
(see its docstring); measured on and off in ``loomctx bench``.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Final

from loomctx.errors import check_int
from loomctx.text import CHINESE_STOP_WORDS, terms, words

__all__ = ["QueryRewriter", "chinese_words"]

# Han ideographs and kana, as `loomctx.text` cuts them into runs of their own.
_CJK: Final = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff]"
)
_cut: list[Callable[[str], list[str]]] = []
_cut_lock = threading.Lock()


def _segmenter() -> Callable[[str], list[str]]:
    """rjieba's precise mode on its dictionary alone (no HMM), loaded once, on first use
    (0.3 s)."""
    if not _cut:
        with _cut_lock:
            if not _cut:
                import rjieba

                cut = rjieba.cut
                _cut.append(lambda text: cut(text, False))
    return _cut[0]


def chinese_words(text: str) -> list[str]:
    """The Chinese words of `text` in order, repeats kept: each run of CJK characters cut by
    rjieba, without stop words (`loomctx.text.CHINESE_STOP_WORDS`) and single characters."""
    cut = _segmenter()
    out: list[str] = []
    for run in words(text):
        if _CJK.match(run) is None:
            continue
        out.extend(w for w in cut(run) if len(w) >= 2 and w not in CHINESE_STOP_WORDS)
    return out


class QueryRewriter:
    """Expands a query with the `top_k` most frequent content words of the last `window`
    messages (seed 002 defaults: 5 and 6). Words in the query are skipped; ties go to the
    word seen most recently. No LLM; microseconds per call once the segmenter is loaded."""

    def __init__(self, *, window: int = 5, top_k: int = 6) -> None:
        for name, value in (("window", window), ("top_k", top_k)):
            check_int(value, f"QueryRewriter: `{name}`", minimum=1)
        self.window = window
        self.top_k = top_k

    def keywords(self, query: str, recent: Sequence[str]) -> list[str]:
        """The words to add: frequent content words of the last `window` of `recent` (oldest
        first) that the query does not contain, most frequent first, as they were written."""
        known = set(terms(query))
        messages = list(recent[-self.window :])
        # The Chinese words of the window, counted wherever they occur (see the docstring).
        vocabulary = {w for w in _chinese_vocabulary(messages) if not set(terms(w)) <= known}
        counts: Counter[str] = Counter()
        last_seen: dict[str, int] = {}
        surface: dict[str, str] = {}
        position = 0
        for message in messages:
            for run in words(message):
                if _CJK.match(run) is not None:
                    found = sorted((start, w) for w in vocabulary for start in _occurrences(run, w))
                    for _, word in found:
                        counts[word] += 1
                        last_seen[word] = position
                        surface[word] = word
                        position += 1
                    continue
                for term in terms(run):
                    if term in known:
                        continue
                    counts[term] += 1
                    last_seen[term] = position
                    surface.setdefault(term, run)
                    position += 1
        ranked = sorted(counts, key=lambda t: (-counts[t], -last_seen[t]))
        return [surface[t] for t in ranked[: self.top_k]]

    def rewrite(self, query: str, recent: Sequence[str]) -> str:
        """``query [word word ...]``, or the query unchanged when there is nothing to add."""
        added = self.keywords(query, recent)
        return f"{query} [{' '.join(added)}]" if added else query


def _chinese_vocabulary(messages: Sequence[str]) -> set[str]:
    return {w for m in messages if _CJK.search(m) for w in chinese_words(m)}


def _occurrences(run: str, word: str) -> list[int]:
    """Where `word` starts in `run` (non-overlapping)."""
    out: list[int] = []
    start = run.find(word)
    while start != -1:
        out.append(start)
        start = run.find(word, start + len(word))
    return out

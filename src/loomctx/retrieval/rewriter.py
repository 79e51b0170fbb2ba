"""`QueryRewriter` (seed 002): the query plus the frequent content words of the conversation.

A follow-up such as "and the refresh interval?" names none of what it is about; the last few
messages do. The rewriter counts the content words (`loomctx.text.terms`: stop words of both
languages removed, English stemmed, Chinese as bigrams) of the last `window` messages and appends
the `top_k` most frequent that the query does not already contain:

    "认证方案" + recent messages about OAuth2, tokens, security -> "认证方案 [oauth2 token 安全]"

Seed 002 appends the words to the query used for recall. Used alone, that drifts: when the query
is already specific, the added words pull in whatever the conversation was about instead.
`UnifiedRetrievalSource` therefore recalls with the original query and, separately, with the
rewritten one, and keeps the rewritten recall as extra candidates ranked after the original's
(see its docstring); measured on and off in ``loomctx bench``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from loomctx.errors import ConfigError
from loomctx.text import terms, words

__all__ = ["QueryRewriter"]


class QueryRewriter:
    """Expands a query with the `top_k` most frequent content words of the last `window`
    messages (seed 002 defaults: 5 and 6). Words in the query are skipped; ties go to the
    word seen most recently. No LLM, microseconds per call."""

    def __init__(self, *, window: int = 5, top_k: int = 6) -> None:
        for name, value in (("window", window), ("top_k", top_k)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"QueryRewriter: `{name}` must be an int >= 1, got {value!r}")
        self.window = window
        self.top_k = top_k

    def keywords(self, query: str, recent: Sequence[str]) -> list[str]:
        """The words to add: frequent content words of the last `window` of `recent` (oldest
        first) that the query does not contain, most frequent first, as they were written."""
        known = set(terms(query))
        counts: Counter[str] = Counter()
        last_seen: dict[str, int] = {}
        surface: dict[str, str] = {}
        position = 0
        for message in recent[-self.window :]:
            for word in words(message):
                for term in terms(word):
                    if term in known:
                        continue
                    counts[term] += 1
                    last_seen[term] = position
                    surface.setdefault(term, word if term.isascii() else term)
                    position += 1
        ranked = sorted(counts, key=lambda t: (-counts[t], -last_seen[t]))
        return [surface[t] for t in ranked[: self.top_k]]

    def rewrite(self, query: str, recent: Sequence[str]) -> str:
        """``query [word word ...]``, or the query unchanged when there is nothing to add."""
        added = self.keywords(query, recent)
        return f"{query} [{' '.join(added)}]" if added else query

"""A second, cheap hop: what the first hits name, searched for again.

A multi-hop question ("What did Caroline research after the parade?") names one end of the
chain; the turns the first search finds name the other ("the Pride parade in June ... she
looked into adoption agencies"). `hop_terms` takes the names and dates the best candidates
mention and the query does not: capitalized words that do not open a sentence or a turn
("Caroline:" is the speaker) and four-digit years, most frequent first. The source then
recalls the query with those words added and fuses that recall into the first one's
relevance (`RetrievalSettings.hop_weight`). No model: one more recall per query.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Final

from loomctx.retrieval.evidence import Evidence
from loomctx.text import terms

__all__ = ["hop_terms"]

_NAME: Final = re.compile(r"(?<![.!?:]\s)(?<!^)\b([A-Z][a-z]{2,}|[A-Z]{2,})\b|\b((?:19|20)\d\d)\b")
_SKIP: Final = frozenset({"The", "This", "That", "What", "When", "Yes", "Yeah", "Wow", "Thanks",
                          "Thank", "Hey", "Hi", "Oh", "Sure", "And", "But", "So", "It", "My",
                          "You", "Your", "We", "They", "He", "She", "I'm", "Me"})  # fmt: skip


def hop_terms(query: str, top: Sequence[Evidence], count: int) -> list[str]:
    """Up to `count` names and years that `top` mentions and `query` does not, most
    frequent first (ties: first seen)."""
    if count <= 0:
        return []
    known = set(terms(query))
    seen: Counter[str] = Counter()
    first: dict[str, int] = {}
    for c in top:
        for m in _NAME.finditer(c.text):
            word = m.group(1) or m.group(2)
            if word in _SKIP or set(terms(word)) <= known:
                continue
            seen[word] += 1
            first.setdefault(word, len(first))
    return sorted(seen, key=lambda w: (-seen[w], first[w]))[:count]

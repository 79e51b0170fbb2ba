"""The count cache of a counter: counts of unchanged text, bounded by entries and characters.

Re-counting a stable system prompt or tool list every turn then costs a dictionary look-up.
"""

from __future__ import annotations

import threading

__all__ = ["CountCache"]


class CountCache:
    """Text -> count, bounded by entries and by total characters held.

    Hits are plain dict look-ups with no lock: a window build makes hundreds of them. Eviction
    is first in, first out (dicts keep insertion order), done under a lock on insert.
    """

    __slots__ = ("_chars", "_data", "_lock", "max_chars", "max_entries")

    def __init__(self, *, max_entries: int, max_chars: int) -> None:
        self._data: dict[str, int] = {}
        self._chars = 0
        self._lock = threading.Lock()
        self.max_entries = max_entries
        self.max_chars = max_chars

    def get(self, text: str) -> int | None:
        return self._data.get(text)

    def put(self, text: str, n: int) -> None:
        if len(text) > self.max_chars // 8:
            return  # one huge text must not flush everything else
        with self._lock:
            if text in self._data:
                return
            self._data[text] = n
            self._chars += len(text)
            while len(self._data) > self.max_entries or self._chars > self.max_chars:
                old = next(iter(self._data))
                del self._data[old]
                self._chars -= len(old)

    def __len__(self) -> int:
        return len(self._data)

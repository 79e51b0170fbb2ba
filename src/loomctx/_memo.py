"""`Memo`: a function of frozen values, kept by object for the ones seen lately.

Builds meet the same objects call after call (memory search hands back the same decoded
tasks, a window's history the same messages), and what is worked out from one (a label, a
token count) is the same each time. A memo keys by identity, holding each object so that its
id stays unique while kept; only frozen values belong in one.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Memo"]

_K = TypeVar("_K")
_V = TypeVar("_V")


class Memo(Generic[_K, _V]):
    """`fn` of an object, kept for the last `size` objects (0: none kept). Thread-safe."""

    def __init__(self, fn: Callable[[_K], _V], size: int) -> None:
        self._fn = fn
        self._size = size
        self._kept: OrderedDict[int, tuple[_K, _V]] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, obj: _K) -> _V:
        hit = self._kept.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        value = self._fn(obj)
        if self._size:
            with self._lock:
                self._kept[id(obj)] = (obj, value)
                while len(self._kept) > self._size:
                    self._kept.popitem(last=False)
        return value

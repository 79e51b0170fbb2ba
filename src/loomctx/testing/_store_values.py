"""The namespaces and record helpers the store conformance suite is written with (public
through `loomctx.testing.store_conformance`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from loomctx.stores.base import Hit, Namespace, Record

__all__ = ["AB", "A_S", "OTHER", "A", "keys", "rec", "unit"]

A: Namespace = ("t", "a")
AB: Namespace = ("t", "ab")
A_S: Namespace = ("t", "a", "s")
OTHER: Namespace = ("u", "a")


def rec(namespace: Namespace, key: str, text: str = "", kind: str = "note", **data: Any) -> Record:
    """A record to put (the store sets `seq` and the timestamps)."""
    return Record(namespace=namespace, key=key, kind=kind, text=text, data=data)


def unit(*values: float) -> npt.NDArray[np.float32]:
    """A float32 vector of `values`."""
    return np.array(values, dtype=np.float32)


def keys(found: Sequence[Record | Hit]) -> list[str]:
    """The keys of records or hits, in order."""
    return [f.record.key if isinstance(f, Hit) else f.key for f in found]

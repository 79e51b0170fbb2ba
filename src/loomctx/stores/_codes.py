"""Small integer codes for namespaces and kinds, so the in-memory indexes filter rows with
one vectorized comparison instead of a string test per row."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["Codes"]


class Codes:
    """A growing table of names (encoded namespaces, or kinds) and their codes."""

    def __init__(self, names: list[str] | None = None) -> None:
        self.names: list[str] = list(names or [])
        self._codes = {name: code for code, name in enumerate(self.names)}
        self._prefix_cache: dict[str, npt.NDArray[np.bool_]] = {}

    def code(self, name: str) -> int:
        """The code of `name`, given a new one if it has none."""
        code = self._codes.get(name)
        if code is None:
            code = self._codes[name] = len(self.names)
            self.names.append(name)
        return code

    def get(self, name: str) -> int | None:
        """The code of `name`, or None if no row ever had it."""
        return self._codes.get(name)

    def with_prefix(self, prefix: str) -> npt.NDArray[np.bool_]:
        """A boolean per code: whether its name starts with `prefix` (an encoded namespace
        prefix ends with ``/``, so this is the part-wise prefix test)."""
        allowed = self._prefix_cache.get(prefix)
        if allowed is None or len(allowed) != len(self.names):
            allowed = np.fromiter(
                (name.startswith(prefix) for name in self.names),
                dtype=np.bool_,
                count=len(self.names),
            )
            self._prefix_cache[prefix] = allowed
        return allowed


def row_mask(
    ns_codes: Codes,
    ns: npt.NDArray[np.int32],
    kind_codes: Codes,
    kinds: npt.NDArray[np.int32],
    *,
    prefix: str,
    kind: str | None,
    exact: bool = False,
) -> npt.NDArray[np.bool_] | bool:
    """Which of the rows (given by their namespace and kind codes) lie under `prefix` (are
    in exactly that namespace, if `exact`) and have `kind`: True for all of them, False for
    none, else a boolean mask.

    A filter on the only name a table has ever held is no filter (every row has its code),
    so it costs no pass over the rows: a store of one agent's memory is searched so."""
    mask: npt.NDArray[np.bool_] | bool = True
    if exact:
        own = ns_codes.get(prefix)
        if own is None:
            return False
        if len(ns_codes.names) > 1:
            mask = ns == own
    elif prefix:
        allowed = ns_codes.with_prefix(prefix)
        if not allowed.any():
            return False
        if not allowed.all():
            mask = allowed[ns]
    if kind is not None:
        code = kind_codes.get(kind)
        if code is None:
            return False
        if len(kind_codes.names) == 1:
            return mask
        of_kind = kinds == code
        mask = of_kind if mask is True else mask & of_kind
    return mask

"""Importing an agent framework an adapter needs, lazily: each is an optional extra."""

from __future__ import annotations

import importlib
from types import ModuleType

from loomctx.errors import MissingExtraError

__all__ = ["framework"]


def framework(module: str, *, feature: str, extra: str) -> ModuleType:
    """`module`, imported; `MissingExtraError` naming `extra` when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            feature=feature, extra=extra, module=module.partition(".")[0]
        ) from exc

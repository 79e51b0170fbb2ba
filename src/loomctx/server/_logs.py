"""Structured logs: one JSON object per line, for log collectors.

`JSONFormatter` writes the time, level, logger, message and the record's ``loom`` fields (or
any of ``tenant``, ``session``, ``error``, ``recorded_from``). The server puts no secret in a
record: no header value, no body, no key (upstream keys are only ever read from the
environment by the SDK clients).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Final

__all__ = ["JSONFormatter", "configure_logging"]

_EXTRA: Final = ("tenant", "session", "error", "recorded_from")


class JSONFormatter(logging.Formatter):
    """A log record as one JSON line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "loom", None)
        if isinstance(fields, dict):
            out.update(fields)
        for name in _EXTRA:
            if hasattr(record, name):
                out[name] = getattr(record, name)
        if record.exc_info and record.exc_info[0] is not None:
            out["exception"] = record.exc_info[0].__name__
        return json.dumps(out, ensure_ascii=False, default=str)


def configure_logging(level: str = "info") -> None:
    """JSON lines on stderr for the server's logger (``loomctx.server``)."""
    logger = logging.getLogger("loomctx.server")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter())
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False

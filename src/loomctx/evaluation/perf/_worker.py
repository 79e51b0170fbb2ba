"""``python -m loomctx.evaluation.perf._worker``: one measurement in a process of its own.

Reads one JSON object on stdin, ``{"task": "size", "config": {...SizeConfig}}`` or
``{"task": "embed", "data": PATH, "texts": int}`` or ``{"task": "soak", "config": {...},
"builds": int}`` or ``{"task": "serve", ...the arguments of `serving`}``, and writes the
result as one JSON object on stdout. A fresh process per size keeps one size's resident
memory out of the next one's.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from loomctx.errors import ConfigError
from loomctx.evaluation.perf._loom import (
    SizeConfig,
    embedding_throughput,
    measure_size,
    serving,
    soak,
)


def run(request: dict[str, Any]) -> dict[str, Any]:
    """Carry out `request` (see the module docstring)."""
    task = request.get("task")
    if task == "size":
        return measure_size(SizeConfig(**request["config"]))
    if task == "embed":
        return embedding_throughput(request["data"], texts=int(request["texts"]))
    if task == "soak":
        return soak(SizeConfig(**request["config"]), builds=int(request["builds"]))
    if task == "serve":
        return serving(**{k: v for k, v in request.items() if k != "task"})
    raise ConfigError(
        f"the worker's `task` must be 'size', 'embed', 'soak' or 'serve', got {task!r}"
    )


if __name__ == "__main__":
    json.dump(run(json.load(sys.stdin)), sys.stdout)

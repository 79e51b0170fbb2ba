"""One measurement in a fresh interpreter (``python -m loomctx.evaluation.perf._worker``), so
its resident memory is its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from loomctx.errors import ConfigError

__all__ = ["in_subprocess"]


def in_subprocess(request: dict[str, Any], *, timeout: float) -> dict[str, Any]:
    """The worker's JSON answer to `request`, or `ConfigError` saying why the worker failed
    (its last lines of stderr)."""
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "loomctx.evaluation.perf._worker"],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ConfigError(
            f"the {request['task']} measurement took more than {timeout:.0f} s; raise "
            "`timeout` or measure fewer sizes"
        ) from None
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise ConfigError(f"the {request['task']} measurement failed:\n{tail}")
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer

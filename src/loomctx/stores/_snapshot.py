"""Index snapshots beside the SQLite file: numpy arrays plus a JSON manifest in one `.npz`.

Both in-memory indexes (lexical and vector) save themselves the same way: written to a
temporary file and renamed into place, so a crash never leaves a half-written snapshot; read
back only if the manifest matches what SQLite says now, otherwise the caller rebuilds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["read_snapshot", "write_snapshot"]


def write_snapshot(
    path: Path, manifest: Mapping[str, Any], arrays: Mapping[str, npt.ArrayLike]
) -> None:
    """Write `arrays` and `manifest` to `path` atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with temporary.open("wb") as file:
        np.savez(
            file,
            manifest=np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8),
            **arrays,  # type: ignore[arg-type]
        )
    os.replace(temporary, path)


def read_snapshot(
    path: Path, expected: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, npt.NDArray[Any]]] | None:
    """(manifest, arrays) saved at `path` if every item of `expected` is in its manifest;
    None if it is missing, truncated, foreign or stale (the caller rebuilds from SQLite)."""
    try:
        with np.load(path, allow_pickle=False) as saved:
            manifest: dict[str, Any] = json.loads(saved["manifest"].tobytes())
            if any(manifest.get(key) != value for key, value in expected.items()):
                return None
            arrays = {name: saved[name] for name in saved.files if name != "manifest"}
    except (OSError, ValueError, KeyError):
        return None
    return manifest, arrays

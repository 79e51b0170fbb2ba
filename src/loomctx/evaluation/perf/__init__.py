"""`loomctx bench perf`: Loom's speed, tokens and cost per call at N = 100 .. 100k turns of
history, beside peers run on the same workload.

`run_perf` measures each size in a fresh subprocess (``python -m
loomctx.evaluation.perf._worker``: resident memory is that size's own), the shipped embedder's
throughput in one more, and each installed peer (`peers`) per size; it writes
``<out>/<date>.json``, ``<out>/<date>.md`` and the report's PNG plots (`_report`). What is
measured and how: `loomctx.evaluation.perf._loom`; the workload: `_workload`; the one scoring
code for Loom and the peers: `score`.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from loomctx.errors import ConfigError
from loomctx.evaluation.perf._loom import EmbedderChoice, SizeConfig
from loomctx.evaluation.perf._report import plot, write_markdown
from loomctx.evaluation.perf._spawn import in_subprocess
from loomctx.evaluation.perf._workload import TOOL_EVERY, build_workload, load_source
from loomctx.evaluation.perf.peers import PEERS, find_peers, run_peer, score_peer
from loomctx.tokens import TiktokenCounter

__all__ = ["FULL_SIZES", "QUICK_SIZES", "run_perf"]

FULL_SIZES = (100, 1_000, 10_000, 100_000)
QUICK_SIZES = (50, 200)


def _load() -> str:
    """The 1-minute load average (a busy machine's timings are not comparable), or "n/a"."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:  # not available on this platform
        return "n/a"


def run_perf(
    data: str | Path,
    out: str | Path,
    *,
    sizes: Sequence[int] = FULL_SIZES,
    builds: int = 50,
    calls: int = 20,
    documents: int = 200,
    embedder: EmbedderChoice = "default",
    embed_wait: float = 60.0,
    embed_texts: int = 256,
    peers: bool = False,
    peers_dir: str | Path = "bench/peers",
    peer_time_limit: float = 60.0,
    timeout: float = 3600.0,
    window: int = 8000,
    reserve: int = 1000,
    soak: int = 0,
    soak_size: int = 10_000,
    command: str = "loomctx bench perf",
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure, write the JSON result, the Markdown report and its plots into `out`, and
    return the result (its ``files`` name what was written). See the module docstring.
    `soak` (0: none) builds that many windows per strategy in one process at `soak_size`
    turns, to see whether latency and memory stay flat in a long-lived process."""
    say = progress or (lambda _message: None)
    if not sizes or any(n < 2 for n in sizes):
        raise ConfigError(f"`sizes` must be turn counts >= 2, got {list(sizes)!r}")
    if embedder not in ("default", "none"):
        raise ConfigError(f"`embedder` must be 'default' or 'none', got {embedder!r}")
    if soak and (soak < 100 or soak_size < 2):
        raise ConfigError(
            f"`soak` must be 0 or >= 100 builds and `soak_size` >= 2 turns, got {soak!r} and "
            f"{soak_size!r}"
        )
    if not 0 <= reserve < window:
        raise ConfigError(
            f"`reserve` must be >= 0 and below `window` ({window:,}), got {reserve!r}"
        )
    folder = Path(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the output folder {str(folder)!r}: {exc}") from None
    load_source(data, documents=documents)  # a bad file fails here, before any subprocess
    now = datetime.now(UTC)
    stem = now.strftime("%Y-%m-%d")
    result: dict[str, Any] = {
        "date": now.isoformat(timespec="seconds"),
        "config": {
            "data": str(data),
            "sizes": list(sizes),
            "builds": builds,
            "calls": calls,
            "documents": documents,
            "embedder": embedder,
            "embed_wait": embed_wait,
            "window": window,
            "reserve": reserve,
            "soak": soak,
            "tool_every": TOOL_EVERY,
            "command": command,
            "machine": f"{os.cpu_count()} cores, {platform.system()} {platform.machine()}, "
            f"Python {platform.python_version()}, load average {_load()} at the start",
        },
        "sizes": [],
    }
    for n in sorted(set(sizes)):
        say(f"Loom at N={n:,} (a fresh process)")
        config = SizeConfig(data=str(data), n=n, builds=builds, calls=calls, documents=documents,
                            embedder=embedder, embed_wait=embed_wait, window=window,
                            reserve=reserve)  # fmt: skip
        result["sizes"].append(
            in_subprocess({"task": "size", "config": asdict(config)}, timeout=timeout)
        )
    if soak:
        say(f"{soak:,} builds per strategy in one process at N={soak_size:,}")
        config = SizeConfig(data=str(data), n=soak_size, documents=documents, embedder="none",
                            window=window, reserve=reserve)  # fmt: skip
        request = {"task": "soak", "config": asdict(config), "builds": soak}
        result["soak"] = in_subprocess(request, timeout=timeout)
    if embedder == "default":
        say("embedding throughput of the shipped embedder")
        request = {"task": "embed", "data": str(data), "texts": embed_texts}
        result["embedding"] = in_subprocess(request, timeout=timeout)
    if peers:
        _run_peers(result, data, Path(peers_dir), builds, calls, documents, peer_time_limit, say)
    json_path = folder / f"{stem}.json"
    md_path = folder / f"{stem}.md"
    plots = plot(result, folder, stem)
    result["files"] = [str(json_path), str(md_path), *(str(folder / p) for p in plots)]
    json_path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    write_markdown(result, md_path, plots)
    return result


def _run_peers(
    result: dict[str, Any],
    data: str | Path,
    folder: Path,
    builds: int,
    calls: int,
    documents: int,
    time_limit: float,
    say: Callable[[str], None],
) -> None:
    found, missing = find_peers(folder, PEERS)
    result["peers_missing"] = missing
    result["peer_notes"] = {}
    counter = TiktokenCounter()
    source = load_source(data, documents=documents)
    # ../shared/data/tiktoken beside the LoCoMo file; else the same files shipped in Loom.
    tiktoken_dir = Path(data).resolve().parent.parent / "tiktoken"
    if not tiktoken_dir.is_dir():
        tiktoken_dir = Path(__file__).resolve().parents[2] / "_data" / "tiktoken"
    with tempfile.TemporaryDirectory(prefix="loomctx-peers-") as tmp:
        for size in result["sizes"]:
            config = result["config"]
            workload = build_workload(
                source, size["n"], calls=calls, window=config["window"], reserve=config["reserve"]
            )
            file = Path(tmp) / f"workload-{size['n']}.json"
            payload = workload.to_json(builds=builds, time_limit=time_limit)
            payload["tiktoken_dir"] = str(tiktoken_dir)
            file.write_text(json.dumps(payload), encoding="utf-8")
            size["peers"] = {}
            for peer in found:
                say(f"peer {peer.name} at N={size['n']:,}")
                answer = run_peer(peer, file, timeout=time_limit * 3 + 300)
                size["peers"][peer.name] = score_peer(answer, workload, counter)
                if answer.get("notes"):
                    result["peer_notes"][peer.name] = answer["notes"]
                result["peer_notes"].setdefault(peer.name, [answer.get("peer", peer.name)])

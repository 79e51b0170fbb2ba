"""What every peer adapter shares: the JSON interface of `loomctx bench perf --peers`.

An adapter runs with its peer's own python (bench/peers/.venvs/<peer>), never Loom's:
this module uses the standard library only, plus tiktoken when an adapter asks for an
encoding. The interface (see loomctx.evaluation.perf.peers):

- in: the path of a workload file (argv[1]): n, window, reserve, system, tools (OpenAI
  format), history (OpenAI chat messages), documents, queries, builds, time_limit,
  tiktoken_dir;
- out (stdout): {"peer", "version", "ingest_s", "build_ms", "windows", "notes",
  "timed_out", "error"}, one window per timed build, each {"query", "messages", "tools"}.

Tokenizers stay offline: `offline_tiktoken` gives tiktoken a cache folder holding the
encoding files of ../shared/data/tiktoken under the names tiktoken looks for (the SHA-1 of
the URL it would download from), so nothing is fetched at run time.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

_URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"


def offline_tiktoken(tiktoken_dir: str) -> str:
    """Point tiktoken (and libraries using it) at the shipped encoding files, offline."""
    cache = Path(tempfile.mkdtemp(prefix="peer-tiktoken-"))
    for file in Path(tiktoken_dir).glob("*.tiktoken"):
        key = hashlib.sha1(_URL.format(file.stem).encode()).hexdigest()
        shutil.copyfile(file, cache / key)
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    os.environ["TIKTOKENS_CACHE_DIR"] = str(cache)
    return str(cache)


def load() -> dict[str, Any]:
    """The workload named on the command line; tiktoken made offline."""
    workload: dict[str, Any] = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    if workload.get("tiktoken_dir"):
        offline_tiktoken(workload["tiktoken_dir"])
    return workload


def timed_builds(
    workload: dict[str, Any], build: Callable[[str], list[dict[str, Any]]]
) -> tuple[list[float], list[dict[str, Any]], bool]:
    """`builds` builds rotating over the queries, each `build(query)` returning OpenAI-format
    messages; stops when the builds so far took more than `time_limit` seconds."""
    build_ms: list[float] = []
    windows: list[dict[str, Any]] = []
    queries = workload["queries"]
    build(queries[0])  # warm-up, untimed
    spent = 0.0
    for i in range(workload["builds"]):
        query = queries[i % len(queries)]
        start = time.perf_counter()
        messages = build(query)
        took = time.perf_counter() - start
        spent += took
        build_ms.append(took * 1000)
        windows.append({"query": query, "messages": messages, "tools": workload["tools"]})
        if spent > workload["time_limit"]:
            return build_ms, windows, True
    return build_ms, windows, False


def run(peer: str, version: str, body: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Run `body(workload)` (returning ingest_s, build_ms, windows, notes, timed_out) and
    print the answer; a failure is an answer too, with `error` saying what failed."""
    answer: dict[str, Any] = {
        "peer": peer,
        "version": version,
        "ingest_s": None,
        "build_ms": [],
        "windows": [],
        "notes": [],
        "timed_out": False,
        "error": None,
    }
    try:
        answer.update(body(load()))
    except Exception as exc:  # the peer cannot run this workload: say why
        answer["error"] = f"{type(exc).__name__}: {exc}"[:400]
        traceback.print_exc(file=sys.stderr)
    json.dump(answer, sys.stdout)

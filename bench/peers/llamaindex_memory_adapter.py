"""llama-index-core `Memory` (short-term FIFO in SQLite, token-limited) on the workload.

Set up as its docs show: `Memory.from_defaults(session_id=..., token_limit=...)` with the
input budget as `token_limit`, the history put with `put_messages`, the window read with
`get()` between the system prompt and the user's turn. What it cannot do here: take the
knowledge documents (a `VectorMemoryBlock` needs an embedding model and a vector store; none
runs offline in llama-index-core), or count the system prompt, the query and the tool
definitions against its limit.
"""

from __future__ import annotations

import time
from importlib.metadata import version
from typing import Any

from _llama import from_llama, to_llama
from _peer_common import run, timed_builds


def body(workload: dict[str, Any]) -> dict[str, Any]:
    from llama_index.core.memory import Memory

    memory = Memory.from_defaults(
        session_id="perf", token_limit=workload["window"] - workload["reserve"]
    )
    start = time.perf_counter()
    memory.put_messages(to_llama(workload["history"]))
    ingest = time.perf_counter() - start
    system = {"role": "system", "content": workload["system"]}

    def build(query: str) -> list[dict[str, Any]]:
        return [system, *from_llama(memory.get()), {"role": "user", "content": query}]

    build_ms, windows, timed_out = timed_builds(workload, build)
    notes = [
        "llama-index-core Memory (token_limit = the input budget; history via put_messages):",
        "no knowledge documents (its vector block needs an embedding model and a vector",
        "store); the system prompt, the query and tool definitions are outside its limit.",
    ]
    return {
        "ingest_s": ingest,
        "build_ms": build_ms,
        "windows": windows,
        "notes": notes,
        "timed_out": timed_out,
    }


if __name__ == "__main__":
    run("llama-index-core Memory", version("llama-index-core"), body)

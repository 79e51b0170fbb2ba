"""llama-index-core `ChatMemoryBuffer` (deprecated for `Memory`, still widely used).

`ChatMemoryBuffer.from_defaults(token_limit=...)` with the input budget, the history put
with `put_messages`, and `get(initial_token_count=...)` given the system prompt's and the
query's tokens, as its docs advise. It re-counts the history it keeps on every message it
drops. What it cannot do: knowledge documents (it is a buffer), tool definitions.
"""

from __future__ import annotations

import time
from importlib.metadata import version
from typing import Any

from _llama import from_llama, to_llama
from _peer_common import run, timed_builds


def body(workload: dict[str, Any]) -> dict[str, Any]:
    from llama_index.core.memory import ChatMemoryBuffer
    from llama_index.core.utils import get_tokenizer

    tokenize = get_tokenizer()
    buffer = ChatMemoryBuffer.from_defaults(token_limit=workload["window"] - workload["reserve"])
    start = time.perf_counter()
    buffer.put_messages(to_llama(workload["history"]))
    ingest = time.perf_counter() - start
    system = {"role": "system", "content": workload["system"]}

    def build(query: str) -> list[dict[str, Any]]:
        used = len(tokenize(workload["system"])) + len(tokenize(query))
        kept = from_llama(buffer.get(initial_token_count=used))
        return [system, *kept, {"role": "user", "content": query}]

    build_ms, windows, timed_out = timed_builds(workload, build)
    notes = [
        "llama-index-core ChatMemoryBuffer (token_limit = the input budget, the system",
        "prompt and query passed as initial_token_count): no knowledge documents; tool",
        "definitions not counted.",
    ]
    return {
        "ingest_s": ingest,
        "build_ms": build_ms,
        "windows": windows,
        "notes": notes,
        "timed_out": timed_out,
    }


if __name__ == "__main__":
    run("llama-index-core ChatMemoryBuffer", version("llama-index-core"), body)

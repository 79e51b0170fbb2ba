"""langchain-core `trim_messages` on the workload of `loomctx bench perf`.

What it can do: keep the newest messages within `max_tokens`, with the system message
(`include_system=True`), starting on a human turn (`start_on="human"`); it keeps a tool call
with its results only as far as the token count falls. What it cannot do: retrieval (no
knowledge documents reach its window) and tool definitions (it does not count them: the
budget given to it is the whole input budget, as a user would set it).
"""

from __future__ import annotations

import time
from importlib.metadata import version
from typing import Any

from _peer_common import run, timed_builds


def body(workload: dict[str, Any]) -> dict[str, Any]:
    import tiktoken
    from langchain_core.messages import (
        BaseMessage,
        HumanMessage,
        SystemMessage,
        convert_to_messages,
        convert_to_openai_messages,
        trim_messages,
    )

    encoding = tiktoken.get_encoding("o200k_base")

    def one(message: BaseMessage) -> int:
        text = message.content if isinstance(message.content, str) else str(message.content)
        calls = getattr(message, "tool_calls", None) or []
        return 4 + len(encoding.encode(text)) + sum(len(encoding.encode(str(c))) for c in calls)

    def count(messages: list[BaseMessage]) -> int:
        return 3 + sum(one(m) for m in messages)

    start = time.perf_counter()
    history = [SystemMessage(workload["system"]), *convert_to_messages(workload["history"])]
    ingest = time.perf_counter() - start
    budget = workload["window"] - workload["reserve"]

    def build(query: str) -> list[dict[str, Any]]:
        kept = trim_messages(
            [*history, HumanMessage(query)],
            max_tokens=budget,
            token_counter=count,
            strategy="last",
            include_system=True,
            start_on="human",
        )
        return convert_to_openai_messages(kept)

    build_ms, windows, timed_out = timed_builds(workload, build)
    notes = [
        "langchain-core trim_messages (strategy='last', include_system, start_on='human',",
        "tiktoken o200k per-message counter, max_tokens = the input budget):",
        "no retrieval, so no knowledge documents; tool definitions not counted.",
    ]
    return {
        "ingest_s": ingest,
        "build_ms": build_ms,
        "windows": windows,
        "notes": notes,
        "timed_out": timed_out,
    }


if __name__ == "__main__":
    run("langchain-core trim_messages", version("langchain-core"), body)

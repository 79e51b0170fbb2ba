"""autogen-core `TokenLimitedChatCompletionContext` on the workload.

It counts tokens with a model client: autogen-ext's `OpenAIChatCompletionClient` for
``gpt-4o`` (its `count_tokens` runs tiktoken locally, offline here; no request is ever sent:
the key is a placeholder). The context holds the history and the user's turn, with the tool
schemas counted (`tool_schema`) and the input budget as `token_limit`; the system message is
the agent's, put in front as autogen agents do. What it cannot do: knowledge documents (it
is a message buffer); it drops messages from the middle when over the limit.
"""

from __future__ import annotations

import asyncio
import time
from importlib.metadata import version
from typing import Any

from _peer_common import run, timed_builds


def _to_autogen(messages: list[dict[str, Any]]) -> list[Any]:
    from autogen_core import FunctionCall
    from autogen_core.models import (
        AssistantMessage,
        FunctionExecutionResult,
        FunctionExecutionResultMessage,
        UserMessage,
    )

    out: list[Any] = []
    names: dict[str, str] = {}
    for m in messages:
        if m["role"] == "user":
            out.append(UserMessage(content=m["content"], source="user"))
        elif m["role"] == "assistant" and m.get("tool_calls"):
            calls = [
                FunctionCall(
                    id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"]
                )
                for c in m["tool_calls"]
            ]
            names.update({c.id: c.name for c in calls})
            out.append(AssistantMessage(content=calls, source="assistant"))
        elif m["role"] == "assistant":
            out.append(AssistantMessage(content=m["content"], source="assistant"))
        elif m["role"] == "tool":
            result = FunctionExecutionResult(
                content=m["content"],
                call_id=m["tool_call_id"],
                name=names.get(m["tool_call_id"], ""),
                is_error=False,
            )
            out.append(FunctionExecutionResultMessage(content=[result]))
    return out


def _to_openai(messages: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        kind = type(m).__name__
        if kind == "UserMessage":
            out.append({"role": "user", "content": m.content})
        elif kind == "AssistantMessage" and isinstance(m.content, list):
            calls = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in m.content
            ]
            out.append({"role": "assistant", "content": None, "tool_calls": calls})
        elif kind == "AssistantMessage":
            out.append({"role": "assistant", "content": m.content})
        elif kind == "FunctionExecutionResultMessage":
            out += [
                {"role": "tool", "tool_call_id": r.call_id, "content": r.content} for r in m.content
            ]
    return out


def body(workload: dict[str, Any]) -> dict[str, Any]:
    from autogen_core.model_context import TokenLimitedChatCompletionContext
    from autogen_core.models import UserMessage
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    client = OpenAIChatCompletionClient(model="gpt-4o", api_key="placeholder-never-sent")
    schemas = [t["function"] for t in workload["tools"]]
    start = time.perf_counter()
    history = _to_autogen(workload["history"])
    ingest = time.perf_counter() - start
    system = {"role": "system", "content": workload["system"]}
    loop = asyncio.new_event_loop()

    def build(query: str) -> list[dict[str, Any]]:
        context = TokenLimitedChatCompletionContext(
            client,
            token_limit=workload["window"] - workload["reserve"],
            tool_schema=schemas,
            initial_messages=[*history, UserMessage(content=query, source="user")],
        )
        return [system, *_to_openai(loop.run_until_complete(context.get_messages()))]

    try:
        build_ms, windows, timed_out = timed_builds(workload, build)
    finally:
        loop.close()
    notes = [
        "autogen-core TokenLimitedChatCompletionContext (token_limit = the input budget, tool",
        "schemas counted, gpt-4o token counting through autogen-ext's OpenAI client, offline):",
        "no knowledge documents; the system message is outside its limit; over the limit it",
        "drops messages from the middle.",
    ]
    return {
        "ingest_s": ingest,
        "build_ms": build_ms,
        "windows": windows,
        "notes": notes,
        "timed_out": timed_out,
    }


if __name__ == "__main__":
    run("autogen-core TokenLimitedChatCompletionContext", version("autogen-core"), body)

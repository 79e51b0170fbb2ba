"""What the two llama-index adapters share: OpenAI-format messages to and from
`ChatMessage` (tool calls ride in `additional_kwargs`, as llama-index's OpenAI LLM sends them)."""

from __future__ import annotations

from typing import Any


def to_llama(messages: list[dict[str, Any]]) -> list[Any]:
    from llama_index.core.llms import ChatMessage

    out = []
    for m in messages:
        extra: dict[str, Any] = {}
        if m.get("tool_calls"):
            extra["tool_calls"] = m["tool_calls"]
        if m.get("tool_call_id"):
            extra["tool_call_id"] = m["tool_call_id"]
        out.append(ChatMessage(role=m["role"], content=m.get("content"), additional_kwargs=extra))
    return out


def from_llama(messages: list[Any]) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        role = m.role.value if hasattr(m.role, "value") else str(m.role)
        item: dict[str, Any] = {"role": role, "content": m.content}
        extra = m.additional_kwargs or {}
        if extra.get("tool_calls"):
            item["tool_calls"] = extra["tool_calls"]
        if extra.get("tool_call_id"):
            item["tool_call_id"] = extra["tool_call_id"]
        out.append(item)
    return out

"""Reading an OpenAI-compatible upstream's stream: its server-sent events, what follows
``[DONE]``, and a check of each chunk's field types.

`OpenAIUpstream` (`loomctx.server._upstream`) reads the response body with `sse_data`, parses
each event with `json_or_none`, refuses a chunk that `malformed` finds a wrong type in (a 502:
`Reply.add` would fail on it, or fold garbage into the recorded reply), and after ``[DONE]``
reads the body to its end with `drain`, so that the connection goes back to the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, Final

__all__ = ["DRAIN_SECONDS", "drain", "json_or_none", "malformed", "sse_data"]

DRAIN_SECONDS: Final = 1.0
"""What follows ``[DONE]`` is read this long at most (`drain`)."""


def malformed(chunk: Mapping[str, Any]) -> str | None:
    """What in an OpenAI ``chat.completion.chunk`` has a type Loom cannot fold into a reply,
    or None."""
    for path, value, types in _chunk_fields(chunk):
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            expected = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            return f"`{path}` is {_json_type(value)}, not {expected}"
    return None


_OPTIONAL_STR: Final = (str, type(None))


def _chunk_fields(chunk: Mapping[str, Any]) -> Iterator[tuple[str, Any, tuple[type, ...]]]:
    """(path, value, the types it may have) for each field `Reply.add` reads, outer first: a
    caller stops at the first wrong one, so what follows may read into what came before."""
    yield "id", chunk.get("id"), _OPTIONAL_STR
    yield "model", chunk.get("model"), _OPTIONAL_STR
    yield "created", chunk.get("created"), (int, float, type(None))
    yield "usage", chunk.get("usage"), (dict, type(None))
    yield "choices", chunk.get("choices"), (list, type(None))
    for i, choice in enumerate(chunk.get("choices") or ()):
        at = f"choices[{i}]"
        yield at, choice, (dict,)
        yield f"{at}.finish_reason", choice.get("finish_reason"), _OPTIONAL_STR
        yield f"{at}.delta", choice.get("delta"), (dict, type(None))
        delta = choice.get("delta") or {}
        yield f"{at}.delta.content", delta.get("content"), _OPTIONAL_STR
        yield f"{at}.delta.tool_calls", delta.get("tool_calls"), (list, type(None))
        for j, call in enumerate(delta.get("tool_calls") or ()):
            here = f"{at}.delta.tool_calls[{j}]"
            yield here, call, (dict,)
            yield f"{here}.index", call.get("index", 0), (int,)
            yield f"{here}.id", call.get("id"), _OPTIONAL_STR
            yield f"{here}.function", call.get("function"), (dict, type(None))
            function = call.get("function") or {}
            yield f"{here}.function.name", function.get("name"), _OPTIONAL_STR
            yield f"{here}.function.arguments", function.get("arguments"), _OPTIONAL_STR


def _json_type(value: Any) -> str:
    """`value`'s JSON type, as an error message names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "an object"
    return "an array" if isinstance(value, list) else "a number"


async def drain(events: AsyncIterator[str]) -> None:
    """Read what follows ``[DONE]`` to the body's end (nothing, from a server that keeps to
    the protocol): a response closed unread takes its connection with it, and every call
    would open a new one (a TCP and TLS handshake to a provider). A server that holds the
    stream open past `DRAIN_SECONDS` gets its connection closed instead."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(DRAIN_SECONDS):
            async for _ in events:
                pass


async def sse_data(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """The `data` of each server-sent event (its ``data:`` lines joined by newlines)."""
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
        elif line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


def json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None

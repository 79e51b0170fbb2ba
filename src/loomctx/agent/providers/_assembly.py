"""Assembling a streamed reply: tool-call fragments by index, arguments parsed at the end,
and the closing `Completed` chunk.

What a model sends is kept, made valid, or turned into something the model can correct: text
with surrogate code points (a JSON escape such as ``"\\ud800"`` decodes to one) is repaired
with `valid_text`; a call whose arguments `loomctx.messages.parse_arguments` refuses (not a
JSON object, NaN or Infinity, nesting too deep, surrogates) becomes an invalid tool call,
which the agent loop answers with an error result instead of running it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from loomctx.agent.llm import Completed, LLMChunk, TextDelta, ToolCallDelta, Usage
from loomctx.errors import MessageFormatError, ProviderError
from loomctx.messages import Message, ToolCall, parse_arguments, valid_text


@dataclass(slots=True)
class _PartialCall:
    id: str
    name: str | None
    fragments: list[str] = field(default_factory=list)


class Truncated(Exception):
    """The stream ended before the provider said the reply was complete."""


class ToolCallAssembler:
    """Collects tool-call fragments by index and parses each call's arguments at the end."""

    def __init__(self) -> None:
        self._calls: dict[int, _PartialCall] = {}

    def __bool__(self) -> bool:
        return bool(self._calls)

    def add(self, index: int, *, id: str | None, name: str | None, fragment: str) -> ToolCallDelta:
        """Record a fragment of call `index`; return the delta to stream (id and name on the
        call's first delta only). Some servers repeat the id or name on every fragment, so the
        first non-empty value of each wins."""
        call = self._calls.get(index)
        if call is None:
            # Some OpenAI-compatible servers send no id; a unique one keeps the history valid.
            call = self._calls[index] = _PartialCall(
                id=id or f"call_{uuid.uuid4().hex[:24]}", name=name or None
            )
            delta = ToolCallDelta(index=index, id=call.id, name=name or None, arguments=fragment)
        elif call.name is None and name:
            call.name = name
            delta = ToolCallDelta(index=index, name=name, arguments=fragment)
        else:
            delta = ToolCallDelta(index=index, arguments=fragment)
        if fragment:
            call.fragments.append(fragment)
        return delta

    def finish(self, llm_name: str) -> tuple[list[ToolCall], list[tuple[str, str]]]:
        """The calls in index order, and (id, raw text) of those whose arguments were not a
        JSON object (those calls get `arguments={}`)."""
        calls: list[ToolCall] = []
        invalid: list[tuple[str, str]] = []
        for index in sorted(self._calls):
            partial = self._calls[index]
            if not partial.name:
                raise ProviderError(
                    f"`{llm_name}` streamed tool call {index} (`{partial.id}`) without a "
                    "function name; the server does not follow the streaming protocol"
                )
            raw = "".join(partial.fragments)
            call_id, name = valid_text(partial.id), valid_text(partial.name)
            arguments: dict[str, Any]
            try:
                arguments = parse_arguments(raw)
            except MessageFormatError:  # the model reads why when the loop answers the call
                invalid.append((call_id, valid_text(raw)))
                arguments = {}
            calls.append(ToolCall(id=call_id, name=name, arguments=arguments))
        return calls, invalid


def text_delta(texts: list[str], text: str) -> TextDelta:
    """Keep a piece of the reply's text in `texts` and make its delta, both valid Unicode."""
    text = valid_text(text)
    texts.append(text)
    return TextDelta(text=text)


def completed(
    llm_name: str,
    texts: Sequence[str],
    tools: ToolCallAssembler,
    finish_reason: str,
    usage: Usage | None,
) -> Completed:
    """The `Completed` chunk for the text pieces and tool calls of a reply."""
    calls, invalid = tools.finish(llm_name)
    return Completed(
        message=Message.assistant("".join(texts), tool_calls=calls),
        finish_reason=finish_reason,
        usage=usage,
        invalid_tool_calls=tuple(invalid),
    )


class Assembler(Protocol):
    """Turns a provider's stream events into chunks."""

    def feed(self, event: Any) -> list[LLMChunk]:
        """The chunks one event produces (often none)."""
        ...

    def finish(self) -> list[LLMChunk]:
        """The closing chunks (usage, `Completed`); raise `Truncated` if the stream ended
        before the provider said the reply was complete."""
        ...

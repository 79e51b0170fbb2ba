"""pydantic-ai's `history_processors`, with Loom's window as the history (extra
`pydantic-ai`).

    agent = Agent(model, capabilities=[ProcessHistory(LoomHistory(memory, window=8000))])

(``history_processors=[...]`` in pydantic-ai releases before capabilities.) Before each
model request pydantic-ai hands its processors the run's messages (the message
history passed in, then this run's requests and responses). `LoomHistory` records the finished
turns in the `LoomMemory` and returns Loom's window of them (`loomctx.integrations.LoomWindow`):
the system prompt, history as far back as the room allows, what memory recalls of older turns,
the user's turn and its tool calls with their returns. Thinking and other parts that are not
conversation are left out; a user prompt with images or files raises `MessageFormatError`
(Loom's memory holds text).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loomctx.errors import MessageFormatError
from loomctx.integrations._framework import framework
from loomctx.integrations._window import WindowAdapter
from loomctx.messages import Message, ToolCall

__all__ = ["LoomHistory", "from_model_messages", "to_model_messages"]


def _messages() -> Any:
    return framework("pydantic_ai.messages", feature="LoomHistory", extra="pydantic-ai")


def _prompt_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        if not isinstance(part, str):
            raise MessageFormatError(
                f"{where}: a user prompt part of type {type(part).__name__}; Loom's memory "
                "holds text only"
            )
        texts.append(part)
    return "\n".join(texts)


def from_model_messages(messages: Sequence[Any]) -> list[Message]:
    """pydantic-ai `ModelMessage`s in Loom's message model."""
    pm = _messages()
    out: list[Message] = []
    for i, msg in enumerate(messages):
        where = f"message {i}"
        if isinstance(msg, pm.ModelRequest):
            for part in msg.parts:
                if isinstance(part, pm.SystemPromptPart):
                    out.append(Message.system(part.content))
                elif isinstance(part, pm.UserPromptPart):
                    out.append(Message.user(_prompt_text(part.content, where)))
                elif isinstance(part, pm.ToolReturnPart):
                    out.append(
                        Message.tool(part.model_response_str(), tool_call_id=part.tool_call_id)
                    )
                elif isinstance(part, pm.RetryFeedbackPart):
                    out.append(Message.user(part.model_response()))
        elif isinstance(msg, pm.ModelResponse):
            text = "".join(p.content for p in msg.parts if isinstance(p, pm.TextPart))
            calls = [
                ToolCall(id=p.tool_call_id, name=p.tool_name, arguments=p.args_as_dict())
                for p in msg.parts
                if isinstance(p, pm.ToolCallPart)
            ]
            if text or calls:
                out.append(Message.assistant(text, tool_calls=calls))
        else:
            raise MessageFormatError(
                f"{where} is a {type(msg).__name__}; pydantic-ai's messages are `ModelRequest` "
                "and `ModelResponse`"
            )
    return out


def to_model_messages(messages: Sequence[Message]) -> list[Any]:
    """Loom messages as pydantic-ai `ModelMessage`s (requests and responses alternate)."""
    pm = _messages()
    out: list[Any] = []
    parts: list[Any] = []
    names: dict[str, str] = {}
    for m in messages:
        if m.role == "assistant":
            if parts:
                out.append(pm.ModelRequest(parts=parts))
                parts = []
            reply: list[Any] = [pm.TextPart(m.content)] if m.content else []
            for c in m.tool_calls:
                names[c.id] = c.name
                reply.append(
                    pm.ToolCallPart(tool_name=c.name, args=dict(c.arguments), tool_call_id=c.id)
                )
            out.append(pm.ModelResponse(parts=reply))
        elif m.role == "system":
            parts.append(pm.SystemPromptPart(m.content))
        elif m.role == "user":
            parts.append(pm.UserPromptPart(m.content))
        else:
            call_id = m.tool_call_id or ""
            parts.append(
                pm.ToolReturnPart(
                    tool_name=names.get(call_id, ""), content=m.content, tool_call_id=call_id
                )
            )
    if parts:
        out.append(pm.ModelRequest(parts=parts))
    return out


class LoomHistory(WindowAdapter):
    """A pydantic-ai history processor (async) that returns Loom's window of the messages
    (module docstring); one per conversation. `memory` is the conversation's `LoomMemory`;
    `window`, `max_output_tokens`, `settings` and `knowledge_bases` are `LoomWindow`'s."""

    _full: list[Any]
    _returned: list[Any]

    def _start(self) -> None:
        _messages()
        self._full, self._returned = [], []  # what pydantic-ai sent, what it was handed back

    async def __call__(self, messages: list[Any]) -> list[Any]:
        """Loom's window of `messages`, as pydantic-ai messages.

        pydantic-ai keeps the processed history as the run's history: the messages after
        the window this processor returned are new, and the conversation is the one it had
        seen plus those (a history that does not begin with its last window is taken as
        the whole conversation)."""
        n = len(self._returned)
        if n and messages[:n] == self._returned:
            full = [*self._full, *messages[n:]]
        else:
            full = list(messages)
        window = await self.loom.build(from_model_messages(full))
        self.last_window, self._full = window, full
        self._returned = to_model_messages(window.messages)
        return list(self._returned)

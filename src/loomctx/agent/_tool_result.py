"""`ToolResult`: the outcome of one tool call. A value of its own, below both the tools that
make it (`loomctx.agent.tools`) and the events that carry it (`loomctx.agent.events`)."""

from __future__ import annotations

from dataclasses import dataclass

from loomctx.messages import Message, valid_text

__all__ = ["ToolResult"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult:
    """The outcome of one tool call, as text for the model.

    `is_error` is True when the call failed (invalid arguments, an exception, a timeout, an
    unknown tool); `content` then says why. `elapsed_ms` is the wall time of the call.
    `content` is made valid Unicode (`valid_text`: a lone surrogate, such as a file read with
    ``errors="surrogateescape"`` leaves, becomes U+FFFD): the tool has run, so its output is
    kept rather than refused.
    """

    call_id: str
    name: str
    content: str
    is_error: bool = False
    elapsed_ms: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.content, str):
            object.__setattr__(self, "content", valid_text(self.content))

    def to_message(self) -> Message:
        """The `tool` message answering the call (needs a non-empty `call_id`)."""
        return Message.tool(
            self.content, tool_call_id=self.call_id, name=self.name, is_error=self.is_error
        )

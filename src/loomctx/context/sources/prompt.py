"""The sources that must always be in the window: the system instructions and the user's turn.

Both offer one pinned block, whatever the budget: a pinned block is placed whole or the build
raises `BudgetExceededError` naming it, so these sources never drop their block to stay within
`budget.ceiling` (that would lose the instructions or the user's turn silently).
"""

from __future__ import annotations

from loomctx.context.block import BuildContext, ContextBlock, TokenBudget
from loomctx.context.sources._common import billed, check_source, short
from loomctx.errors import ConfigError
from loomctx.messages import Message

__all__ = ["PromptSource", "UserInputSource"]


class PromptSource:
    """The agent's system instructions: one pinned `instructions` block, never truncated.

    Empty or whitespace-only instructions offer no block.
    """

    __slots__ = ("instructions", "name", "priority")

    def __init__(
        self, instructions: str, *, name: str = "system_prompt", priority: float = 1.0
    ) -> None:
        self.name, self.priority = check_source("PromptSource", name, priority)
        if not isinstance(instructions, str):
            raise ConfigError(
                f"`instructions` of PromptSource `{self.name}` must be a string, got "
                f"{type(instructions).__name__} {short(instructions)}; pass the system prompt "
                'text ("" for none)'
            )
        self.instructions = instructions

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> list[ContextBlock]:
        """The instructions as one pinned block (none when they are blank)."""
        if not self.instructions.strip():
            return []
        return [
            ContextBlock(
                source=self.name,
                section="instructions",
                content=self.instructions,
                token_count=ctx.counter.count(self.instructions),
                priority=1.0,
                pinned=True,
                truncatable=False,
            )
        ]


class UserInputSource:
    """The current user turn, taken from the build's `query`: one pinned `user` block.

    `message`, when given, is that turn's user message as the client sent it (with its images
    and files: `Message.parts`): it is sent whole instead of a message made of `query`.

    Its `token_count` is what the user message is billed inside a conversation (framing, role
    and text, without the reply priming, which the window pays once).

    A blank query offers no block. That is right mid-run, where the in-flight exchange (the
    model's tool calls and their results) ends the window. Otherwise the window would end on
    whatever history ends on, often the last reply, which Anthropic reads as a prefill, text
    of the model's own to continue, not as a request to answer: `ContextOrchestrator.build`
    then raises unless asked for a prefill (`prefill=True`, also what a window built only to
    be inspected may pass), and `Agent.run` and `Agent.stream` refuse a blank prompt.
    """

    __slots__ = ("message", "name", "priority")

    def __init__(
        self, *, name: str = "user_input", priority: float = 1.0, message: Message | None = None
    ) -> None:
        self.name, self.priority = check_source("UserInputSource", name, priority)
        if message is not None and message.role != "user":
            raise ConfigError(
                f"`UserInputSource(message=...)` takes a `user` message, got a `{message.role}` one"
            )
        self.message = message

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> list[ContextBlock]:
        """The query as one pinned user message (none when it is blank); the source's
        `message`, if given, is sent instead (its images and files with it, never cut)."""
        message = self.message
        if message is None:
            if not query.strip():
                return []
            message = Message.user(query)
        return [
            ContextBlock(
                source=self.name,
                section="user",
                messages=(message,),
                token_count=billed(ctx.counter, [message]),
                priority=1.0,
                pinned=True,
                truncatable=False,
            )
        ]

"""LangGraph's pre-model hook for `create_react_agent`, with Loom's window as the model's
input (extra `langgraph`).

    agent = create_react_agent(model, tools, pre_model_hook=LoomPreModelHook(memory))

Before each model call the hook gets the graph's state; `LoomPreModelHook` records the
finished turns of ``state["messages"]`` in the `LoomMemory` and returns
``{"llm_input_messages": window}``: Loom's window of them (`loomctx.integrations.LoomWindow`),
which the model sees while the state keeps every message. Messages convert through OpenAI's
format (`langchain_core.messages.convert_to_openai_messages`); Loom's memory holds text, so
an image part raises `MessageFormatError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loomctx.errors import ConfigError
from loomctx.integrations._framework import framework
from loomctx.integrations._window import WindowAdapter
from loomctx.messages import Message, from_openai, to_openai

__all__ = ["LoomPreModelHook", "from_langchain", "to_langchain"]


def _core() -> Any:
    return framework("langchain_core.messages", feature="LoomPreModelHook", extra="langgraph")


def from_langchain(messages: Sequence[Any]) -> list[Message]:
    """LangChain messages in Loom's message model."""
    return from_openai(_core().convert_to_openai_messages(list(messages)))


def to_langchain(messages: Sequence[Message]) -> list[Any]:
    """Loom messages as LangChain messages."""
    return list(_core().convert_to_messages(to_openai(messages)))


class LoomPreModelHook(WindowAdapter):
    """A `pre_model_hook` for LangGraph's `create_react_agent` (module docstring); one per
    conversation. `memory` is the conversation's `LoomMemory`; `window`,
    `max_output_tokens`, `settings` and `knowledge_bases` are `LoomWindow`'s."""

    def _start(self) -> None:
        _core()

    async def __call__(self, state: Any) -> dict[str, Any]:
        """``{"llm_input_messages": ...}``: Loom's window of the state's messages."""
        messages = state.get("messages") if isinstance(state, Mapping) else None
        if messages is None:
            messages = getattr(state, "messages", None)
        if messages is None:
            raise ConfigError("the graph's state has no `messages`; the hook reads them")
        window = await self.loom.build(from_langchain(messages))
        self.last_window = window
        return {"llm_input_messages": to_langchain(window.messages)}

"""The OpenAI Agents SDK's `Session`, backed by a Loom memory (extra `agents`).

    session = LoomSession("user-42", memory)
    result = await Runner.run(agent, "Where did we leave off?", session=session)

The SDK reads a session's items before each run and adds the run's items after it.
`LoomSession` keeps every item in the memory's store (so `pop_item` and a new process see
them) and records the finished turns in the `LoomMemory` (`loomctx.integrations.LoomWindow`);
`get_items` returns Loom's window for the next call as the SDK's input items: history as far
back as the window's room allows, then what memory recalls of older turns, the latest turn
with its tool calls and their outputs together. The SDK reads the session before it adds the
run's new input, so what memory recalls is what the latest turn in the session asks for.

Items are Responses API input items: messages (text content), `function_call` and
`function_call_output`; `reasoning` items are kept in the session but left out of the
window (a model's reasoning is not conversation). Any other item (images, files, hosted
tools' calls) raises `MessageFormatError` in `add_items`, before anything is stored.

What the memory recorded stays recorded: `pop_item` takes an item out of the session and of
the current turn, but a turn finished before it stays in memory; `clear_session` deletes
the memory's records too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from loomctx.context.recipe import WindowSettings
from loomctx.errors import ConfigError, MessageFormatError
from loomctx.integrations._framework import framework
from loomctx.integrations._window import DEFAULT_WINDOW, LoomWindow, Marks
from loomctx.knowledge import KnowledgeBaseProvider
from loomctx.memory.core import LoomMemory
from loomctx.messages import Message, from_openai, responses_input_to_openai
from loomctx.stores.base import Delete, Put, Record, Scan

__all__ = ["LoomSession", "items_to_messages", "messages_to_items"]

_ITEM = "agents_item"
_MARKS = "agents_marks"


def items_to_messages(items: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Responses API input items in Loom's message model, read as
    `loomctx.messages.responses_input_to_openai` reads them (a `function_call` joins the
    assistant message before it, so parallel calls form one unit with their outputs).
    Raises `MessageFormatError` naming what cannot be read, and for an image or a file: the
    session's memory holds text only."""
    messages = from_openai(responses_input_to_openai(list(items)))
    for m in messages:
        if m.parts:
            raise MessageFormatError(
                f"a `{m.role}` item holds an image or a file, but Loom's memory holds text "
                "only (`input_text`, `output_text`, `refusal`): send images and files "
                "outside the session"
            )
    return messages


def messages_to_items(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Loom messages as Responses API input items (system messages left out: the agent's
    instructions are the SDK's)."""
    items: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            items.append(
                {"type": "function_call_output", "call_id": m.tool_call_id, "output": m.content}
            )
        elif m.role in ("user", "assistant"):
            if m.content or not m.tool_calls:
                items.append({"role": m.role, "content": m.content})
            items += [
                {
                    "type": "function_call",
                    "call_id": c.id,
                    "name": c.name,
                    "arguments": c.arguments_json(),
                }
                for c in m.tool_calls
            ]
    return items


class LoomSession:
    """An Agents SDK session (`agents.memory.Session`) whose history is Loom's window (module
    docstring). `session_id` names the conversation; `memory` is its `LoomMemory` (its store
    keeps the items too); `window`, `max_output_tokens`, `settings` and `knowledge_bases` are
    `LoomWindow`'s."""

    session_settings: Any = None
    """The SDK's per-session settings (None: the SDK's defaults)."""

    def __init__(
        self,
        session_id: str,
        memory: LoomMemory,
        *,
        window: int = DEFAULT_WINDOW,
        max_output_tokens: int | None = None,
        settings: WindowSettings | None = None,
        knowledge_bases: Sequence[KnowledgeBaseProvider] = (),
    ) -> None:
        framework("agents", feature="LoomSession", extra="agents")
        if not isinstance(session_id, str) or not session_id or "/" in session_id:
            raise ConfigError(
                f"`session_id` must be a non-empty string without '/', got {session_id!r}"
            )
        self.session_id: Final = session_id
        self.memory: Final = memory
        self._ns = (*memory.namespace, "agents-session", session_id)
        stored = memory.store.batch([Scan(prefix=self._ns, kind=_MARKS, exact=True)])[0]
        marks = Marks(**stored[0].data) if stored else None
        self.loom: Final = LoomWindow(
            memory,
            window=window,
            max_output_tokens=max_output_tokens,
            settings=settings,
            knowledge_bases=knowledge_bases,
            marks=marks,
        )
        """What builds its windows."""

    async def _records(self) -> list[Record]:
        """The stored items' records, oldest first."""
        found = await self.memory.store.abatch([Scan(prefix=self._ns, kind=_ITEM, exact=True)])
        return sorted(found[0], key=_order)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """Loom's window for the next call, as input items (the last `limit` of them, a
        tool call's output never without its call)."""
        before = self.loom.marks
        items = [dict(r.data["item"]) for r in await self._records()]
        window = await self.loom.build(items_to_messages(items))
        if self.loom.marks != before:
            await self.memory.store.abatch([self._marks_put()])
        items = messages_to_items(window.messages)
        if limit is not None and limit < len(items):
            items = items[len(items) - max(limit, 0) :] if limit > 0 else []
            while items and items[0].get("type") == "function_call_output":
                items.pop(0)
        return items

    async def add_items(self, items: list[Any]) -> None:
        """Store `items` after the session's own (checked first: an item Loom cannot read
        raises `MessageFormatError` and nothing is stored)."""
        plain = [dict(_plain(item)) for item in items]
        items_to_messages(plain)
        records = await self._records()
        start = _order(records[-1]) + 1 if records else 0
        await self.memory.store.abatch(
            [
                Put(
                    record=Record(
                        namespace=self._ns,
                        key=f"item-{start + k:09d}",
                        kind=_ITEM,
                        data={"item": item, "order": start + k},
                    )
                )
                for k, item in enumerate(plain)
            ]
        )

    async def pop_item(self) -> Any | None:
        """Remove the newest item and return it (None when there is none)."""
        records = await self._records()
        if not records:
            return None
        last = records[-1]
        await self.memory.store.abatch([Delete(namespace=self._ns, key=last.key)])
        return dict(last.data["item"])

    async def clear_session(self) -> None:
        """Delete the session's items and what its memory recorded."""
        store = self.memory.store
        mine, recorded = await store.abatch(
            [
                Scan(prefix=self._ns, exact=True),
                Scan(prefix=self.memory.namespace, exact=True),
            ]
        )
        await store.abatch([Delete(namespace=r.namespace, key=r.key) for r in [*mine, *recorded]])
        self.loom.marks = Marks()

    def _marks_put(self) -> Put:
        m = self.loom.marks
        return Put(
            record=Record(
                namespace=self._ns,
                key="marks",
                kind=_MARKS,
                data={"count": m.count, "first": m.first, "last": m.last},
            )
        )


def _order(record: Record) -> int:
    return int(record.data["order"])


def _plain(item: Any) -> Mapping[str, Any]:
    """An item as a JSON-ready dict (the SDK may pass pydantic models)."""
    if isinstance(item, Mapping):
        return json.loads(json.dumps(item, default=str))  # type: ignore[no-any-return]
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_unset=True)  # type: ignore[no-any-return]
    raise MessageFormatError(f"an item must be a dict, got {type(item).__name__}")

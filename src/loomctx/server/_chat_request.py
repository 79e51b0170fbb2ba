"""A chat-completions request, checked (`parse_chat_request`), and what the proxy prepared
for it (`Prepared`): the values the proxy's steps pass along (`loomctx.server._proxy`).

A request is refused before anything is stored when its body is not a JSON object, its
`model` is not configured, its `messages` are not a non-empty list of messages with roles
(system and developer messages are the client's instructions, the rest the conversation),
its tools are not valid schemas, `stream` is not a boolean, or it ends on a user message with
no text (a window for it would end on the previous reply, which a provider reads as a
prefill). The session is the ``X-Loom-Session`` header's, else the body's `user`, else a new
one.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from loomctx.context.orchestrator import ContextWindow
from loomctx.errors import ConfigError
from loomctx.messages import from_openai, tool_spec
from loomctx.server._cache_marks import ClientMarks
from loomctx.server._config import ModelConfig, TenantConfig
from loomctx.server._errors import RequestError
from loomctx.server._service import check_session_id
from loomctx.server._upstream import Reply
from loomctx.stores.base import Record

__all__ = ["ChatRequest", "Prepared", "parse_chat_request"]

_OWN = frozenset({"model", "messages", "stream"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatRequest:
    """A checked chat-completions request."""

    body: Mapping[str, Any]
    model: ModelConfig
    system: str
    conversation: tuple[Mapping[str, Any], ...]
    tools: tuple[Mapping[str, Any], ...]
    stream: bool
    session: str
    new_session: bool
    idempotency_key: str | None = None  # the ``Idempotency-Key`` header, if sent
    cache_marks: ClientMarks | None = None  # the client's own (`POST /v1/messages`)

    @property
    def fields(self) -> dict[str, Any]:
        """The client's other fields, sent upstream as given."""
        return {k: v for k, v in self.body.items() if k not in _OWN}


@dataclass(slots=True, kw_only=True)
class Prepared:
    """What step 3 produced: the window, its report id, and how to record the reply."""

    request: ChatRequest
    tenant: TenantConfig
    window: ContextWindow | None
    report_id: str | None
    turn: str
    key: str = ""  # the request's key in the session's ledger of turns
    state: dict[str, Any] = field(default_factory=dict)
    reply: Reply | None = None
    complete: bool = False
    recorded: bool = False  # the request's turn is in memory: its reply goes there too
    saving: asyncio.Future[None] | None = None  # the write of step 5, running
    cache_marks: str | None = None  # the ``X-Loom-Cache-Marks`` header, with client marks
    window_record: Record | None = None  # the saved window's record, for the reply's usage


_INSTRUCTION_ROLES = frozenset({"system", "developer"})


def _blank_user_message(message: Mapping[str, Any]) -> bool:
    """Whether `message` is a user message whose content is only white space (a window for
    it would end on the previous reply, which a provider reads as a prefill)."""
    if message.get("role") != "user":
        return False
    content = message.get("content")
    if isinstance(content, str):
        return not content.strip()
    if isinstance(content, list):  # parts: blank only if every part is text, and blank
        return all(
            isinstance(p, Mapping)
            and p.get("type") == "text"
            and not str(p.get("text", "")).strip()
            for p in content
        )
    return False


def parse_chat_request(
    body: Any,
    *,
    models: Mapping[str, ModelConfig],
    session: str | None,
    idempotency_key: str | None = None,
) -> ChatRequest:
    """Check a request body (a 400 / 404 `RequestError` naming what is wrong)."""
    if not isinstance(body, Mapping):
        raise RequestError("the request body must be a JSON object", code="invalid_body")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("`model` is required: the name of a configured model", param="model")
    if model not in models:
        known = ", ".join(f"`{m}`" for m in sorted(models)) or "none"
        raise RequestError(
            f"the model `{model}` does not exist on this server; configured models: {known} "
            "(see GET /v1/models)",
            status=404,
            code="model_not_found",
            param="model",
        )
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise RequestError("`messages` must be a non-empty list of chat messages", param="messages")
    # One pass: a client may re-send a long history on every call.
    instructions: list[Mapping[str, Any]] = []
    talk: list[Mapping[str, Any]] = []
    for i, message in enumerate(raw):
        role = message.get("role") if type(message) is dict or isinstance(message, Mapping) else 0
        if type(role) is not str:
            raise RequestError(
                f"`messages[{i}]` must be an object with a `role`, got {message!r:.80}",
                param="messages",
            )
        (instructions if role in _INSTRUCTION_ROLES else talk).append(message)
    try:
        system = "\n\n".join(m.content for m in from_openai(instructions) if m.content)
    except ConfigError as exc:
        raise RequestError(str(exc), param="messages") from None
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise RequestError("`tools` must be a list of tool schemas", param="tools")
    for i, tool in enumerate(tools):
        try:
            tool_spec(tool)
        except ConfigError as exc:
            raise RequestError(f"`tools[{i}]`: {exc}", param="tools") from None
    conversation = tuple(talk)
    if conversation and _blank_user_message(conversation[-1]):
        raise RequestError(
            "the last message is a user message with no text: send the user's words, or end "
            "`messages` on an assistant message to ask the model to continue it (a prefill)",
            param="messages",
            code="empty_user_message",
        )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError(f"`stream` must be true or false, got {stream!r}", param="stream")
    user = body.get("user")
    new_session = False
    if session is None and isinstance(user, str) and user:
        session = user
    if session is None:
        session, new_session = "s_" + uuid.uuid4().hex, True
    return ChatRequest(
        body=body,
        model=models[model],
        system=system,
        conversation=conversation,
        tools=tuple(tools),
        stream=stream,
        session=check_session_id(session),
        new_session=new_session,
        idempotency_key=idempotency_key,
    )

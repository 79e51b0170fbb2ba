"""Each turn recorded once: the proxy's conditional writes to a session.

A client may send one request several times: its SDK retries after a timeout or a dropped
connection (the `openai` SDK does so by default), an app sends it twice at once, a load
balancer hands the copies to different instances of `loomctx serve` on one store. Each turn
is recorded once, and a session's turns in the order they came, whichever instance gets
each request:

- A request's key is its ``Idempotency-Key`` header (hashed), or else the digest of the
  request itself (`loomctx.context.turns.request_digest`): the copies of one request share
  it, the next turn does not.
- The session's ledger, ``(tenant, "turns", session)``, has one record per key: the turn it
  recorded, the request's digest, whether its reply is recorded.
- What the proxy records of a session (the new messages of a request, then its reply) is
  written in one batch with the ledger's record and the session's state, guarded by an
  `Expect` on the ledger's version as it was when the session's state was read. Two
  requests that read the same view cannot both write: the second finds the version moved,
  reads again (`record_turn` returns None, the caller retries) and then sees what the first
  recorded: its own key, if it was a copy (it records nothing), or the history the first
  extended, if it is the next turn.
- A request whose key is in the ledger records nothing. Its reply is recorded only if
  nothing was recorded in the session since its turn (`record_reply`): of several copies,
  the first reply to end is kept; the others are answered, not recorded. A later request
  has the reply in its history, and records it from there.

A deliberate regeneration (the same history, asking for a new reply) is a new request: send
it with a new ``Idempotency-Key``. It is recorded as a new turn (the question again, with its
new reply). The same key sent with another request is refused (422): a key names one request.
"""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from loomctx.context.turns import Split, message_digest, request_digest, split_request
from loomctx.errors import ConfigError, ConflictError, MessageFormatError
from loomctx.memory.task import (
    ASSISTANT_MESSAGE,
    Task,
    message_task,
    tasks_from_messages,
)
from loomctx.messages import Message, split_units
from loomctx.server._errors import RequestError
from loomctx.server._service import LoomService
from loomctx.server._tenants import claims_namespace, proxy_namespace
from loomctx.stores.base import Expect, Get, Put, Record, Version

__all__ = [
    "TURN_KIND",
    "Turn",
    "ledger_namespace",
    "record_reply",
    "record_turn",
    "save_state",
    "turn_key",
]

TURN_KIND: Final = "proxy_turn"
_HEADER_KEY: Final = re.compile(r"[\x21-\x7e]{1,255}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    """What `record_turn` found or recorded: the request's split, its ledger key, its turn's
    id, the session's state (as the request left it), the id of the ledger write that
    recorded it ("" for a copy of a request recorded before: it recorded nothing), and
    whether the tenant had claimed the session before."""

    split: Split
    key: str
    turn: str
    state: dict[str, Any] = field(default_factory=dict)
    write: str = ""
    claimed: bool = False

    @property
    def copy(self) -> bool:
        """Whether the request is a copy of one recorded before."""
        return not self.write


def ledger_namespace(tenant: str, session: str) -> tuple[str, str, str]:
    """Where the session's ledger of recorded turns lives (its version guards the session)."""
    return (tenant, "turns", session)


def turn_key(header: str | None, digest: str) -> str:
    """The ledger key of a request: its ``Idempotency-Key`` header's (checked: 1-255
    printable ASCII characters, else a 400), or its digest's."""
    if header is None:
        return "r_" + digest[:40]
    if _HEADER_KEY.fullmatch(header) is None:
        raise RequestError(
            f"`Idempotency-Key` must be 1-255 printable ASCII characters, got {header!r:.80}",
            param="Idempotency-Key",
            code="invalid_idempotency_key",
        )
    return "h_" + hashlib.sha256(header.encode("ascii")).hexdigest()[:40]


def turn_tasks(split: Split, turn: str, session: str) -> list[Task]:
    """Tasks for what is new; those of the current turn tagged with its id. Raises
    `RequestError` for a history whose tool calls and results do not pair up."""
    try:
        old = tasks_from_messages(list(split.before_turn), agent="assistant", session_id=session)
        now = tasks_from_messages(list(split.current), agent="assistant", session_id=session)
        split_units(list(split.in_flight))
    except MessageFormatError as exc:
        raise RequestError(f"`messages`: {exc}", param="messages") from None
    return old + [t.evolve(metadata={**t.metadata, "run_id": turn}) for t in now]


def record_turn(
    service: LoomService,
    tenant: str,
    session: str,
    conversation: Sequence[Mapping[str, Any]],
    *,
    model: str,
    header: str | None,
    check: Callable[[Split], None] | None = None,
) -> Turn | None:
    """Record what is new in a request, from one view of the session (see the module
    docstring): the `Turn`, or None if the session moved meanwhile (read again and retry).
    Bad input raises `RequestError` before anything is written, and so does `check` (called
    with the request's split) when it refuses the turn."""
    ns = ledger_namespace(tenant, session)
    # The version first: a write that lands after it fails the guard, whatever was read.
    version, found, claim = service.store.batch(
        [
            Version(namespace=ns),
            Get(namespace=proxy_namespace(tenant), key=session),
            Get(namespace=claims_namespace(tenant), key=session),
        ]
    )
    claimed = claim is not None
    state = dict(found.data) if found is not None else {}
    try:
        split = split_request(
            conversation,
            count=int(state.get("count", 0)),
            first=str(state.get("first", "")),
            last=str(state.get("last", "")),
        )
    except ConfigError as exc:
        raise RequestError(str(exc), param="messages") from None
    if check is not None:
        check(split)
    digest = request_digest(conversation, split)
    key = turn_key(header, digest)
    seen = service.store.batch([Get(namespace=ns, key=key)])[0]
    if seen is not None:  # a retry, or a copy: its turn is recorded
        if seen.data.get("request") != digest:
            raise RequestError(
                "this `Idempotency-Key` was used for another request in this session; send a "
                "new key for a new request (the same key only to retry the same request)",
                status=422,
                code="idempotency_key_reused",
                param="Idempotency-Key",
            )
        return Turn(split=split, key=key, turn=str(seen.data["turn"]), state=state, claimed=claimed)
    new_turn = split.turn_start < split.total and split.turn_start >= split.known
    turn = "t_" + uuid.uuid4().hex if new_turn or not state.get("turn") else str(state["turn"])
    tasks = turn_tasks(split, turn, session)  # checks before anything is stored
    state.update(
        count=split.total,
        first=split.first,
        last=split.last,
        turn=turn,
        model=model,
        requests=int(state.get("requests", 0)) + 1,
    )
    write = uuid.uuid4().hex
    entry = Record(
        namespace=ns,
        key=key,
        kind=TURN_KIND,
        data={"turn": turn, "request": digest, "replied": False, "write": write},
    )
    guard: list[Expect | Put] = [
        Expect(namespace=ns, seq=version.seq),
        Put(record=entry),
        service.proxy_state_op(tenant, session, state),
    ]
    try:
        if tasks:  # promoted with the reply, after the response (`record_reply`)
            service.memory(tenant, session).add_tasks(tasks, guard=guard)
        else:
            service.store.batch(guard)
    except ConflictError:
        return None
    return Turn(split=split, key=key, turn=turn, state=state, write=write, claimed=claimed)


async def save_state(
    service: LoomService, tenant: str, session: str, turn: Turn, state: Mapping[str, Any]
) -> bool:
    """Write the session's `state` as the request of `turn` left it (with what the window's
    saving added to it), if its ledger write is still the session's last one: not for a copy,
    nor once anything else was recorded (then the newer state stands). Whether it was
    written. Every ledger write has an id of its own, so a later write to the same key (its
    reply) counts as another write."""
    if turn.copy:
        return False
    ns = ledger_namespace(tenant, session)
    version, entry = await service.store.abatch(
        [Version(namespace=ns), Get(namespace=ns, key=turn.key)]
    )
    if entry is None or entry.seq != version.seq or entry.data.get("write") != turn.write:
        return False
    try:
        await service.store.abatch(
            [Expect(namespace=ns, seq=entry.seq), service.proxy_state_op(tenant, session, state)]
        )
    except ConflictError:
        return False
    return True


def record_reply(
    service: LoomService, tenant: str, session: str, key: str, turn: str, text: str
) -> bool:
    """Record the reply `text` to the request of ledger `key` (of turn `turn`), unless
    something was recorded in the session since that request's turn: another reply to it,
    or a later request (which has the reply in its history). Whether it was recorded."""
    message = Message.assistant(text)
    task = message_task(
        ASSISTANT_MESSAGE, text, agent="assistant", metadata={"run_id": turn, "session_id": session}
    )
    ns = ledger_namespace(tenant, session)
    version, entry, found = service.store.batch(
        [
            Version(namespace=ns),
            Get(namespace=ns, key=key),
            Get(namespace=proxy_namespace(tenant), key=session),
        ]
    )
    if entry is None or entry.seq != version.seq or entry.data.get("replied"):
        return False
    state = dict(found.data) if found is not None else {}
    mark = message_digest(message)
    state.update(count=int(state.get("count", 0)) + 1, last=mark, updated=time.time())
    if not state.get("first"):
        state["first"] = mark
    guard: list[Expect | Put] = [
        Expect(namespace=ns, seq=version.seq),
        Put(record=replace(entry, data={**entry.data, "replied": True, "write": uuid.uuid4().hex})),
        service.proxy_state_op(tenant, session, state),
    ]
    memory = service.memory(tenant, session)
    try:
        memory.add_tasks([task], guard=guard)
    except ConflictError:
        return False  # another request recorded the session's next change first
    memory.promote_tasks()
    return True

"""Where sessions live in a `MemoryStore`: one namespace per concern, all under the agent.

    (tenant, agent, "sessions")          one `session` record per session (state, options)
                                         and one `archived` record per archived session
    (tenant, agent, "session", id)       the session's `LoomMemory` (its tasks and summaries)
    (tenant, agent, "queue", id)         Tasks accepted while the session was paused
    (tenant, agent, "agent")             the agent-level `LoomMemory`: L3 and the L4 archive

This is the one layout of a session's memory, whoever opens it: a `ContextController` (its
tenant and agent), the server (the request's tenant, `DEFAULT_AGENT`) and the command line
(`DEFAULT_TENANT`, `DEFAULT_AGENT`). So ``loomctx chat --session s`` and a
`ContextController()` of the default tenant and agent open the same memory for session ``s``.

No namespace of the layout is a prefix of another (the third part says which concern it
is), and every read of the controller, its sessions and memories is exact besides. So a
read of one never sees another's records (a session's memory cannot find a queued task, and
the archive is not inside any session), and the layout never nests with a standalone
`LoomMemory`'s default namespace, ``("default", node_id, "memory")``.

Earlier versions kept a session's memory elsewhere; `session_memory` moves it on open:

    (tenant, "memory", id)               the server (`loomctx serve`, `loomctx mcp`)
    ("default", id, "memory")            the command line (`chat`, `ingest`, `demo`)

A move is one batch (every record or none), guarded by both namespaces' versions, so two
processes opening the same session at once move it once; a second open finds nothing to
move. The moved records have no vectors (a store cannot hand them back): the memory's
background embedder gives them new ones, and lexical search finds them meanwhile. A session
with records in both places (an earlier version wrote to the old place after a move) is
refused with a `ConfigError` naming both, since two histories cannot be interleaved.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from loomctx.errors import ConfigError, ConflictError
from loomctx.stores.base import (
    Delete,
    Expect,
    MemoryStore,
    Namespace,
    Op,
    Put,
    Record,
    Scan,
    Version,
    check_namespace,
)

__all__ = [
    "DEFAULT_AGENT",
    "DEFAULT_TENANT",
    "SessionLayout",
    "check_id",
    "cli_memory_before",
    "served_memory_before",
    "session_memory",
]

SESSION_KIND: Final = "session"
ARCHIVED_KIND: Final = "archived"
QUEUED_KIND: Final = "queued"
DEFAULT_TENANT: Final = "default"
"""The tenant of the command line, and of a `ContextController` not given one."""
DEFAULT_AGENT: Final = "agent"
"""The agent of the server's and the command line's sessions, and of a `ContextController`
not given one."""
_ATTEMPTS: Final = 8  # moves tried while other writers keep changing either namespace


def check_id(value: object, what: str) -> str:
    """`value` if it can be a namespace part: a non-empty string without ``/``."""
    if not isinstance(value, str) or not value.strip() or "/" in value:
        raise ConfigError(
            f"`{what}` must be a non-empty string without '/', got {value!r}; it becomes part "
            "of the store namespace"
        )
    return value


@dataclass(frozen=True, slots=True)
class SessionLayout:
    """The namespaces of one agent's sessions in a store (see the module docstring); not
    to be confused with `loomctx.context.render.Layout`, where the parts of a window are."""

    tenant_id: str = DEFAULT_TENANT
    agent_id: str = DEFAULT_AGENT

    def __post_init__(self) -> None:
        check_id(self.tenant_id, "tenant_id")
        check_id(self.agent_id, "agent_id")

    @property
    def root(self) -> Namespace:
        return (self.tenant_id, self.agent_id)

    @property
    def sessions(self) -> Namespace:
        return (*self.root, "sessions")

    @property
    def agent(self) -> Namespace:
        return (*self.root, "agent")

    def memory(self, session_id: str) -> Namespace:
        return check_namespace((*self.root, "session", session_id))

    def queue(self, session_id: str) -> Namespace:
        return check_namespace((*self.root, "queue", session_id))

    @staticmethod
    def session_key(session_id: str) -> str:
        return f"{SESSION_KIND}:{session_id}"

    @staticmethod
    def archived_key(session_id: str) -> str:
        return f"{ARCHIVED_KIND}:{session_id}"


def served_memory_before(tenant_id: str, session_id: str) -> Namespace:
    """Where the server kept a session's memory before this layout."""
    return check_namespace((tenant_id, "memory", session_id))


def cli_memory_before(session_id: str) -> Namespace:
    """Where the command line kept a session's memory before this layout."""
    return check_namespace((DEFAULT_TENANT, session_id, "memory"))


def session_memory(
    store: MemoryStore, layout: SessionLayout, session_id: str, *, before: Sequence[Namespace] = ()
) -> Namespace:
    """The namespace of the session's memory, ``layout.memory(session_id)``, after moving
    there what earlier versions stored at the namespaces `before` (see the module docstring).
    Cheap when there is nothing to move: one read of each earlier namespace."""
    target = layout.memory(session_id)
    for old in before:
        if old != target:
            _move(store, check_namespace(old), target)
    return target


def _move(store: MemoryStore, old: Namespace, new: Namespace) -> None:
    if not store.batch([Scan(prefix=old, exact=True, limit=1)])[0]:
        return
    for _ in range(_ATTEMPTS):
        seen_old, seen_new, records, present = store.batch(
            [
                Version(namespace=old),
                Version(namespace=new),
                Scan(prefix=old, exact=True),
                Scan(prefix=new, exact=True, limit=1),
            ]
        )
        if not records:
            return  # another process moved it
        if present:
            raise ConfigError(
                f"the store holds this session's memory twice: at {old!r}, where an earlier "
                f"version of Loom kept it, and at {new!r}, where this version keeps it; the "
                "two histories cannot be merged. Keep one: delete every record of the other "
                "namespace (a `Scan(prefix=..., exact=True)`, then a `Delete` of each), or "
                "open the old one under another session id"
            )
        ops: list[Op] = [
            Expect(namespace=old, seq=seen_old.seq),
            Expect(namespace=new, seq=seen_new.seq),
        ]
        for r in records:  # in write order, so the moved history keeps its order
            moved = Record(namespace=new, key=r.key, kind=r.kind, text=r.text, data=r.data)
            ops += [Put(record=moved), Delete(namespace=old, key=r.key)]
        try:
            store.batch(ops)
        except ConflictError:
            continue
        return
    raise ConflictError(
        f"moving the session memory at {old!r} to {new!r}: other writers changed one of "
        f"them during each of {_ATTEMPTS} attempts; open the session again"
    )

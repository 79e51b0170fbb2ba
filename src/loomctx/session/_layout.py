"""Where sessions live in a `MemoryStore`: one namespace per concern, all under the agent.

    (tenant, agent, "sessions")          one `session` record per session (state, options)
                                         and one `archived` record per archived session
    (tenant, agent, "session", id)       the session's `LoomMemory` (its tasks and summaries)
    (tenant, agent, "queue", id)         Tasks accepted while the session was paused
    (tenant, agent, "agent")             the agent-level `LoomMemory`: L3 and the L4 archive

No namespace of the layout is a prefix of another (the third part says which concern it
is), and every read of the controller, its sessions and memories is exact besides. So a
read of one never sees another's records (a session's memory cannot find a queued task, and
the archive is not inside any session), and the layout never nests with a standalone
`LoomMemory`'s default namespace, ``("default", node_id, "memory")``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from loomctx.errors import ConfigError
from loomctx.stores.base import Namespace, check_namespace

SESSION_KIND: Final = "session"
ARCHIVED_KIND: Final = "archived"
QUEUED_KIND: Final = "queued"


def check_id(value: object, what: str) -> str:
    """`value` if it can be a namespace part: a non-empty string without ``/``."""
    if not isinstance(value, str) or not value.strip() or "/" in value:
        raise ConfigError(
            f"`{what}` must be a non-empty string without '/', got {value!r}; it becomes part "
            "of the store namespace"
        )
    return value


@dataclass(frozen=True, slots=True)
class Layout:
    """The namespaces of one agent's sessions (see the module docstring)."""

    tenant_id: str
    agent_id: str

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

"""The topics sessions and the `ContextController` publish on, and what their payloads hold.

Topic names are public strings: a subscriber written today must still match them tomorrow,
so they are spelled once, here. Every payload is JSON and names its session(s).

- ``session.created``, ``session.paused``, ``session.resumed``, ``session.ended``: the
  session was stored in that state. `session_id`, `state`.
- ``task.added``: a Task is stored in a session's memory. `session_id`, `task_id`,
  `importance`.
- ``task.queued``: a Task is stored for a paused session. `session_id`, `task_id`.
- ``task.promoted``: Tasks moved up a tier (L1 -> L2 in a session, L2 -> L3 at the agent).
  `session_id`, `task_ids`, `from_tier`, `to_tier`.
- ``context.assembled``: a window was built. `session_ids`, `query`, `strategy` (the budget
  split of an aggregate window, None for one session's), `report` (`ContextReport.summary()`)
  and, for an aggregate, `shares` (each session's share of the budget).
- ``memory.persist``: L3/L4 persistence is due. `session_id`, `reason` (``"session_ended"``,
  ``"timer"`` or ``"requested"``).
- ``memory.persisted``: the `L4Persister` archived a session. `session_id`, `reason`,
  `tasks` (how many it copied).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CONTEXT_ASSEMBLED",
    "MEMORY_PERSIST",
    "MEMORY_PERSISTED",
    "SESSION_CREATED",
    "SESSION_ENDED",
    "SESSION_PAUSED",
    "SESSION_RESUMED",
    "TASK_ADDED",
    "TASK_PROMOTED",
    "TASK_QUEUED",
]

SESSION_CREATED: Final = "session.created"
SESSION_PAUSED: Final = "session.paused"
SESSION_RESUMED: Final = "session.resumed"
SESSION_ENDED: Final = "session.ended"
TASK_ADDED: Final = "task.added"
TASK_QUEUED: Final = "task.queued"
TASK_PROMOTED: Final = "task.promoted"
CONTEXT_ASSEMBLED: Final = "context.assembled"
MEMORY_PERSIST: Final = "memory.persist"
MEMORY_PERSISTED: Final = "memory.persisted"

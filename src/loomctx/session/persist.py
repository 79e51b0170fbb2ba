"""`L4Persister`: the bus subscriber that persists sessions' memory into the agent's archive.

Seed 003's L3 -> L4 step ("session end or timer -> EventBus.publish(persist)"): on every
``memory.persist`` event it copies the Tasks a session recorded since the last time (its
L4, which holds everything its L3 summarizes) into the agent-level `LoomMemory`'s archive,
where `search_tasks` finds them across sessions, and publishes ``memory.persisted``.

It is idempotent and restartable, as an at-least-once bus (Redis Streams) needs: progress
is a high-water mark (the store's write sequence) kept per session in the store, archiving
a Task twice rewrites the same record, and a crash between the copy and the mark only
repeats the copy. When the session has ended the mark is *final*; `unfinished()` lists the
ended sessions whose archiving never completed, for the controller to request again.
"""

from __future__ import annotations

from loomctx.memory.core import TASK, LoomMemory
from loomctx.memory.task import MemoryTier, Task
from loomctx.session import topics
from loomctx.session._layout import ARCHIVED_KIND, SESSION_KIND, SessionLayout
from loomctx.session.bus import Event, EventBus
from loomctx.stores.base import Get, MemoryStore, Put, Record, Scan

__all__ = ["L4Persister"]


class L4Persister:
    """Handles ``memory.persist`` events: archives the named session into `archive`.

    Subscribe it: ``bus.subscribe(topics.MEMORY_PERSIST, persister)``
    (`ContextController` does).
    """

    def __init__(
        self, *, store: MemoryStore, archive: LoomMemory, layout: SessionLayout, bus: EventBus
    ) -> None:
        self.store = store
        self.archive = archive
        self.layout = layout
        self.bus = bus

    async def __call__(self, event: Event) -> None:
        """Archive the session of `event`, then publish ``memory.persisted``."""
        session_id = str(event.payload["session_id"])
        layout = self.layout
        mark, meta = self.store.batch(
            [
                Get(namespace=layout.sessions, key=layout.archived_key(session_id)),
                Get(namespace=layout.sessions, key=layout.session_key(session_id)),
            ]
        )
        after = int(mark.data["seq"]) if mark is not None else 0
        # Read the state first: a Task recorded after this read is past the mark either way.
        final = meta is not None and meta.data["state"] == "ended"
        records: list[Record] = self.store.batch(
            [Scan(prefix=layout.memory(session_id), kind=TASK, after_seq=after, exact=True)]
        )[0]
        if records:
            self.archive.add_tasks(
                [Task.from_dict(r.data["task"]) for r in records], tier=MemoryTier.L4
            )
        seq = max([after, *(r.seq for r in records)])
        self.store.batch(
            [
                Put(
                    record=Record(
                        namespace=layout.sessions,
                        key=layout.archived_key(session_id),
                        kind=ARCHIVED_KIND,
                        data={"session_id": session_id, "seq": seq, "final": final},
                    )
                )
            ]
        )
        await self.bus.publish(
            topics.MEMORY_PERSISTED,
            {
                "session_id": session_id,
                "reason": event.payload.get("reason", "requested"),
                "tasks": len(records),
            },
            source="l4_persister",
        )

    def unfinished(self) -> list[str]:
        """Ended sessions whose archiving has not completed, oldest first."""
        ended, marks = self.store.batch(
            [
                Scan(
                    prefix=self.layout.sessions,
                    kind=SESSION_KIND,
                    where={"state": "ended"},
                    exact=True,
                ),
                Scan(
                    prefix=self.layout.sessions,
                    kind=ARCHIVED_KIND,
                    where={"final": True},
                    exact=True,
                ),
            ]
        )
        done = {r.data["session_id"] for r in marks}
        return [r.data["session_id"] for r in ended if r.data["session_id"] not in done]

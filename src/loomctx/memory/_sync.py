"""How a `LoomMemory`'s tiers stay the store's: changes written guarded by the namespace
version the tiers reflect (`StoreSync._write`), other writers' changes caught up with
before a tier is read (`_sync`, once per `same_view` block), a restore from the store."""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import replace
from typing import Final

from loomctx.errors import ConflictError
from loomctx.memory._search import SUMMARY, TASK
from loomctx.memory._tiers import Tiers, _Entry
from loomctx.memory.enrichment import BackgroundEmbedder
from loomctx.memory.task import Task, TaskSummary
from loomctx.stores.base import (
    Expect,
    MemoryStore,
    NamespaceVersion,
    Put,
    Record,
    Scan,
    Version,
)

__all__ = ["StoreSync", "build_view", "same_view"]

_ATTEMPTS: Final = 16  # guarded writes tried before a namespace that keeps changing is an error

# The `same_view` block the caller is in (a fresh object per block), or None.
_VIEW: ContextVar[object | None] = ContextVar("loomctx_memory_view", default=None)


@contextlib.contextmanager
def same_view() -> Iterator[None]:
    """A block in which each memory checks the store for other writers' changes once.

    Every read of a tier checks the namespace's version in the store (one round trip), and
    a window build reads the tiers four times: on PostgreSQL, four lookups were a third of
    a warm build's time in the store. Inside the block, a memory checks on its first read
    and later reads use that view, plus the memory's own writes. A block is entered per
    window build (`Session.build_context`), so each build still sees everything stored
    before it began, whichever worker stored it. It follows the asyncio context: tasks
    started in the block share it; other tasks, and threads not started from it, do not."""
    token = _VIEW.set(object())
    try:
        yield
    finally:
        _VIEW.reset(token)


@contextlib.contextmanager
def build_view() -> Iterator[None]:
    """`same_view` for one window build, unless the caller is in a `same_view` block already
    (an `Agent`'s, the proxy's, a `Session`'s), whose view it then keeps: a build's sources
    read the tiers four times, and each read outside a block looked the version up again."""
    if _VIEW.get() is not None:
        yield
        return
    with same_view():
        yield


class StoreSync(Tiers):
    """Tiers kept in step with the store (see the module docstring); `LoomMemory` is one."""

    store: MemoryStore
    background: BackgroundEmbedder | None
    _seen: NamespaceVersion
    _checked_in: object | None
    _past: tuple[list[tuple[int, Task]], int, int]
    _lock: contextlib.AbstractContextManager[object]

    def _write(self, plan: Callable[[], list[Record]], guard: Sequence[Expect | Put] = ()) -> None:
        """Run `plan` (it changes the tiers and returns the records to write), write its
        records guarded by the namespace version the tiers reflect, and keep its changes only
        if they were stored. Another writer's change in between: catch up and plan again.
        The background embedder waits meanwhile (`BackgroundEmbedder.writing`): it would take
        the interpreter from the write, and an import's writes come back to back."""
        background = self.background
        writing: contextlib.AbstractContextManager[None] = (
            contextlib.nullcontext() if background is None else background.writing()
        )
        with writing, self._lock:
            for _ in range(_ATTEMPTS):
                saved = self._snapshot()
                try:
                    records = plan()
                    if not records:
                        return
                    expect = Expect(namespace=self.namespace, seq=self._seen.seq)
                    stored: list[Record] = self.store.batch(
                        [expect, *guard, *(Put(record=r) for r in records)]
                    )[1 + len(guard) :]
                except ConflictError:
                    self._roll_back(saved)
                    if not self._holds(guard):
                        raise
                    self._catch_up()  # whatever the view: it is stale
                    continue
                except BaseException:
                    self._roll_back(saved)
                    raise
                # The guard held, so these are the namespace's latest changes.
                self._seen = replace(self._seen, seq=max(r.seq for r in stored))
                return
        raise ConflictError(
            f"the memory namespace {self.namespace!r} changed under every one of "
            f"{_ATTEMPTS} attempts to write to it; too many writers at once for one "
            f"conversation, retry later"
        )

    def _holds(self, guard: Sequence[Expect | Put]) -> bool:
        """Whether every `Expect` of a caller's `guard` still holds."""
        expects = [op for op in guard if isinstance(op, Expect)]
        if not expects:
            return True
        found = self.store.batch([Version(namespace=e.namespace) for e in expects])
        return all(v.seq == e.seq for v, e in zip(found, expects, strict=True))

    def _restore(self) -> None:
        """Rebuild the tiers from the store (empty for a new namespace)."""
        ns = self.namespace
        version, *scans = self.store.batch(
            [
                Version(namespace=ns),
                *(Scan(prefix=ns, kind=TASK, where={flag: True}, exact=True)
                  for flag in ("l1", "l2", "pending")),
                Scan(prefix=ns, kind=SUMMARY, where={"l3": True}, exact=True),
                Scan(prefix=ns, kind=TASK, newest_first=True, limit=1, exact=True),
            ]
        )  # fmt: skip
        self._entries = {}
        for rec in (r for found in scans[:3] for r in found):
            self._entries.setdefault(str(rec.data["task_id"]), _Entry.of(rec))
        self._l3 = deque(TaskSummary.from_dict(r.data["summary"]) for r in scans[3])
        self._past = ([], 0, 0)  # read again when asked: a delete may have taken some
        self._order = max([e.order + 1 for e in self._entries.values()] + [0])
        for rec in scans[4]:
            self._order = max(self._order, int(rec.data.get("order", -1)) + 1)
        self._rebuild()
        self._seen = version

    def _sync(self) -> None:
        """`_catch_up`, unless it was done in the current `same_view` block."""
        view = _VIEW.get()
        if view is None or view is not self._checked_in:
            self._catch_up()
            if view is not None:  # (a check outside any view leaves the view's valid)
                self._checked_in = view

    def _catch_up(self) -> None:
        """Catch the tiers up with what other writers stored since (when nothing changed,
        the usual case, one version lookup)."""
        ns = self.namespace
        if self.store.batch([Version(namespace=ns)])[0] == self._seen:
            return
        # The version and the changes, read together (one snapshot).
        version, changed = self.store.batch(
            [Version(namespace=ns), Scan(prefix=ns, exact=True, after_seq=self._seen.seq)]
        )
        if version.deleted_seq != self._seen.deleted_seq:
            self._restore()  # a delete shows in no scan: read everything again
            return
        l1 = l2 = False  # whether L1 / L2 may have changed
        for rec in changed:
            task_id = str(rec.data.get("task_id", ""))
            if rec.kind == TASK:
                self._order = max(self._order, int(rec.data.get("order", -1)) + 1)
                old = self._entries.pop(task_id, None)
                if rec.data.get("l1") or rec.data.get("l2") or rec.data.get("pending"):
                    self._entries[task_id] = new = _Entry.of(rec)
                    l1, l2 = l1 or new.l1, l2 or new.l2
                if old is not None:
                    l1, l2 = l1 or old.l1, l2 or old.l2
            elif rec.kind == SUMMARY:
                # Records come in write order, as a restore reads L3: a summary (re)written
                # now goes last.
                self._l3 = deque(s for s in self._l3 if s.task_id != task_id)
                if rec.data.get("l3"):
                    self._l3.append(TaskSummary.from_dict(rec.data["summary"]))
        self._rebuild(l1=l1, l2=l2)
        self._seen = version

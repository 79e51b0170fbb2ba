"""The tiers of a `LoomMemory` and how a change to them is worked out: which tasks enter or
leave L1 and L2, what is summarized into L3, and the records that say so (written by
`loomctx.memory._sync`, kept only if stored)."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace

from loomctx.memory._search import SUMMARY, TASK
from loomctx.memory.summarizers import ExtractiveSummarizer
from loomctx.memory.task import (
    ASSISTANT_MESSAGE,
    USER_MESSAGE,
    MemoryTier,
    Task,
    TaskSummary,
    importance_of,
    task_arguments,
    task_text,
)
from loomctx.messages import valid_text
from loomctx.stores.base import Namespace, Record
from loomctx.tokens import TokenCounter

__all__ = ["Tiers"]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Entry:
    """A task that is in L1, in L2, or waiting to be summarized. A value: a change replaces
    it in `_entries`, so that a copy of the dict is a snapshot of the tiers to roll back to."""

    task: Task
    importance: float
    order: int  # its place in the namespace's write order, for L1 order and neighbours
    l1: bool = False
    l2: bool = False
    pending: bool = False  # left L1/L2 without a place in L2: to be summarized

    @classmethod
    def of(cls, record: Record) -> _Entry:
        data = record.data
        return cls(
            task=Task.from_dict(data["task"]),
            importance=float(data["importance"]),
            order=int(data["order"]),
            l1=bool(data["l1"]),
            l2=bool(data["l2"]),
            pending=bool(data["pending"]),
        )


_Tiers = tuple[dict[str, _Entry], deque[str], list[str], deque[TaskSummary], int]


class Tiers:
    """The tiers (L1, L2, L3 and the tasks waiting to be summarized) and the planning of
    their changes; `LoomMemory` is one. A plan changes the tiers in place and returns the
    records to write: `loomctx.memory._sync.StoreSync._write` snapshots them first and rolls
    back if the write fails."""

    namespace: Namespace
    max_l1_size: int
    max_l2_size: int
    max_l3_size: int
    promote_threshold: float
    summary_tokens: int
    counter: TokenCounter
    _summarizer: ExtractiveSummarizer
    _entries: dict[str, _Entry]
    _l1: deque[str]
    _l2: list[str]
    _l3: deque[TaskSummary]
    _order: int

    def _snapshot(self) -> _Tiers:
        # Entries are values, so shallow copies are a full snapshot (microseconds at the
        # default sizes).
        return dict(self._entries), deque(self._l1), list(self._l2), deque(self._l3), self._order

    def _roll_back(self, saved: _Tiers) -> None:
        self._entries, self._l1, self._l2, self._l3, self._order = saved

    def _set(
        self,
        task_id: str,
        dirty: dict[str, _Entry],
        *,
        l1: bool | None = None,
        l2: bool | None = None,
        pending: bool | None = None,
    ) -> _Entry:
        """Replace the entry of `task_id` with the given flags changed; mark it to write."""
        old = self._entries[task_id]
        entry = replace(
            old,
            l1=old.l1 if l1 is None else l1,
            l2=old.l2 if l2 is None else l2,
            pending=old.pending if pending is None else pending,
        )
        self._entries[task_id] = dirty[task_id] = entry
        return entry

    def _plan_add(self, tasks: Sequence[Task], tier: MemoryTier) -> list[Record]:
        dirty: dict[str, _Entry] = {}
        summaries: list[TaskSummary] = []
        archived: list[Task] = []
        for task in tasks:
            old = self._entries.get(task.task_id)
            if old is not None:
                new = replace(old, task=task, importance=importance_of(task))
                self._entries[task.task_id] = dirty[task.task_id] = new
                if new.l2 and new.importance != old.importance:
                    # Keep L2 most important first, as a restore would order it.
                    self._l2.sort(key=lambda i: self._rank(self._entries[i]))
            elif tier is MemoryTier.L1 or tier is MemoryTier.L2:
                entry = _Entry(task=task, importance=importance_of(task), order=self._order)
                self._order += 1
                if tier is MemoryTier.L1:
                    self._push_l1(entry, dirty)
                else:
                    self._entries[task.task_id] = dirty[task.task_id] = entry
                    if not self._insert_l2(task.task_id, dirty):
                        self._set(task.task_id, dirty, pending=True)
            elif tier is MemoryTier.L3:
                summaries.append(self._summarize(task, importance_of(task)))
                archived.append(task)
            else:
                archived.append(task)
        self._archive_surplus(dirty)
        records = [self._task_record(e) for e in dirty.values()]
        records += [self._archive_record(t) for t in archived]
        records += self._push_l3(summaries)
        return records

    def _archive_surplus(self, dirty: dict[str, _Entry]) -> None:
        """Send the tasks waiting to be summarized beyond what L3 holds, oldest first, to
        the archive as they are: their summaries would leave L3 in the same promotion, and
        their tasks are searchable in L4 anyway. Only a bulk import gets here (a
        conversation promotes a task or two at a time); for 100k imported turns it is the
        difference between 500 summaries and 100k, and every task is written once."""
        pending = [e for e in self._entries.values() if e.pending]
        if len(pending) <= self.max_l3_size:
            return
        pending.sort(key=lambda e: e.order)
        for e in pending[: len(pending) - self.max_l3_size]:
            dirty[e.task.task_id] = replace(e, pending=False)
            del self._entries[e.task.task_id]

    def _plan_promotion(self) -> list[Record]:
        dirty: dict[str, _Entry] = {}
        for task_id in list(self._l1):
            entry = self._entries[task_id]
            if not entry.l2 and entry.importance > self.promote_threshold:
                self._insert_l2(task_id, dirty)
        pending = sorted((e for e in self._entries.values() if e.pending), key=lambda e: e.order)
        summaries = [self._summarize(e.task, e.importance) for e in pending]
        for e in pending:
            dirty[e.task.task_id] = replace(e, pending=False)  # summarized: out of the tiers
            del self._entries[e.task.task_id]
        records = [self._task_record(e) for e in dirty.values()]
        records += self._push_l3(summaries)
        return records

    def _push_l1(self, entry: _Entry, dirty: dict[str, _Entry]) -> None:
        task_id = entry.task.task_id
        self._entries[task_id] = dirty[task_id] = replace(entry, l1=True)
        self._l1.append(task_id)
        while len(self._l1) > self.max_l1_size:
            old = self._entries[self._l1.popleft()]
            # What promotion would have done had it run since this task came in: without it,
            # a bulk import left L2 empty and summarized every task.
            if not old.l2 and old.importance > self.promote_threshold:
                self._insert_l2(old.task.task_id, dirty)
                old = self._entries[old.task.task_id]
            self._set(old.task.task_id, dirty, l1=False, pending=old.pending or not old.l2)

    def _insert_l2(self, task_id: str, dirty: dict[str, _Entry]) -> bool:
        """Put the entry into L2 if there is room or it beats the least important; whatever
        it displaces becomes pending (if not in L1). Returns whether it got in."""
        entry = self._entries[task_id]
        if len(self._l2) >= self.max_l2_size:
            weakest = self._entries[self._l2[-1]]
            # Among equals the newer wins: otherwise L2 froze on its first tasks, since most
            # tasks of a kind score the same.
            if self._rank(entry) >= self._rank(weakest):
                return False
            self._l2.pop()
            self._set(
                weakest.task.task_id, dirty, l2=False, pending=weakest.pending or not weakest.l1
            )
        entry = self._set(task_id, dirty, l2=True)
        # Most important first; among equals, the newer first.
        pos = 0
        while pos < len(self._l2) and self._rank(self._entries[self._l2[pos]]) <= self._rank(entry):
            pos += 1
        self._l2.insert(pos, task_id)
        return True

    @staticmethod
    def _rank(entry: _Entry) -> tuple[float, int]:
        return (-entry.importance, -entry.order)

    def _push_l3(self, summaries: list[TaskSummary]) -> list[Record]:
        records = []
        for s in summaries:
            self._l3.append(s)
            records.append(self._summary_record(s, in_l3=True))
        while len(self._l3) > self.max_l3_size:
            records.append(self._summary_record(self._l3.popleft(), in_l3=False))
        return records

    def _summarize(self, task: Task, importance: float) -> TaskSummary:
        """Extractive: the action, the key parameters and the result, bounded in tokens.

        Total, like `task_text`: whatever the task holds (parameters that are a string, nest
        100k levels deep or hold surrogates; a result JSON cannot carry), the summary is
        valid text. It must be: a summary that raises, or that the store refuses, leaves its
        task pending, and every later promotion fails on it again.
        """
        message = task.action in (USER_MESSAGE, ASSISTANT_MESSAGE)
        params = ", ".join(
            f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in task_arguments(task).items()
        )
        data = task.to_dict()  # result and metadata made valid JSON data, whatever they hold
        if message:
            result = task_text(task)
        elif task.error:
            result = f"error: {task.error}"
        elif data["result"] is None:
            result = ""
        elif isinstance(data["result"], str):
            result = data["result"]
        else:
            result = json.dumps(data["result"], ensure_ascii=False)
        half = max(8, self.summary_tokens // 2)
        tags = data["metadata"].get("tags") if isinstance(data["metadata"], dict) else None
        return TaskSummary(
            task_id=task.task_id,
            action=valid_text(task.action),
            param_summary=""
            if message
            else self._summarizer.summarize_now(
                [valid_text(params)], max_tokens=half, counter=self.counter
            ),
            result_summary=self._summarizer.summarize_now(
                [valid_text(result)], max_tokens=half, counter=self.counter
            ).removeprefix("- "),
            tags=tuple(map(str, tags)) if isinstance(tags, list) else (),
            importance=importance,
            created_at=task.created_at,
        )

    def _task_record(self, entry: _Entry) -> Record:
        return Record(
            namespace=self.namespace,
            key=f"{TASK}:{entry.task.task_id}",
            kind=TASK,
            text=task_text(entry.task),
            data={
                "task_id": entry.task.task_id,
                "task": entry.task.to_dict(),
                "importance": entry.importance,
                "order": entry.order,
                "l1": entry.l1,
                "l2": entry.l2,
                "pending": entry.pending,
            },
        )

    def _archive_record(self, task: Task) -> Record:
        return self._task_record(_Entry(task=task, importance=importance_of(task), order=-1))

    def _summary_record(self, summary: TaskSummary, *, in_l3: bool) -> Record:
        return Record(
            namespace=self.namespace,
            key=f"{SUMMARY}:{summary.task_id}",
            kind=SUMMARY,
            text=summary.text,
            data={"task_id": summary.task_id, "summary": summary.to_dict(), "l3": in_l3},
        )

    def _rebuild(self, *, l1: bool = True, l2: bool = True) -> None:
        """L1 and L2 from `_entries`: L1 by order, L2 most important first."""
        if l1:
            held = sorted((e for e in self._entries.values() if e.l1), key=lambda e: e.order)
            self._l1 = deque(e.task.task_id for e in held)
        if l2:
            important = sorted((e for e in self._entries.values() if e.l2), key=self._rank)
            self._l2 = [e.task.task_id for e in important]

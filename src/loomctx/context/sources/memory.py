"""Memory sources: tiered memory (seeds 003, 004) offered to the context engine.

- `L1RecentSource`: the recent tasks of a session's memory, as real user / assistant / tool
  messages (tool calls with their results), in the history section, newest first.
- `L2ImportantSource`: the important tasks of L2 that are no longer in L1, as dynamic context.
- `L4SemanticSource`: tasks from the whole archive that match the query (lexical, and dense
  if the memory has an embedder), as dynamic context; tasks still in L1 are left to the
  history, so nothing appears twice.
- `InheritedSource`: a parent agent's memory, read-only: its important, recent and relevant
  tasks, each once (what a sub-agent inherits).
- `SharedPoolSource`: a memory several agents write to, read the same way, less the tasks of
  the agent being built for (`Task.metadata["agent"]` equal to `ctx.agent_id`): those are in
  its own memory already.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Final, TypeAlias, TypeVar

from loomctx.context.block import BuildContext, ContextBlock, TokenBudget, new_history_block
from loomctx.context.excerpt import (
    DEFAULT_EXCERPT_SHARE,
    MIN_EXCERPT_TOKENS,
    Excerpt,
    check_excerpt_tokens,
    fit_unit,
    handle_for,
)
from loomctx.context.sources._common import billed
from loomctx.errors import ConfigError, check_int
from loomctx.memory.core import LoomMemory
from loomctx.memory.task import (
    Task,
    importance_of,
    task_body,
    task_label,
    task_line,
    task_messages,
)
from loomctx.messages import Message
from loomctx.tokens import TokenCounter

__all__ = [
    "InheritedSource",
    "L1RecentSource",
    "L2ImportantSource",
    "L4SemanticSource",
    "SharedPoolSource",
]

_AGE_DECAY = 0.97
_WHOLE_CACHE: Final = 4096  # tasks' messages kept per source (L1 holds 50 per memory)
_SHOWN_CACHE: Final = 64  # excerpts kept per source; cutting one counts its text a few times

_Shown: TypeAlias = tuple[tuple[Message, ...], tuple[Excerpt, ...]]


class _MemorySource:
    """What every memory source holds: the memory it reads, its name and its priority."""

    def __init__(self, memory: LoomMemory, *, name: str, priority: float) -> None:
        if not isinstance(memory, LoomMemory):
            raise ConfigError(f"source `{name}` needs a LoomMemory, got {type(memory).__name__}")
        if not 0 <= priority <= 1:
            raise ConfigError(f"source `{name}`: `priority` must be in 0..1, got {priority!r}")
        self.memory = memory
        self.name = name
        self.priority = priority
        self._items = _Items()


_ITEM_CACHE: Final = 4096


_V = TypeVar("_V")


class _Items:
    """What `_text_blocks` works out of a task: its label, its line, both token counts, and
    its importance (`importance_of`, which L2 ranks by).

    Kept by task id while the task (a frozen object) is the same one, for one counter (a
    source's builds all count with their orchestrator's): a tier's tasks come back build
    after build, and labelling them again was a measurable share of every build
    (docs/benchmarks.md, "Design measurements")."""

    def __init__(self) -> None:
        self._counter: TokenCounter | None = None
        self._items: OrderedDict[str, tuple[Task, tuple[str, str, int, int]]] = OrderedDict()
        self._importance: OrderedDict[str, tuple[Task, float]] = OrderedDict()
        # `_text_blocks`' last block of each task, with the task and what else it was made of
        # (blocks are values: the same one may be offered again; cleared with the counts).
        self.blocks: OrderedDict[str, tuple[Task, tuple[str, float, object], ContextBlock]] = (
            OrderedDict()
        )

    def importance(self, task: Task) -> float:
        """`importance_of(task)`."""
        return _kept(self._importance, task, lambda: importance_of(task))

    def get(self, task: Task, counter: TokenCounter) -> tuple[str, str, int, int]:
        """``(label, text, tokens of text, tokens as the window shows it)``."""
        if counter is not self._counter:  # counts by another counter are not this one's
            self._items.clear()
            self.blocks.clear()
            self._counter = counter

        def work_out() -> tuple[str, str, int, int]:
            label, text = task_label(task), task_line(task)
            # `shown` as `render.item` shows it
            return label, text, counter.count(text), counter.count(f"[{label}] {text}")

        return _kept(self._items, task, work_out)


def _kept(cache: OrderedDict[str, tuple[Task, _V]], task: Task, work_out: Callable[[], _V]) -> _V:
    """`work_out()` for `task`, from `cache` while it holds this very task object (a task
    recorded again under its id is worked out anew); the oldest entries leave past
    `_ITEM_CACHE`."""
    hit = cache.get(task.task_id)
    if hit is not None and hit[0] is task:
        return hit[1]
    value = work_out()
    cache[task.task_id] = (task, value)
    if len(cache) > _ITEM_CACHE:
        cache.popitem(last=False)
    return value


def _text_blocks(
    source: str,
    tasks: Iterable[tuple[Task, float, dict[str, object]]],
    budget: TokenBudget,
    ctx: BuildContext,
    items: _Items,
) -> list[ContextBlock]:
    """One truncatable context block per task, best first, within the ceiling.

    Each is labelled in the window with when it was said and the dates its time words name
    (`task_label`), never with its id: a 32-character task id means nothing to the model and
    costs 21 tokens an item, while the date lets it place "yesterday" in a remembered turn.
    The id stays in the block's id and metadata, and so in the report."""
    blocks: list[ContextBlock] = []
    room = budget.ceiling
    for task, priority, meta in tasks:
        label, text, tokens, shown = items.get(task, ctx.counter)
        if shown > room:
            continue
        room -= shown
        priority = max(0.01, min(1.0, priority))
        # The block of the last build, if it is this one again (L2's are, build after build).
        last = items.blocks.get(task.task_id)
        if last is not None and last[0] is task and last[1] == (source, priority, meta):
            blocks.append(last[2])
            continue
        block = ContextBlock(
            source=source,
            section="context",
            id=f"{source}:{task.task_id}",
            content=text,
            token_count=tokens,
            priority=priority,
            truncatable=True,
            metadata={"task_id": task.task_id, "label": label, **meta},
        )
        items.blocks[task.task_id] = (task, (source, priority, meta), block)
        if len(items.blocks) > _ITEM_CACHE:
            items.blocks.popitem(last=False)
        blocks.append(block)
    return blocks


class L1RecentSource(_MemorySource):
    """The recent tasks of `memory` as history messages, newest first within the ceiling.

    `depth` is how many of the conversation's newest tasks it offers at most: by default L1's
    size (what the memory holds in memory); more reads the tasks that left L1 from the store
    (`LoomMemory.recent_tasks`), so that history fills the room its budget gives it rather
    than L1's. Each block's id names its task (``L1_recent:<task id>``), so the compactor's
    history mark stays on the same task while the history moves on; ``metadata["capacity"]``
    is the depth, so a compaction leaves room to grow before the mark's task leaves it.

    One large task cannot push the others out: a task whose messages take more than
    `max_item_tokens` (default: `DEFAULT_EXCERPT_SHARE` of the input budget, the ceiling) is
    shown with its text (a tool's result, or a message) cut to a head and a tail around a
    marker naming the handle its whole text is read by (``r-<task id>``; see
    `loomctx.context.excerpt`); `read_tool` names the tool that reads it, if the model has
    one. The block says so in ``metadata["excerpts"]``. The excerpt is the same on every
    build, so history that holds it stays a cacheable prefix.

    History stays contiguous: the first task that does not fit what is left of the ceiling
    ends it. A task too large even with its text cut (its call's arguments alone, say) is
    offered all the same, as the oldest block and beyond the ceiling, with the reason in
    ``metadata["oversized"]``, so that the report shows it, and its size, dropped: older
    turns never vanish without a trace.
    """

    def __init__(
        self,
        memory: LoomMemory,
        *,
        name: str = "L1_recent",
        priority: float = 0.85,
        max_item_tokens: int | None = None,
        read_tool: str | None = None,
        depth: int | None = None,
    ) -> None:
        super().__init__(memory, name=name, priority=priority)
        self.max_item_tokens = check_excerpt_tokens(
            max_item_tokens, f"source `{name}`: `max_item_tokens`"
        )
        self.read_tool = read_tool
        self.depth = check_int(depth, f"source `{name}`: `depth`", minimum=1, none="no limit")
        # Each task's messages and their cost, by task object (tasks are frozen; the memory
        # hands over the same objects build after build, holding one keeps its id unique): a
        # build repeats them, and the same tuple lets the orchestrator's cost cache hit too.
        self._whole: OrderedDict[tuple[int, str], tuple[Task, tuple[Message, ...], int]] = (
            OrderedDict()
        )
        # Excerpts already cut, by task, version and allowance.
        self._shown: OrderedDict[tuple[str, str, int, str], _Shown] = OrderedDict()
        # The last block of each task, with the task and what else it was made of.
        self._blocks: OrderedDict[
            str, tuple[Task, tuple[object, ...], ContextBlock, tuple[object, ...]]
        ] = OrderedDict()

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> list[ContextBlock]:
        """Whole tasks (a tool call with its result is one unit), newest first. Tasks of the
        agent run being built for (`ctx.metadata["run_id"]`) are left out: the user turn and
        the run's own exchange have sources of their own."""
        run_id = ctx.metadata.get("run_id")
        depth = self.depth or self.memory.max_l1_size
        tasks = self._recent()
        if run_id is not None:
            tasks = [t for t in tasks if t.metadata.get("run_id") != run_id]
        limit = self.max_item_tokens or int(budget.ceiling * DEFAULT_EXCERPT_SHARE)
        cap = min(budget.ceiling, max(MIN_EXCERPT_TOKENS, limit))
        blocks: list[ContextBlock] = []
        room = budget.ceiling
        counter_name = ctx.counter.name  # (a property that formats its string)
        for age in range(len(tasks)):
            seq = len(tasks) - 1 - age
            task = tasks[seq]
            # The block of the last build, when it was made of this very task for the same
            # place, allowance and counter (the usual case: history moves on by a unit or
            # two a call), goes in again without being worked out anew.
            shape = (seq, age, cap, depth, counter_name)
            last = self._blocks.get(task.task_id)
            if last is not None and last[0] is task and last[3] == shape:
                tokens = last[2].token_count
                if tokens <= room and "oversized" not in last[2].metadata:
                    room -= tokens
                    blocks.append(last[2])
                    continue
            if last is not None and last[0] is task and last[3][2:] == shape[2:]:
                # The same unit at another place (the conversation moved on): its messages,
                # cost and excerpts are what they were.
                messages, tokens = last[2].messages, last[2].token_count
                shown = last[2].metadata.get("excerpts")
            else:
                messages, excerpts, tokens = self._unit(task, cap, ctx.counter)
                shown = tuple(e.to_dict() for e in excerpts) if excerpts else None
            meta: dict[str, object] = {
                "task_id": task.task_id,
                "age": age,
                "capacity": depth,
            }
            if shown:
                meta["excerpts"] = shown
            oversized = tokens > room and tokens > cap
            if oversized:
                # Larger than one item may be even when cut (its call's arguments alone,
                # say): it ends the history here (history stays contiguous), and it is
                # offered all the same so that the report shows it, and its size, dropped.
                meta["oversized"] = (
                    f"needs {tokens} tokens even with its text cut, more than the "
                    f"{room} left of the source's ceiling; older tasks are not offered"
                )
            elif tokens > room:
                break
            room -= tokens
            made = (self.name, messages, tokens, seq, meta)
            if last is not None and last[0] is task and last[1] == made:
                block = last[2]  # the same as the last build's (a value: offered again)
            else:
                block = new_history_block(
                    source=self.name,
                    messages=messages,
                    token_count=tokens,
                    priority=max(0.01, _AGE_DECAY**age),
                    sequence=seq,
                    id=f"{self.name}:{task.task_id}",
                    metadata=meta,
                )
            self._blocks[task.task_id] = (task, made, block, shape)
            if len(self._blocks) > _WHOLE_CACHE:
                self._blocks.popitem(last=False)
            blocks.append(block)
            if oversized:
                break
        return blocks

    def held(self, ctx: BuildContext) -> set[str]:
        """The ids of the tasks this history holds in the session's window: those from where
        its kept history starts (``ctx.history_start``) to the newest. The dynamic tail
        leaves them out: they are in the window already (`L2ImportantSource(held=...)`)."""
        tasks = self._recent()
        start = ctx.history_start.get(self.name, 0)
        return {t.task_id for t in tasks[max(0, min(start, len(tasks))) :]}

    def _recent(self) -> list[Task]:
        """The newest tasks of the conversation, as deep as `depth`, oldest first."""
        depth = self.depth or self.memory.max_l1_size
        if depth > self.memory.max_l1_size:
            return self.memory.recent_tasks(depth)
        return self.memory.get_l1_tasks(limit=depth)

    def _unit(
        self, task: Task, cap: int, counter: TokenCounter
    ) -> tuple[tuple[Message, ...], tuple[Excerpt, ...], int]:
        """The task's messages within `cap` tokens, what of them is an excerpt, and their
        cost."""
        whole_key = (id(task), counter.name)
        whole = self._whole.get(whole_key)
        if whole is None or whole[0] is not task:
            messages = task_messages(task)
            whole = self._whole[whole_key] = (task, messages, billed(counter, messages))
            if len(self._whole) > _WHOLE_CACHE:
                self._whole.popitem(last=False)
        else:
            self._whole.move_to_end(whole_key)
        if whole[2] <= cap:
            return whole[1], (), whole[2]
        key = (task.task_id, task.updated_at.isoformat(), cap, counter.name)
        shown = self._shown.get(key)
        if shown is None:
            handle = handle_for(task.task_id)
            shown = fit_unit(
                {handle: task_body(task)},
                lambda texts: task_messages(task, body=texts[handle]),
                cap,
                counter=counter,
                read_tool=self.read_tool,
            )
            self._shown[key] = shown
            if len(self._shown) > _SHOWN_CACHE:
                self._shown.popitem(last=False)
        return shown[0], shown[1], billed(counter, shown[0])


class L2ImportantSource(_MemorySource):
    """The important tasks of `memory` that are not in the window's history, most important
    first. `held` says which tasks the history holds in a build's window (an
    `L1RecentSource`'s `held`); by default, those of L1."""

    def __init__(
        self,
        memory: LoomMemory,
        *,
        name: str = "L2_important",
        priority: float = 0.7,
        held: Callable[[BuildContext], set[str]] | None = None,
    ) -> None:
        super().__init__(memory, name=name, priority=priority)
        self.held = held

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> list[ContextBlock]:
        """L2 tasks not in the history (those are in the window already): the tail holds
        only what the window lacks, and claims no room for the rest."""
        if self.held is not None:
            recent = self.held(ctx)
        else:
            recent = {t.task_id for t in self.memory.get_l1_tasks(limit=self.memory.max_l1_size)}
        entries: list[tuple[Task, float, dict[str, object]]] = [
            (t, self._items.importance(t), {})
            for t in self.memory.get_l2_tasks()
            if t.task_id not in recent
        ]
        return _text_blocks(self.name, entries, budget, ctx, self._items)


class L4SemanticSource(_MemorySource):
    """Tasks from the archive of `memory` that match the query, best first."""

    def __init__(
        self,
        memory: LoomMemory,
        *,
        name: str = "L4_semantic",
        priority: float = 0.6,
        limit: int = 10,
        exclude_recent: bool = True,
    ) -> None:
        super().__init__(memory, name=name, priority=priority)
        if limit < 1:
            raise ConfigError(f"source `{name}`: `limit` must be >= 1, got {limit!r}")
        self.limit = limit
        self.exclude_recent = exclude_recent

    @property
    def unembedded(self) -> int:
        """Records of the memory that search finds by their words only, for want of a vector
        yet (`LoomMemory.unembedded`; the build's `SourceReport` carries it)."""
        return self.memory.unembedded

    @property
    def unembedded_by(self) -> dict[str, int]:
        """Records of the memory without a vector yet, per embedding model
        (`LoomMemory.unembedded_by`: with a fast embedder, the report says how many have
        its vector only)."""
        return self.memory.unembedded_by

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> list[ContextBlock]:
        """Search hits as context blocks; priority is the score relative to the best hit."""
        exclude: set[str] = set()
        if self.exclude_recent:
            exclude = {t.task_id for t in self.memory.get_l1_tasks(self.memory.max_l1_size)}
        hits = self.memory.search(query, limit=self.limit, exclude=exclude)
        if not hits:
            return []
        best = hits[0].score
        return _text_blocks(
            self.name,
            ((h.task, h.score / best, {"score": h.score, "via": list(h.via)}) for h in hits),
            budget,
            ctx,
            self._items,
        )


class _ReadOnlyMemorySource(_MemorySource):
    """Another memory's important, recent and relevant tasks, each once, read-only."""

    def __init__(
        self,
        memory: LoomMemory,
        *,
        name: str,
        priority: float,
        recent: int,
        relevant: int,
        skip_own: bool = False,
    ) -> None:
        super().__init__(memory, name=name, priority=priority)
        self.recent = recent
        self.relevant = relevant
        self.skip_own = skip_own

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> list[ContextBlock]:
        """Relevant tasks first (by search rank), then important ones, then recent ones."""
        seen: set[str] = set()
        ranked: list[tuple[Task, float, dict[str, object]]] = []
        own = ctx.agent_id if self.skip_own else None

        def others(tasks: Iterable[Task]) -> list[Task]:
            return [t for t in tasks if own is None or t.metadata.get("agent") != own]

        def add(tasks: Iterable[Task], top: float, kind: str) -> None:
            for i, task in enumerate(tasks):
                if task.task_id not in seen:
                    seen.add(task.task_id)
                    ranked.append((task, top * 0.97**i, {"from": kind}))

        # Left-out tasks must not take the places of others: ask for more, then cut.
        extra = 2 if own is not None else 1
        relevant = others(self.memory.search_tasks(query, limit=self.relevant * extra))
        recent = others(self.memory.get_l1_tasks(limit=self.memory.max_l1_size))
        add(relevant[: self.relevant], 1.0, "relevant")
        add(others(self.memory.get_l2_tasks()), 0.7, "important")
        add(reversed(recent[max(0, len(recent) - self.recent) :]), 0.5, "recent")
        return _text_blocks(self.name, ranked, budget, ctx, self._items)


class InheritedSource(_ReadOnlyMemorySource):
    """A parent agent's memory, read-only, for a sub-agent's window (seed 003)."""

    def __init__(
        self,
        parent: LoomMemory,
        *,
        name: str = "inherited",
        priority: float = 0.65,
        recent: int = 3,
        relevant: int = 5,
    ) -> None:
        super().__init__(parent, name=name, priority=priority, recent=recent, relevant=relevant)


class SharedPoolSource(_ReadOnlyMemorySource):
    """A memory shared by several agents (each adds its tasks to it), read for the query;
    the tasks of the agent it builds for (`ctx.agent_id`) are left out."""

    def __init__(
        self,
        pool: LoomMemory,
        *,
        name: str = "shared_pool",
        priority: float = 0.6,
        recent: int = 5,
        relevant: int = 5,
    ) -> None:
        super().__init__(
            pool, name=name, priority=priority, recent=recent, relevant=relevant, skip_own=True
        )

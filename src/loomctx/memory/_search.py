"""`LoomMemory.search`: the archive's tasks for a query, the lexical and dense rankings fused
over arrays (`loomctx.search`), only the winners decoded.

Each hit is mapped to a row of a table of the tasks found (a summary counts for the task it
summarizes), by what ranking reads of its record (`_HitInfo`, worked out once per record
version); fusion, neighbours, time and the pick of the best run on per-row numpy arrays.
The maths is `LoomMemory.search`'s docstring.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Final, Literal, Protocol

import numpy as np
import numpy.typing as npt

from loomctx.memory.task import ASSISTANT_MESSAGE, USER_MESSAGE, Task
from loomctx.memory.timeref import TimeSpan, asks_when, spans_of, time_spans
from loomctx.search import (
    Ranking,
    best_first,
    first_scores,
    min_max,
    neighbour_boost,
    relative,
    weighted,
)
from loomctx.stores.base import Get, Hit, MemoryStore, Namespace, Record, Search, VectorSearch

if TYPE_CHECKING:
    from loomctx.embeddings import Embedder

__all__ = ["SUMMARY", "TASK", "MemoryHit", "MemorySearch", "SearchSettings"]

TASK: Final = "task"
SUMMARY: Final = "summary"
_DECODED_CACHE: Final = 4096  # tasks decoded from search hits, kept per memory
_HIT_INFO_CACHE: Final = 65_536  # what ranking reads of a found record (~100 bytes each)
_PLACE: Final = 1 << 40  # a namespace's span of places: orders stay far below it

_Key = tuple[tuple[str, ...], str]  # (namespace, task id)
_UNREAD: Final = object()  # a record's time that `_time_match` must read itself
_HitInfo = tuple[str, int, bool, object, _Key | None, tuple[TimeSpan, ...], int, int]
# (the 4th: datetime | None | _UNREAD)
"""What search's ranking reads of a found record: the task it stands for ("" for a record
that is not one of a memory's), its place in the write order (a task record's; -1 for others
and for tasks added straight to L3/L4), whether it asks something (`_asks`), when its
task was recorded (None: it does not say; `_UNREAD`: its data is not as expected), the
key search ranks its task by (None if it stands for no task), the times the task
names (`TIME_REFS`), that key's number in this memory's search (-1 for None) and the
record's kind (`_OTHER`, `_TASK_KIND`, `_SUMMARY_KIND`), made once per record version
rather than once per hit."""
_OTHER, _TASK_KIND, _SUMMARY_KIND = 0, 1, 2
_NUMBERED: Final = 262_144  # task keys numbered before the numbering starts again
_BY_OBJECT: Final = 16_384  # found records whose `_HitInfo` is kept by the object itself
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
    changes on every write, so it names the version). The same records come back search
    after search: reading their data, and decoding their tasks, was most of a search's own
    time. `exact`: the memory searches its namespace only (not a wider `search_scope`)."""

    def __init__(self, store: MemoryStore, *, exact: bool) -> None:
        self.store = store
        self.exact = exact
        self._lock = threading.Lock()
        self._decoded: OrderedDict[tuple[Namespace, str, int], Task] = OrderedDict()
        self._infos: OrderedDict[tuple[Namespace, str, int], _HitInfo] = OrderedDict()
        self._numbers: dict[_Key, int] = {}  # each task key found, numbered
        self._generation = 0  # how many times the numbering started again
        # The `_HitInfo` of the record objects found lately: the store hands back the same
        # objects search after search (`SQLiteStore`'s record cache), and a lookup by the
        # object is cheaper than by its version.
        self._by_object: dict[int, tuple[Record, _HitInfo]] = {}

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
        # Lazy: ranking reads a record's data once per version (`_hit_info`), and the
        # tasks of only the best `limit` records are decoded (`_decode`).
        ops: list[Search | VectorSearch] = [
            Search(prefix=scope, query=query, limit=wanted, exact=exact, lazy=True)
        ]
        rankers = ["lexical"]
        for how, embedder in (("dense", settings.embedder), ("fast", settings.fast_embedder)):
            if embedder is None or (how == "fast" and not settings.fast_weight):
                continue
            rankers.append(how)
            ops.append(
                VectorSearch(
                    prefix=scope,
                    vector=embedder.embed([query], kind="query")[0],
                    model=embedder.name,
                    limit=wanted,
                    exact=exact,
                    lazy=True,
                )
            )
        results: list[list[Hit]] = self.store.batch(ops)
        if len(self._numbers) > _NUMBERED:
            with self._lock:
                self._numbers.clear()
                self._infos.clear()
                self._by_object.clear()
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
        n = len(table.keys)
        via = np.zeros(n, dtype=np.int64)
        parts: dict[str, npt.NDArray[np.float64]] = {}
        raw: dict[str, npt.NDArray[np.float64]] = {}
        for how, (r, summary) in zip(rankers, found, strict=True):
            rescaled = relative(r, flat=1.0) if how == "lexical" else min_max(r)
            parts[how] = first_scores(r.rows, rescaled, n)
            if how != "lexical":
                raw[how] = first_scores(r.rows, r.scores, n)
            bits = np.where(summary, _SUMMARY, _LEXICAL if how == "lexical" else _DENSE)
            np.bitwise_or.at(via, r.rows, bits)
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
        shapes = table.shapes
        places = np.fromiter((s[1] for s in shapes), dtype=np.int64, count=n)
        if not exact:  # neighbours within a namespace: each namespace its own span
            spaces: dict[Namespace, int] = {}
            space = np.fromiter(
                (spaces.setdefault(k[0], len(spaces)) for k in table.keys), np.int64, n
            )
            places = np.where(places >= 0, places + space * _PLACE, places)
        asks = np.fromiter((s[2] for s in shapes), dtype=np.bool_, count=n)
        scores = neighbour_boost(
            fused,
            places,
            asks,
            neighbour_weight=settings.neighbour_weight,
            answer_weight=settings.answer_weight,
        )
        closeness = self._time_match(settings, query, table.records, shapes)
        if closeness:
            rows = np.fromiter(closeness, dtype=np.intp, count=len(closeness))
            match = np.fromiter(closeness.values(), dtype=np.float64, count=len(closeness))
            scores[rows] *= 1 - settings.time_decay * (1 - match)
        if settings.date_weight and asks_when(query):
            # Kept in 0..1: a dated turn keeps its score, the others lose a share of it.
            dated = np.fromiter((bool(s[5]) for s in shapes), dtype=np.bool_, count=n)
            scores = np.where(dated, scores, scores * (1 / (1 + settings.date_weight)))
        best = best_first(scores, limit, table.keys)
        tasks = self._load_tasks([table.records[i] for i in best])
        lexical = parts["lexical"]
        cosine = raw.get("dense", absent)
        fast_cosine = raw.get("fast", absent)
        out = []
        for i, task in zip(best, tasks, strict=True):
            lex, cos, fast = float(lexical[i]), float(cosine[i]), float(fast_cosine[i])
            out.append(
                MemoryHit(
                    task=task,
                    score=float(scores[i]),
                    via=_VIA[int(via[i])],  # type: ignore[arg-type]
                    lexical_score=None if lex != lex else lex,
                    vector_score=cos if cos == cos else None if fast != fast else fast,
                    time_match=closeness.get(i),
                )
            )
        return out

    def _table(self, results: Sequence[Sequence[Hit]], skip: set[str]) -> _Table | None:
        """The rows of the tasks `results` found (hits of no task, or of a task in `skip`,
        are left out, but still count in their ranking's rescaling); None if none."""
        by_object, info_of = self._by_object, self._info
        records: list[Record] = []
        infos: list[_HitInfo] = []
        ranker: list[int] = []
        scores: list[float] = []
        every: list[list[float]] = []
        for r, hits in enumerate(results):
            every.append([h.score for h in hits])
            for hit in hits:
                rec = hit.record
                known = by_object.get(id(rec))
                info = known[1] if known is not None and known[0] is rec else info_of(rec)
                if known is None or known[0] is not rec:
                    by_object[id(rec)] = (rec, info)
                records.append(rec)
                infos.append(info)
            ranker += [r] * len(hits)
            scores += every[-1]
        if len(by_object) > _BY_OBJECT:
            by_object.clear()
        total = len(infos)
        numbers = np.fromiter((i[6] for i in infos), dtype=np.intp, count=total)
        keep = numbers >= 0
        if skip:
            keep &= ~np.fromiter((i[0] in skip for i in infos), dtype=np.bool_, count=total)
        kept = np.flatnonzero(keep)
        if not kept.size:
            return None
        kinds = np.fromiter((i[7] for i in infos), dtype=np.int8, count=total)[kept]
        unique, rows = np.unique(numbers[kept], return_inverse=True)
        # Each row's record: its first task record if a hit was one, else its first hit's.
        pick = np.lexsort((np.arange(kept.size), kinds != _TASK_KIND, rows))
        first = pick[np.r_[True, rows[pick][1:] != rows[pick][:-1]]]
        chosen = kept[first].tolist()
        by_ranker = np.asarray(ranker, dtype=np.intp)[kept]
        raw = np.asarray(scores, dtype=np.float64)[kept]
        found = []
        for r in range(len(results)):
            mine = by_ranker == r
            found.append(
                (
                    Ranking(
                        rows=rows[mine],
                        scores=raw[mine],
                        every=np.asarray(every[r], dtype=np.float64),
                    ),
                    kinds[mine] == _SUMMARY_KIND,
                )
            )
        del unique
        return _Table(
            keys=[infos[j][4] for j in chosen],
            records=[records[j] for j in chosen],
            shapes=[infos[j] for j in chosen],
            found=found,
        )

    def _info(self, record: Record) -> _HitInfo:
        """What ranking reads of a found record (`_HitInfo`), worked out once per version."""
        key = (record.namespace, record.key, record.seq)
        info = self._infos.get(key)
        if info is None:
            data = record.data
            task_id = str(data.get("task_id", ""))
            order = int(data.get("order", -1)) if record.kind == TASK and task_id else -1
            when: object
            try:
                fields = data.get("task") or data.get("summary") or {}
                stamp = fields.get("created_at")
                when = datetime.fromisoformat(stamp) if isinstance(stamp, str) else None
            except Exception:  # `_time_match` reads it again, and raises where it did
                when = _UNREAD
            ranked_as = (record.namespace, task_id) if task_id else None
            task = data.get("task")
            dated = spans_of(task.get("metadata")) if isinstance(task, Mapping) else ()
            kind = record.kind
            with self._lock:
                number = (
                    -1
                    if ranked_as is None
                    else self._numbers.setdefault(ranked_as, len(self._numbers))
                )
                info = (
                    task_id,
                    order,
                    _asks(record),
                    when,
                    ranked_as,
                    dated,
                    number,
                    _TASK_KIND if kind == TASK else _SUMMARY_KIND if kind == SUMMARY else _OTHER,
                )
                self._infos[key] = info
                if len(self._infos) > _HIT_INFO_CACHE:
                    self._infos.popitem(last=False)
        return info

    @staticmethod
    def _time_match(
        settings: SearchSettings,
        query: str,
        records: Sequence[Record],
        shapes: Sequence[_HitInfo],
    ) -> dict[int, float]:
        """How close each found task was recorded to the time the query names ("5 days ago",
        "上周"; `loomctx.memory.timeref`), 0..1, relative to `clock()`, by row; {} when the
        query names no time, or when no found task is close to it (the phrase is then about
        something else than when things were recorded here: a story's "last year")."""
        if not settings.time_decay:
            return {}
        spans = time_spans(query, settings.clock())
        if not spans:
            return {}
        out: dict[int, float] = {}
        for i, rec in enumerate(records):
            when = shapes[i][3]
            if when is _UNREAD:
                fields = rec.data.get("task") or rec.data.get("summary") or {}
                stamp = fields.get("created_at")
                when = datetime.fromisoformat(stamp) if isinstance(stamp, str) else None
            if isinstance(when, datetime):
                out[i] = max(span.proximity(when) for span in spans)
            for named in shapes[i][5]:  # what the turn speaks of, as against when it was said
                out[i] = max(out.get(i, 0.0), *(span.meets(named) for span in spans))
        return out if any(out.values()) else {}

    def _load_tasks(self, records: Sequence[Record]) -> list[Task]:
        """Tasks for task records, and for summary records the task they summarize."""
        need = [(i, r) for i, r in enumerate(records) if r.kind != TASK]
        if not need:  # (an empty batch is still a transaction)
            return [self._decode(r) for r in records]
        loaded = self.store.batch(
            [Get(namespace=r.namespace, key=f"{TASK}:{r.data['task_id']}") for _, r in need]
        )
        out = list(records)
        for (i, _), rec in zip(need, loaded, strict=True):
            if rec is not None:
                out[i] = rec
        return [self._decode(r) for r in out]

    def _decode(self, record: Record) -> Task:
        """The task of a task record, decoded once per version."""
        key = (record.namespace, record.key, record.seq)
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
    """The tasks found, one row each: the key each is ranked by, its record (the task's own
    if a hit was one, else the first summary found) and what ranking reads of that record;
    and each ranker's hits as a `Ranking` over the rows, with which hits were summaries."""

    keys: list[_Key]
    records: list[Record]
    shapes: list[_HitInfo]
    found: list[tuple[Ranking, npt.NDArray[np.bool_]]]


def _asks(record: Record) -> bool:
    """Whether a stored message asks something: a task record of a user or assistant message
    with a question mark in it (a tool call's arguments or result are not a question)."""
    if record.kind != TASK or "?" not in record.text:
        return False
    task = record.data.get("task")
    return isinstance(task, Mapping) and task.get("action") in (USER_MESSAGE, ASSISTANT_MESSAGE)

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
    ranking,
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
_HitInfo = tuple[str, int, bool, object, _Key | None, tuple[TimeSpan, ...]]
# (the 4th: datetime | None | _UNREAD)
"""What search's ranking reads of a found record: the task it stands for ("" for a record
that is not one of a memory's), its place in the write order (a task record's; -1 for others
and for tasks added straight to L3/L4), whether it asks something (`_asks`), when its
task was recorded (None: it does not say; `_UNREAD`: its data is not as expected), the
key search ranks its task by (None if it stands for no task), and the times the task
names (`TIME_REFS`), made once per record version rather than once per hit."""
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
        table = _Table()
        found = [table.add(hits, skip, self._info) for hits in results]
        n = len(table.keys)
        if not n:
            return []
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
            info = (task_id, order, _asks(record), when, ranked_as, dated)
            with self._lock:
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


class _Table:
    """The tasks found, one row each in order of first finding: the key it is ranked by,
    its record (the task's own once a hit is one, else the first summary found) and what
    ranking reads of that record."""

    __slots__ = ("index", "keys", "records", "shapes")

    def __init__(self) -> None:
        self.index: dict[_Key, int] = {}
        self.keys: list[_Key] = []
        self.records: list[Record] = []
        self.shapes: list[_HitInfo] = []

    def add(
        self, hits: Sequence[Hit], skip: set[str], info_of: Callable[[Record], _HitInfo]
    ) -> tuple[Ranking, npt.NDArray[np.bool_]]:
        """One ranker's hits as a `Ranking` over the table's rows (hits of no task, or of a
        task in `skip`, left out but still counted in its rescaling), and which were of
        summaries."""
        index, keys, records, shapes = self.index, self.keys, self.records, self.shapes
        rows: list[int] = []
        scores: list[float] = []
        summary: list[bool] = []
        for hit in hits:
            rec = hit.record
            info = info_of(rec)
            key = info[4]
            if key is None or (skip and key[1] in skip):
                continue
            row = index.get(key)
            kind = rec.kind
            if row is None:
                row = index[key] = len(keys)
                keys.append(key)
                records.append(rec)
                shapes.append(info)
            elif kind == TASK:
                records[row] = rec
                shapes[row] = info
            rows.append(row)
            scores.append(hit.score)
            summary.append(kind == SUMMARY)
        r = ranking(rows, scores, [h.score for h in hits])
        return r, np.asarray(summary, dtype=np.bool_)


def _asks(record: Record) -> bool:
    """Whether a stored message asks something: a task record of a user or assistant message
    with a question mark in it (a tool call's arguments or result are not a question)."""
    if record.kind != TASK or "?" not in record.text:
        return False
    task = record.data.get("task")
    return isinstance(task, Mapping) and task.get("action") in (USER_MESSAGE, ASSISTANT_MESSAGE)

"""Retrieval quality on LoCoMo and LongMemEval_S, measured against gold evidence (no LLM).

The functions behind ``loomctx bench locomo PATH`` and ``loomctx bench longmemeval PATH``
(BENCHMARKS.md section 1). Each returns a JSON-ready dict whose top-level metric keys are fixed:

- `evaluate_locomo`: ``r@5``, ``r@10``, ``r@20``, ``ndcg@10``, ``window@<B>`` per budget, plus
  ``by_category`` (``{"1": {...}, ...}``), ``excluding_category_5``, ``questions``.
- `evaluate_longmemeval`: ``recall_any@5``, ``recall_all@5``, ``recall_all@10``, ``ndcg@10``,
  plus ``by_question_type`` and ``questions`` (non-abstention questions only).

The ranking measured is the whole retrieval pipeline, `UnifiedRetrievalSource.candidates`
(recall from `LoomMemory.search`, `QueryRewriter`, `Reranker`). With ``stages=True`` both also
report ``stages``, the same ranking metrics for each step: ``lexical`` (`LoomMemory` without an
embedder), ``dense`` (the store's vector search alone), ``fused`` (`LoomMemory.search` with the
embedder), ``+rewriter`` (the rewritten query's extra recall, ranked by recall relevance) and
``+reranker`` (the whole pipeline, the same as the top-level numbers).

Every metric is a fraction in 0..1. How the data become memory:

- LoCoMo: each conversation is its own `LoomMemory`; each turn is a Task with
  ``task_id = dia_id`` (``"D1:3"``), `speaker_a`'s turns as `USER_MESSAGE` and `speaker_b`'s as
  `ASSISTANT_MESSAGE`, ``parameters = {"content", "speaker", "session_date"}``. The searchable
  text is ``"Speaker: text"`` (`task_text`; with ``" and shared <blip_caption>."`` for shared
  images, as the LoCoMo paper's own retrieval code does); the session date is not in it unless
  `date_in_text` (then ``"[date] text"``).
- R@k: per question, the fraction of its gold turns in the top k of the ranking (20 deep),
  averaged over questions (macro). nDCG@10: binary relevance. Questions without evidence are
  skipped (counted in ``skipped``); evidence ids not in the conversation stay gold.
- Evidence-in-window @ B: the window `ContextOrchestrator` builds with `L1RecentSource`,
  `UnifiedRetrievalSource` and `UserInputSource` (the question) at an input budget of exactly
  B tokens; a gold turn counts when its text is inside a kept block. The share is over all
  gold turns (micro), per category too.
- LongMemEval: each question's haystack is its own `LoomMemory` (turns as Tasks, user /
  assistant by role); sessions are ranked by their *best* turn (the first session to appear
  in the turn ranking, `turn_limit` deep, ranks first).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from loomctx.errors import ConfigError
from loomctx.memory.core import TASK, LoomMemory
from loomctx.memory.settings import MemoryEmbedding, MemoryRanking
from loomctx.memory.task import ASSISTANT_MESSAGE, USER_MESSAGE, Task
from loomctx.retrieval.settings import RetrievalSettings
from loomctx.stores.base import Hit, VectorSearch

if TYPE_CHECKING:
    from loomctx.context.compactor import CachePolicy
    from loomctx.embeddings import Embedder

__all__ = [
    "LocomoConversation",
    "LocomoQuestion",
    "LocomoTurn",
    "LongMemEvalQuestion",
    "evaluate_locomo",
    "evaluate_longmemeval",
    "load_locomo",
    "load_longmemeval",
    "locomo_date",
    "ndcg_at",
    "recall_at",
]

LOCOMO_KS: Final = (5, 10, 20)
MAIN_STAGE: Final = "+reranker"  # the whole pipeline, as `UnifiedRetrievalSource` runs it
STAGES: Final = ("lexical", "dense", "fused", "+rewriter", "+reranker")
Progress = Callable[[str], None]


# --- loading ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LocomoTurn:
    dia_id: str
    speaker: str
    text: str  # with the image caption, if any
    session: int
    date: str


@dataclass(frozen=True, slots=True)
class LocomoQuestion:
    question: str
    evidence: tuple[str, ...]
    category: int


@dataclass(frozen=True, slots=True)
class LocomoConversation:
    sample_id: str
    speakers: tuple[str, str]
    turns: tuple[LocomoTurn, ...]
    questions: tuple[LocomoQuestion, ...]


@dataclass(frozen=True, slots=True)
class LongMemEvalQuestion:
    question_id: str
    question_type: str
    question: str
    session_ids: tuple[str, ...]
    sessions: tuple[tuple[tuple[str, str], ...], ...]  # per session: (role, content) turns
    answer_session_ids: tuple[str, ...]
    session_dates: tuple[datetime | None, ...] = ()  # when each session took place
    question_date: datetime | None = None  # when the question is asked

    @property
    def abstention(self) -> bool:
        return "_abs" in self.question_id


def _read_json(path: str | Path) -> Any:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{str(p)!r}: no such file (expected a .json or .json.gz file)")
    try:
        if p.name.endswith(".gz"):
            with gzip.open(p, "rt", encoding="utf-8") as f:
                return json.load(f)
        with p.open(encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, EOFError) as exc:
        raise ConfigError(f"{str(p)!r}: not readable JSON ({exc})") from exc


def _need(obj: Any, key: str, kind: type | tuple[type, ...], path: Path, where: str) -> Any:
    if not isinstance(obj, Mapping) or key not in obj:
        raise ConfigError(f"{str(path)!r}: {where} has no `{key}`")
    value = obj[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise ConfigError(
            f"{str(path)!r}: {where}: `{key}` must be a {names}, got {type(value).__name__}"
        )
    return value


_SESSION = re.compile(r"^session_(\d+)$")
_DIA_ID = re.compile(r"D\d+:\d+")


def load_locomo(path: str | Path) -> list[LocomoConversation]:
    """The conversations of a LoCoMo file (``locomo10.json`` format), or `ConfigError`."""
    p = Path(path)
    data = _read_json(p)
    if not isinstance(data, list) or not data:
        raise ConfigError(f"{str(p)!r}: a LoCoMo file is a non-empty list of conversations")
    out = []
    for i, item in enumerate(data):
        where = f"conversation {i}"
        sample_id = str(item.get("sample_id", f"conv-{i}")) if isinstance(item, Mapping) else ""
        conv = _need(item, "conversation", Mapping, p, where)
        qa = _need(item, "qa", list, p, where)
        sessions = sorted(
            (int(m.group(1)), k) for k in conv if (m := _SESSION.match(k)) and conv[k]
        )
        if not sessions:
            raise ConfigError(f"{str(p)!r}: {where}: `conversation` has no `session_N` turns")
        turns = []
        for n, key in sessions:
            date = str(conv.get(f"{key}_date_time", ""))
            for j, turn in enumerate(_need(conv, key, list, p, where)):
                tw = f"{where} {key} turn {j}"
                text = _need(turn, "text", str, p, tw)
                caption = turn.get("blip_caption")
                if caption:
                    text = f"{text} and shared {caption}."
                turns.append(
                    LocomoTurn(
                        dia_id=_need(turn, "dia_id", str, p, tw),
                        speaker=_need(turn, "speaker", str, p, tw),
                        text=text,
                        session=n,
                        date=date,
                    )
                )
        first = turns[0].speaker
        speaker_a = str(conv.get("speaker_a", first))
        speaker_b = str(conv.get("speaker_b", next((t.speaker for t in turns
                                                    if t.speaker != speaker_a), "")))  # fmt: skip
        questions = []
        for j, q in enumerate(qa):
            qw = f"{where} qa {j}"
            evidence = _need(q, "evidence", list, p, qw)
            category = _need(q, "category", int, p, qw)
            ids: list[str] = []
            for e in evidence:  # a few gold entries hold several ids ("D8:6; D9:17")
                for d in _DIA_ID.findall(str(e)):
                    if d not in ids:
                        ids.append(d)
            questions.append(
                LocomoQuestion(
                    question=_need(q, "question", str, p, qw),
                    evidence=tuple(ids),
                    category=category,
                )
            )
        out.append(
            LocomoConversation(
                sample_id=sample_id,
                speakers=(speaker_a, speaker_b),
                turns=tuple(turns),
                questions=tuple(questions),
            )
        )
    return out


def load_longmemeval(path: str | Path) -> list[LongMemEvalQuestion]:
    """The questions of a LongMemEval file (``longmemeval_s.json`` format), or `ConfigError`."""
    p = Path(path)
    data = _read_json(p)
    if not isinstance(data, list) or not data:
        raise ConfigError(f"{str(p)!r}: a LongMemEval file is a non-empty list of questions")
    out = []
    for i, item in enumerate(data):
        where = f"question {i}"
        qid = str(_need(item, "question_id", (str, int), p, where))
        where = f"question {qid!r}"
        ids = _need(item, "haystack_session_ids", list, p, where)
        sessions = _need(item, "haystack_sessions", list, p, where)
        if len(ids) != len(sessions):
            raise ConfigError(
                f"{str(p)!r}: {where}: {len(sessions)} `haystack_sessions` but {len(ids)} "
                "`haystack_session_ids`"
            )
        parsed = []
        for s, session in enumerate(sessions):
            if not isinstance(session, list):
                raise ConfigError(f"{str(p)!r}: {where}: session {s} is not a list of turns")
            parsed.append(
                tuple(
                    (
                        str(_need(t, "role", str, p, f"{where} session {s} turn {j}")),
                        str(_need(t, "content", str, p, f"{where} session {s} turn {j}")),
                    )
                    for j, t in enumerate(session)
                )
            )
        out.append(
            LongMemEvalQuestion(
                question_id=qid,
                question_type=str(_need(item, "question_type", str, p, where)),
                question=_need(item, "question", str, p, where),
                session_ids=tuple(str(x) for x in ids),
                sessions=tuple(parsed),
                answer_session_ids=tuple(
                    str(x) for x in _need(item, "answer_session_ids", list, p, where)
                ),
                session_dates=tuple(_lme_date(d) for d in item.get("haystack_dates") or ()),
                question_date=_lme_date(item.get("question_date")),
            )
        )
    return out


def _lme_date(value: Any) -> datetime | None:
    """``2023/05/20 (Sat) 11:56`` as a UTC datetime; None if absent or in another form (the
    dates only serve questions that name a time, "5 days ago")."""
    if not isinstance(value, str):
        return None
    try:
        text = re.sub(r"\s*\([^)]*\)", "", value).strip()
        return datetime.strptime(text, "%Y/%m/%d %H:%M").replace(tzinfo=UTC)
    except ValueError:
        return None


# --- metrics ---------------------------------------------------------------------------------


def recall_at(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    """The fraction of `gold` found in the first `k` of `ranked` (0 for no gold)."""
    g = set(gold)
    return len(g & set(ranked[:k])) / len(g) if g else 0.0


def ndcg_at(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    """nDCG@k with binary relevance (each gold item counted once)."""
    g = set(gold)
    if not g:
        return 0.0
    seen: set[str] = set()
    dcg = 0.0
    for i, item in enumerate(ranked[:k]):
        if item in g and item not in seen:
            seen.add(item)
            dcg += 1.0 / math.log2(i + 2)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(g), k)))
    return dcg / ideal


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


# --- ranking ---------------------------------------------------------------------------------


class _Rankers:
    """Task-id rankings of one memory's store, one per stage of the retrieval pipeline."""

    def __init__(self, fused: LoomMemory, lexical: LoomMemory | None) -> None:
        self.fused = fused
        self.lexical = lexical or fused
        self.settings = RetrievalSettings()
        self.policy: CachePolicy | None = None  # the windows' (None: `CachePolicy()`)

    def configure(self, settings: RetrievalSettings) -> None:
        """Search with `settings` from now on (the memories' own search constants too; the
        stored turns and their vectors stay as they are)."""
        self.settings = settings
        for memory in {id(self.fused): self.fused, id(self.lexical): self.lexical}.values():
            memory.fusion_weights = settings.fusion_weights
            memory.fast_weight = settings.fast_weight
            memory.neighbour_weight = settings.neighbour_weight
            memory.answer_weight = settings.answer_weight
            memory.date_weight = settings.date_weight
            if memory.time_decay:  # 0 where the dataset gives no "now" (`_open`)
                memory.time_decay = settings.time_decay

    def rank(self, query: str, stage: str, limit: int) -> list[str]:
        if stage == "lexical":
            return [h.task.task_id for h in self.lexical.search(query, limit=limit)]
        if stage == "fused":
            return [h.task.task_id for h in self.fused.search(query, limit=limit)]
        if stage in ("+rewriter", "+reranker"):
            source = self.source(reranker=stage == "+reranker")
            ranked = asyncio.run(source.candidates(query, limit=limit))
            return [c.id for c in ranked][:limit]
        embedder = self.fused.embedder
        assert embedder is not None
        vector = embedder.embed([query], kind="query")[0]
        hits: list[Hit] = self.fused.store.batch(
            [
                VectorSearch(
                    prefix=self.fused.search_scope,
                    vector=vector,
                    model=embedder.name,
                    kind=TASK,
                    limit=limit,
                )
            ]
        )[0]
        return [str(h.record.data["task_id"]) for h in hits]

    def source(self, *, reranker: bool = True) -> Any:
        """The engine's `UnifiedRetrievalSource` over this memory (without reranking: ranked
        by recall relevance alone)."""
        from loomctx.context.sources.retrieval import UnifiedRetrievalSource
        from loomctx.retrieval.reranker import Reranker
        from loomctx.retrieval.signals import RelevanceSignal

        return UnifiedRetrievalSource(
            self.fused,
            reranker=None if reranker else Reranker([RelevanceSignal()]),
            settings=self.settings,
        )


def _embedder(dense: bool, embedder: Embedder | None, cache_dir: str | Path | None) -> Any:
    if not dense:
        return None
    if embedder is None:
        from loomctx.embeddings import default_embedder

        embedder = default_embedder()
    if cache_dir is None:
        return embedder
    from loomctx.evaluation._vector_cache import CachedEmbedder

    return CachedEmbedder(embedder, cache_dir)


def _open(node_id: str, tasks: list[Task], embedder: Any, now: datetime | None = None) -> _Rankers:
    """Rankers over a fresh memory of `tasks`. `now`: when the questions are asked (the
    memory's clock, for "5 days ago"); None where the dataset does not say (LoCoMo): time
    references are then not resolved, rather than against the day the benchmark runs."""
    options: dict[str, Any] = (
        {"ranking": MemoryRanking(time_decay=0.0)} if now is None else {"clock": lambda: now}
    )
    memory = LoomMemory(
        node_id, embedder=embedder, embedding=MemoryEmbedding(in_background=False), **options
    )
    memory.add_tasks(tasks)
    lexical = None
    if memory.background is not None:
        memory.background.drain()
        lexical = LoomMemory(
            node_id, store=memory.store, namespace=memory.namespace, embedder=None, **options
        )
    return _Rankers(memory, lexical)


def _close(rankers: _Rankers, embedder: Any) -> None:
    if rankers.lexical is not rankers.fused:
        rankers.lexical.close()
    rankers.fused.close()
    if hasattr(embedder, "save"):
        embedder.save()


class _Clock:
    """Elapsed time and an estimate of what is left, from the work done so far."""

    def __init__(self, total: float) -> None:
        self.total = total
        self.start = time.perf_counter()

    def line(self, done: float) -> str:
        """``"1m05s elapsed, about 3m20s left"`` once something is done."""
        elapsed = time.perf_counter() - self.start
        if done <= 0:
            return f"{_duration(elapsed)} elapsed"
        left = elapsed / done * max(0.0, self.total - done)
        return f"{_duration(elapsed)} elapsed, about {_duration(left)} left"


def _duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _uncached(embedder: Any, kind: str, texts: Sequence[str]) -> int:
    """How many of `texts` the embedder must still embed (all, without a cache)."""
    missing = getattr(embedder, "missing", None)
    return int(missing(texts, kind=kind)) if callable(missing) else len(texts)


def _stages(dense: bool, stages: bool) -> tuple[str, ...]:
    if not stages:
        return (MAIN_STAGE,)
    return STAGES if dense else tuple(s for s in STAGES if s not in ("dense", "fused"))


# --- LoCoMo ----------------------------------------------------------------------------------


def locomo_date(value: str) -> datetime | None:
    """``1:56 pm on 8 May, 2023`` as a UTC datetime; None if empty or in another form."""
    try:
        return datetime.strptime(value.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    except ValueError:
        return None


def _locomo_tasks(conv: LocomoConversation, *, date_in_text: bool) -> list[Task]:
    """One Task per turn, recorded when its session took place (a second apart per turn) if
    the file says when: memory items show that date in the window, as they would live."""
    tasks = []
    turn_of: dict[int, int] = {}
    for t in conv.turns:
        content = t.text
        if date_in_text and t.date:
            content = f"[{t.date}] {content}"
        date = locomo_date(t.date)
        n = turn_of[t.session] = turn_of.get(t.session, -1) + 1
        when = {} if date is None else {"created_at": date + timedelta(seconds=n)}
        tasks.append(
            Task(
                task_id=t.dia_id,
                action=ASSISTANT_MESSAGE if t.speaker == conv.speakers[1] else USER_MESSAGE,
                parameters={"content": content, "speaker": t.speaker, "session_date": t.date},
                **when,  # type: ignore[arg-type]
            )
        )
    return tasks


def _window_found(blocks: Iterable[Any], gold: Mapping[str, str]) -> set[str]:
    """The gold task ids whose text is whole inside a kept block."""
    found = set()
    for block in blocks:
        task_id = block.metadata.get("task_id")
        if task_id not in gold:
            continue
        text = block.content + "\n".join(m.content for m in block.messages)
        if gold[task_id] in text:
            found.add(task_id)
    return found


async def _windows(
    rankers: _Rankers, questions: Sequence[LocomoQuestion], budgets: Sequence[int],
    texts: Mapping[str, str],
) -> list[dict[int, set[str]]]:  # fmt: skip
    from loomctx.context.block import BuildContext
    from loomctx.context.compactor import CachePolicy
    from loomctx.context.recipe import (
        WindowSettings,
        memory_sources,
        window_orchestrator,
        window_sources,
    )

    memory = rankers.fused
    # The window recipe's history (as deep as L1) with the ranker under test as its
    # retrieval, no important memory and an uncapped tail: a measure of retrieval, each
    # question a conversation's first window (`loomctx bench cost` measures an `Agent`'s).
    settings = WindowSettings(cache_policy=rankers.policy or CachePolicy(), history_depth=None)
    history = memory_sources(memory, settings=settings)[0]
    orchestrators = {
        b: window_orchestrator(
            window_sources("", memory=[history, rankers.source()]),
            counter=memory.counter,
            window=b + 1000,
            settings=settings,
            max_output_tokens=1000,
            source_timeout=120.0,  # a first query may load the embedding model
        )
        for b in budgets
    }
    out = []
    for i, q in enumerate(questions):
        gold = {e: texts[e] for e in q.evidence if e in texts}
        found = {}
        # Each question is a conversation's first window: a session of its own, so history
        # is not held where an earlier question's build left it.
        ctx = BuildContext(session_id=f"question-{i}")
        for b, orch in orchestrators.items():
            window = await orch.build(query=q.question, ctx=ctx)
            if window.token_count > b:  # pragma: no cover - the orchestrator guarantees it
                raise AssertionError(f"window of {window.token_count} tokens over budget {b}")
            found[b] = _window_found(window.blocks, gold)
        out.append(found)
    return out


def _locomo_summary(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> dict[str, Any]:
    """Macro means of the ranking metrics; micro shares for window@B (`w@B` counts)."""
    out: dict[str, Any] = {"questions": len(rows)}
    for key in keys:
        if key.startswith("window@"):
            gold = sum(r["gold"] for r in rows)
            out[key] = sum(r[key] for r in rows) / gold if gold else 0.0
        else:
            out[key] = _mean([r[key] for r in rows])
    return out


def _locomo_report(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> dict[str, Any]:
    out = _locomo_summary(rows, keys)
    cats = sorted({r["category"] for r in rows})
    out["by_category"] = {
        str(c): _locomo_summary([r for r in rows if r["category"] == c], keys) for c in cats
    }
    out["excluding_category_5"] = _locomo_summary([r for r in rows if r["category"] != 5], keys)
    return out


def _locomo_rows(
    rankers: _Rankers, usable: Sequence[LocomoQuestion], budgets: Sequence[int],
    texts: Mapping[str, str], stage: str,
) -> list[dict[str, Any]]:  # fmt: skip
    """One row per question: the ranking metrics of `stage`, and with the main stage the gold
    turns in the window at each budget (``window@B``) and how many there are (``gold``)."""
    rows = []
    for q in usable:
        ranked = rankers.rank(q.question, stage, max(LOCOMO_KS))
        row: dict[str, Any] = {f"r@{k}": recall_at(ranked, q.evidence, k) for k in LOCOMO_KS}
        row["ndcg@10"] = ndcg_at(ranked, q.evidence, 10)
        row["category"] = q.category
        rows.append(row)
    if stage != MAIN_STAGE:
        return rows
    windows = asyncio.run(_windows(rankers, usable, budgets, texts))
    for q, found, row in zip(usable, windows, rows, strict=True):
        row["gold"] = len(q.evidence)
        for b in budgets:
            row[f"window@{b}"] = len(found[b])
    return rows


def _cv_score(target: str) -> Callable[[Sequence[Mapping[str, Any]]], float]:
    """The target metric over a set of rows, as the report computes it (micro for windows)."""

    def score(rows: Sequence[Mapping[str, Any]]) -> float:
        if target.startswith("window@"):
            gold = sum(r["gold"] for r in rows)
            return sum(r[target] for r in rows) / gold if gold else 0.0
        return _mean([r[target] for r in rows])

    return score


def _check_cv(
    cv: bool, grid: Sequence[Any], target: str, keys: Sequence[str], *, policies: bool = False
) -> None:
    if not cv:
        return
    from loomctx.context.compactor import CachePolicy

    kinds = (RetrievalSettings, CachePolicy) if policies else (RetrievalSettings,)
    if not grid or not all(isinstance(g, kinds) for g in grid):
        what = "RetrievalSettings or CachePolicy" if policies else "RetrievalSettings"
        raise ConfigError(f"`grid` must be a non-empty sequence of {what}")
    if target not in keys:
        raise ConfigError(f"`cv_target` must be one of {list(keys)}, got {target!r}")


def _cv_report(
    table: dict[str, dict[str, list[dict[str, Any]]]], target: str, grid_size: int,
    report: Callable[[Sequence[Mapping[str, Any]]], dict[str, Any]],
) -> dict[str, Any]:  # fmt: skip
    from loomctx.evaluation.crossval import cross_validate

    folds = list(next(iter(table.values())))
    if len(folds) < 2:
        raise ConfigError(
            f"cross-validation needs at least 2 folds; this run has {len(folds)} (raise "
            "`--limit`, or leave it out)"
        )
    result = cross_validate(table, _cv_score(target))
    out = report(result.rows)
    out["target"] = target
    out["chosen"] = result.chosen
    out["grid"] = list(table)
    out["grid_size"] = grid_size
    out["per_setting"] = {
        label: _cv_score(target)([r for f in folds for r in by_fold[f]])
        for label, by_fold in table.items()
    }
    return out


def evaluate_locomo(
    path: str | Path,
    *,
    dense: bool = True,
    limit: int | None = None,
    budgets: Sequence[int] = (2000, 4000),
    stages: bool = False,
    embedder: Embedder | None = None,
    cache_dir: str | Path | None = None,
    date_in_text: bool = False,
    settings: RetrievalSettings | None = None,
    policy: CachePolicy | None = None,
    cv: bool = False,
    grid: Sequence[RetrievalSettings | CachePolicy] | None = None,
    cv_target: str = "window@2000",
    progress: Progress | None = None,
) -> dict[str, Any]:
    """R@5/10/20, nDCG@10 and evidence-in-window @ each budget on a LoCoMo file.

    `dense`: hybrid search with `embedder` (default: `default_embedder()`); else lexical
    only. `limit`: only the first `limit` questions (in file order). `stages`: also the
    lexical / dense / fused rankings (needs `dense`). `cache_dir`: keep document and query
    vectors on disk there between runs (e.g. `loomctx.evaluation._vector_cache.DEFAULT_CACHE_DIR`).
    `settings`: the retrieval constants of the plain figures (default `RetrievalSettings()`);
    `policy`: the windows' `CachePolicy` (default `CachePolicy()`).

    `cv`: also ``cross_validated``, leave-one-conversation-out: every setting of `grid`
    (default `loomctx.evaluation.crossval.LOCOMO_GRID`; a `CachePolicy` in it stands for the
    plain retrieval settings with that policy, a `RetrievalSettings` for those settings with
    the plain policy) is measured once per conversation; each conversation is then reported
    under the setting that maximizes `cv_target` on the other conversations
    (`loomctx.evaluation.crossval.cross_validate`).
    """
    if limit is not None and limit < 1:
        raise ConfigError(f"`limit` must be >= 1 or None, got {limit!r}")
    if any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in budgets):
        raise ConfigError(f"`budgets` must be ints >= 1, got {budgets!r}")
    from loomctx.context.compactor import CachePolicy
    from loomctx.evaluation.crossval import LOCOMO_GRID, label_of

    plain = settings or RetrievalSettings()
    rank_keys = [f"r@{k}" for k in LOCOMO_KS] + ["ndcg@10"]
    window_keys = [f"window@{b}" for b in budgets]
    chosen_grid = list(grid if grid is not None else LOCOMO_GRID)
    _check_cv(cv, chosen_grid, cv_target, rank_keys + window_keys, policies=True)
    conversations = load_locomo(path)
    emb = _embedder(dense, embedder, cache_dir)
    run_stages = _stages(dense, stages)
    rows: list[dict[str, Any]] = []
    stage_rows: dict[str, list[dict[str, Any]]] = {s: [] for s in run_stages}
    table: dict[str, dict[str, list[dict[str, Any]]]] = {}
    skipped = 0
    left = limit
    runs = 1 + (len(chosen_grid) if cv else 0)
    clock = _Clock(total=sum(len(c.turns) for c in conversations) * runs)
    done = 0
    for conv in conversations:
        if left is not None and left <= 0:
            break
        questions = list(conv.questions[:left] if left is not None else conv.questions)
        if left is not None:
            left -= len(questions)
        usable = [q for q in questions if q.evidence]
        skipped += len(questions) - len(usable)
        if not usable:
            continue
        if progress:
            progress(
                f"locomo {conv.sample_id}: {len(conv.turns)} turns, {len(usable)} questions "
                f"({clock.line(done)})"
            )
        done += len(conv.turns) * runs
        tasks = _locomo_tasks(conv, date_in_text=date_in_text)
        texts = {t.task_id: str(t.parameters["content"]) for t in tasks}
        rankers = _open(conv.sample_id, tasks, emb)
        try:
            rankers.configure(plain)
            rankers.policy = policy
            for stage in run_stages:
                stage_rows[stage].extend(_locomo_rows(rankers, usable, budgets, texts, stage))
            rows.extend(stage_rows[MAIN_STAGE][-len(usable) :])
            for setting in chosen_grid if cv else ():
                if isinstance(setting, RetrievalSettings):
                    label, same = setting.label(), setting == plain
                    rankers.configure(setting)
                    rankers.policy = policy
                else:
                    label, same = label_of(setting), setting == (policy or CachePolicy())
                    rankers.configure(plain)
                    rankers.policy = setting
                if same:  # measured already
                    rows_of = stage_rows[MAIN_STAGE][-len(usable) :]
                else:
                    rows_of = _locomo_rows(rankers, usable, budgets, texts, MAIN_STAGE)
                table.setdefault(label, {})[conv.sample_id] = rows_of
        finally:
            _close(rankers, emb)
    keys = rank_keys + window_keys
    result: dict[str, Any] = {
        "dataset": "locomo",
        "path": str(path),
        **_locomo_report(rows, keys),
        "skipped": skipped,
        "config": {
            "dense": dense,
            "embedder": emb.name if emb is not None else None,
            "ranking": MAIN_STAGE,
            "budgets": list(budgets),
            "limit": limit,
            "date_in_text": date_in_text,
            "window_sources": ["L1_recent", "unified_retrieval", "user_input"],
            "settings": plain.label(),
            "policy": label_of(policy or CachePolicy()),
        },
    }
    if stages:
        result["stages"] = {s: _locomo_report(stage_rows[s], rank_keys) for s in run_stages}
    if cv:
        result["cross_validated"] = _cv_report(
            table, cv_target, len(chosen_grid), lambda r: _locomo_report(r, keys)
        )
    return result


# --- LongMemEval -----------------------------------------------------------------------------

LME_KEYS: Final = ("recall_any@5", "recall_all@5", "recall_all@10", "ndcg@10")


def _lme_tasks(q: LongMemEvalQuestion) -> list[Task]:
    """One Task per turn, recorded when its session took place (a second apart) if the file
    says when."""
    tasks = []
    for s, session in enumerate(q.sessions):
        date = q.session_dates[s] if s < len(q.session_dates) else None
        for t, (role, content) in enumerate(session):
            when = {} if date is None else {"created_at": date + timedelta(seconds=t)}
            tasks.append(
                Task(
                    task_id=f"s{s}t{t}",
                    action=USER_MESSAGE if role == "user" else ASSISTANT_MESSAGE,
                    parameters={"content": content, "session_id": q.session_ids[s]},
                    **when,  # type: ignore[arg-type]
                )
            )
    return tasks


def _sessions(ranked_turns: Sequence[str], q: LongMemEvalQuestion) -> list[str]:
    """Session ids in the order of their best turn."""
    out: list[str] = []
    for task_id in ranked_turns:
        sid = q.session_ids[int(task_id[1:].split("t", 1)[0])]
        if sid not in out:
            out.append(sid)
    return out


def _subset(used: int, available: int) -> str:
    """Which questions a run measured, for its report: all, or the first `used`."""
    if used == available:
        return f"all {available} questions"
    return f"the first {used} of {available} questions (--limit)"


def _lme_row(ranked: Sequence[str], gold: Sequence[str]) -> dict[str, float]:
    g = set(gold)
    return {
        "recall_any@5": float(bool(g & set(ranked[:5]))),
        "recall_all@5": float(g <= set(ranked[:5])),
        "recall_all@10": float(g <= set(ranked[:10])),
        "ndcg@10": ndcg_at(ranked, g, 10),
    }


def _lme_report(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    def summary(part: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return {"questions": len(part), **{k: _mean([r[k] for r in part]) for k in LME_KEYS}}

    out = summary(rows)
    types = sorted({r["question_type"] for r in rows})
    out["by_question_type"] = {
        t: summary([r for r in rows if r["question_type"] == t]) for t in types
    }
    return out


def evaluate_longmemeval(
    path: str | Path,
    *,
    dense: bool = True,
    limit: int | None = None,
    stages: bool = False,
    embedder: Embedder | None = None,
    cache_dir: str | Path | None = None,
    turn_limit: int = 100,
    settings: RetrievalSettings | None = None,
    cv: bool = False,
    folds: int = 5,
    grid: Sequence[RetrievalSettings] | None = None,
    cv_target: str = "recall_all@5",
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Session-level recall_any@5, recall_all@5/10 and nDCG@10 on a LongMemEval file, over
    non-abstention questions. Sessions are ranked by their best turn among the top
    `turn_limit` turns. `limit`: only the first `limit` non-abstention questions (``subset``
    says which were measured). ``rankings``: each question's sessions, best first.
    `settings`: the retrieval constants of the plain figures (default `RetrievalSettings()`).

    `cv`: also ``cross_validated``: the questions are dealt round-robin into `folds` folds
    (`loomctx.evaluation.crossval.folds_of`), every setting of `grid` (default
    `loomctx.evaluation.crossval.LME_GRID`) ranks every question once, and each fold is
    reported under the setting that maximizes `cv_target` on the other folds."""
    if limit is not None and limit < 1:
        raise ConfigError(f"`limit` must be >= 1 or None, got {limit!r}")
    from loomctx.evaluation.crossval import LME_GRID, folds_of

    plain = settings or RetrievalSettings()
    chosen_grid = list(grid if grid is not None else LME_GRID)
    _check_cv(cv, chosen_grid, cv_target, LME_KEYS)
    questions = load_longmemeval(path)
    usable = [q for q in questions if not q.abstention and q.answer_session_ids]
    skipped = len(questions) - len(usable)
    available = len(usable)
    if limit is not None:
        usable = usable[:limit]
    fold_of = folds_of(len(usable), folds) if cv else []
    rankings: dict[str, list[str]] = {}
    table: dict[str, dict[str, list[dict[str, Any]]]] = {}
    emb = _embedder(dense, embedder, cache_dir)
    run_stages = _stages(dense, stages)
    main = MAIN_STAGE
    stage_rows: dict[str, list[dict[str, Any]]] = {s: [] for s in run_stages}
    # The estimate counts turns to embed (the cost that dominates), not questions.
    work = [
        sum(len(s) for s in q.sessions)
        if emb is None
        else _uncached(emb, "document", [c for s in q.sessions for _, c in s]) + 1
        for q in usable
    ]
    clock = _Clock(total=sum(work))
    if progress and emb is not None:
        turns = sum(len(s) for q in usable for s in q.sessions)
        progress(
            f"longmemeval: {len(usable)} questions, {turns:,} turns, {sum(work) - len(work):,} "
            f"to embed (the rest are cached)"
        )
    for i, q in enumerate(usable):
        if progress:
            turns = sum(len(s) for s in q.sessions)
            progress(
                f"longmemeval {i + 1}/{len(usable)} {q.question_id}: {turns} turns "
                f"({clock.line(sum(work[:i]))})"
            )
        rankers = _open(f"lme-{q.question_id}", _lme_tasks(q), emb, q.question_date)
        try:
            rankers.configure(plain)
            for stage in run_stages:
                ranked = _sessions(rankers.rank(q.question, stage, turn_limit), q)
                if stage == main:
                    rankings[q.question_id] = ranked
                row: dict[str, Any] = dict(_lme_row(ranked, q.answer_session_ids))
                row["question_type"] = q.question_type
                stage_rows[stage].append(row)
            for setting in chosen_grid if cv else ():
                if setting == plain:
                    row = stage_rows[MAIN_STAGE][-1]
                else:
                    rankers.configure(setting)
                    ranked = _sessions(rankers.rank(q.question, MAIN_STAGE, turn_limit), q)
                    row = {**_lme_row(ranked, q.answer_session_ids),
                           "question_type": q.question_type}  # fmt: skip
                by_fold = table.setdefault(setting.label(), {f: [] for f in dict.fromkeys(fold_of)})
                by_fold[fold_of[i]].append(row)
        finally:
            _close(rankers, emb)
    result: dict[str, Any] = {
        "dataset": "longmemeval",
        "path": str(path),
        **_lme_report(stage_rows[main]),
        "skipped": skipped,
        "subset": _subset(len(usable), available),
        "rankings": rankings,
        "config": {
            "dense": dense,
            "embedder": emb.name if emb is not None else None,
            "ranking": main,
            "limit": limit,
            "session_score": "best turn",
            "turn_limit": turn_limit,
            "settings": plain.label(),
        },
    }
    if stages:
        result["stages"] = {s: _lme_report(stage_rows[s]) for s in run_stages}
    if cv:
        result["cross_validated"] = _cv_report(table, cv_target, len(chosen_grid), _lme_report)
        result["cross_validated"]["folds"] = folds
    return result

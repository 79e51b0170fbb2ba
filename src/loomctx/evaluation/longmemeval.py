"""LongMemEval_S session retrieval, measured against the gold sessions (no LLM): the function
behind ``loomctx bench longmemeval PATH``.

Each question's haystack is its own `LoomMemory` (turns as Tasks, user / assistant by role,
recorded when their session took place); sessions are ranked by their *best* turn (the
first session to appear in the turn ranking, `turn_limit` deep, ranks first). The ranking is
the whole retrieval pipeline (`UnifiedRetrievalSource.candidates`) and, with ``stages``, each
step of it. The metrics (``recall_any@5``, ``recall_all@5``, ``recall_all@10``, ``ndcg@10``)
are per question, averaged over the non-abstention questions. Beside them, ``turns@10``: the
share of the turns the file marks ``has_answer`` among the first 10 turns of the ranking (what
a window of a few turns would hold, where the session figures only ask for one turn of each
session), averaged over the questions that mark any (``turn_questions``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from loomctx.errors import ConfigError
from loomctx.evaluation._ranking import (
    MAIN_STAGE,
    Clock,
    Progress,
    bench_embedder,
    close_rankers,
    open_rankers,
    stages_of,
    uncached,
)
from loomctx.evaluation.crossval import LME_GRID, check_grid, cv_report, folds_of
from loomctx.evaluation.datasets import LongMemEvalQuestion, load_longmemeval
from loomctx.evaluation.metrics import mean, ndcg_at
from loomctx.memory.task import ASSISTANT_MESSAGE, USER_MESSAGE, Task
from loomctx.retrieval.settings import RetrievalSettings

if TYPE_CHECKING:
    from loomctx.embeddings import Embedder

__all__ = ["LME_KEYS", "TURN_KEY", "evaluate_longmemeval"]

LME_KEYS: Final = ("recall_any@5", "recall_all@5", "recall_all@10", "ndcg@10")
TURN_KEY: Final = "turns@10"


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


def _lme_row(turns: Sequence[str], q: LongMemEvalQuestion) -> dict[str, Any]:
    """One question's figures from its turn ranking (task ids, best first)."""
    ranked = _sessions(turns, q)
    g = set(q.answer_session_ids)
    marked = {f"s{s}t{t}" for s, t in q.answer_turns}
    return {
        "recall_any@5": float(bool(g & set(ranked[:5]))),
        "recall_all@5": float(g <= set(ranked[:5])),
        "recall_all@10": float(g <= set(ranked[:10])),
        "ndcg@10": ndcg_at(ranked, g, 10),
        TURN_KEY: len(marked & set(turns[:10])) / len(marked) if marked else None,
        "question_type": q.question_type,
    }


def _lme_report(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    def summary(part: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        marked = [r[TURN_KEY] for r in part if r.get(TURN_KEY) is not None]
        return {
            "questions": len(part),
            **{k: mean([r[k] for r in part]) for k in LME_KEYS},
            TURN_KEY: mean(marked) if marked else None,
            "turn_questions": len(marked),
        }

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
    plain = settings or RetrievalSettings()
    chosen_grid = list(grid if grid is not None else LME_GRID)
    if cv:
        check_grid(chosen_grid, cv_target, LME_KEYS)
    questions = load_longmemeval(path)
    usable = [q for q in questions if not q.abstention and q.answer_session_ids]
    skipped = len(questions) - len(usable)
    available = len(usable)
    if limit is not None:
        usable = usable[:limit]
    fold_of = folds_of(len(usable), folds) if cv else []
    rankings: dict[str, list[str]] = {}
    table: dict[str, dict[str, list[dict[str, Any]]]] = {}
    emb = bench_embedder(dense, embedder, cache_dir)
    run_stages = stages_of(dense, stages)
    main = MAIN_STAGE
    stage_rows: dict[str, list[dict[str, Any]]] = {s: [] for s in run_stages}
    # The estimate counts turns to embed (the cost that dominates), not questions.
    work = [
        sum(len(s) for s in q.sessions)
        if emb is None
        else uncached(emb, "document", [c for s in q.sessions for _, c in s]) + 1
        for q in usable
    ]
    clock = Clock(total=sum(work))
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
        rankers = open_rankers(f"lme-{q.question_id}", _lme_tasks(q), emb, q.question_date)
        try:
            rankers.configure(plain)
            for stage in run_stages:
                found = rankers.rank(q.question, stage, turn_limit)
                if stage == main:
                    rankings[q.question_id] = _sessions(found, q)
                stage_rows[stage].append(_lme_row(found, q))
            for setting in chosen_grid if cv else ():
                if setting == plain:
                    row = stage_rows[MAIN_STAGE][-1]
                else:
                    rankers.configure(setting)
                    row = _lme_row(rankers.rank(q.question, MAIN_STAGE, turn_limit), q)
                by_fold = table.setdefault(setting.label(), {f: [] for f in dict.fromkeys(fold_of)})
                by_fold[fold_of[i]].append(row)
        finally:
            close_rankers(rankers, emb)
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
        result["cross_validated"] = cv_report(table, cv_target, len(chosen_grid), _lme_report)
        result["cross_validated"]["folds"] = folds
    return result

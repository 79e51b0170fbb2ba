"""Importance from content vs the seed's rule: evidence in L2, and in an agent's window.

Run: .venv/bin/python bench/importance_bench.py [--budgets 2000,4000] [--limit N] [--json OUT]

Every LoCoMo conversation (../shared/data/locomo, 5 conversations) and every LongMemEval_S
haystack (../shared/data/longmemeval, 60 questions) is replayed through a real `LoomMemory`
(embedded store, no embedder: the comparison is about L2, not about vectors) as a chat would
feed it: each session's turns added, then `promote_tasks()`, as the agent does after a run.
Twice, with the same code path: once with each task's importance pinned to seed 004's rule
(``metadata["importance"]``, which `importance_of` returns as it is), once with the shipped
content-aware score (`loomctx.memory.importance`, the default). Then, per rule:

- evidence turns in L2 (LoCoMo: the gold `evidence` turns of the conversation's questions;
  LongMemEval: the turns marked `has_answer`), and evidence turns scored above the promotion
  threshold (0.6);
- evidence-in-window @ B: the window an agent builds for each question at an input budget of
  B tokens, from the sources `Agent` uses (`L1RecentSource`, `L2ImportantSource`,
  `UnifiedRetrievalSource` over the memory, lexical, and the question), and the same without
  retrieval (L1 + L2 only, what importance alone brings into the window). A gold turn counts
  when its text is whole inside a kept block; shares are over all gold turns (micro).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from itertools import groupby
from pathlib import Path
from typing import Any

from _common import DATA, LOCOMO

from loomctx import ContextOrchestrator, LoomMemory, MemoryRanking, Task
from loomctx.context import BuildContext
from loomctx.context.sources import (
    L1RecentSource,
    L2ImportantSource,
    UnifiedRetrievalSource,
    UserInputSource,
)
from loomctx.evaluation.datasets import load_locomo, load_longmemeval
from loomctx.evaluation.locomo import _locomo_tasks, _window_found
from loomctx.evaluation.longmemeval import _lme_tasks
from loomctx.memory.task import _seed_importance, importance_of

LONGMEMEVAL = DATA / "longmemeval" / "longmemeval_s_dev.json.gz"
RULES = ("seed", "content")
WINDOWS = ("agent", "l1+l2")


def _pinned(tasks: Sequence[Task], rule: str) -> list[Task]:
    """The tasks as the rule scores them: the seed's rule pinned in metadata, or as they are
    (the default, content-aware score)."""
    if rule == "content":
        return list(tasks)
    return [replace(t, metadata={**t.metadata, "importance": _seed_importance(t)}) for t in tasks]


def replay(
    node: str, sessions: Sequence[Sequence[Task]], clock: Callable[[], datetime] | None
) -> LoomMemory:
    """A memory fed session by session, promoting after each, as a chat would."""
    options: dict[str, Any] = (
        {"ranking": MemoryRanking(time_decay=0.0)} if clock is None else {"clock": clock}
    )
    memory = LoomMemory(node, embedder=None, **options)
    for session in sessions:
        memory.add_tasks(session)
        memory.promote_tasks()
    return memory


async def windows(
    memory: LoomMemory, questions: Sequence[tuple[str, dict[str, str]]], budgets: Sequence[int]
) -> dict[str, int]:
    """Gold turns found in each window kind at each budget, summed over `questions`
    (query, {gold task id: its text})."""
    builders = {}
    for b in budgets:
        for kind in WINDOWS:
            sources: list[Any] = [L1RecentSource(memory), L2ImportantSource(memory)]
            if kind == "agent":
                sources.append(UnifiedRetrievalSource(memory))
            builders[f"{kind}@{b}"] = ContextOrchestrator(
                token_counter=memory.counter,
                sources=[*sources, UserInputSource()],
                model_context_window=b + 1000,
                max_output_tokens=1000,
            )
    found = dict.fromkeys(builders, 0)
    for i, (query, gold) in enumerate(questions):
        ctx = BuildContext(session_id=f"question-{i}")
        for key, orch in builders.items():
            window = await orch.build(query=query, ctx=ctx)
            found[key] += len(_window_found(window.blocks, gold))
    return found


def measure(
    node: str,
    sessions: Sequence[Sequence[Task]],
    evidence: set[str],
    questions: Sequence[tuple[str, dict[str, str]]],
    budgets: Sequence[int],
    clock: Callable[[], datetime] | None,
) -> dict[str, dict[str, int]]:
    """Per rule: evidence in L2, above the threshold, and found in each window."""
    out = {}
    for rule in RULES:
        pinned = [_pinned(s, rule) for s in sessions]
        memory = replay(node, pinned, clock)
        try:
            l2 = {t.task_id for t in memory.get_l2_tasks()}
            above = {
                t.task_id for s in pinned for t in s if importance_of(t) > memory.promote_threshold
            }
            row = {"in_l2": len(evidence & l2), "above": len(evidence & above), "l2": len(l2)}
            row.update(asyncio.run(windows(memory, questions, budgets)))
        finally:
            memory.close()
        out[rule] = row
    return out


def _add(total: dict[str, dict[str, int]], part: dict[str, dict[str, int]]) -> None:
    for rule, row in part.items():
        into = total.setdefault(rule, {})
        for key, value in row.items():
            into[key] = into.get(key, 0) + value


def locomo(budgets: Sequence[int], limit: int | None) -> dict[str, Any]:
    total: dict[str, dict[str, int]] = {}
    turns = gold_turns = questions_n = window_gold = 0
    convs = load_locomo(LOCOMO)[:limit]
    for conv in convs:
        tasks = _locomo_tasks(conv, date_in_text=False)
        texts = {t.task_id: str(t.parameters["content"]) for t in tasks}
        sessions = [list(g) for _, g in groupby(tasks, key=lambda t: t.task_id.split(":")[0])]
        questions = [
            (q.question, {e: texts[e] for e in q.evidence if e in texts})
            for q in conv.questions
            if any(e in texts for e in q.evidence)
        ]
        evidence = {e for _, gold in questions for e in gold}
        _add(total, measure(conv.sample_id, sessions, evidence, questions, budgets, None))
        turns += len(tasks)
        gold_turns += len(evidence)
        questions_n += len(questions)
        window_gold += sum(len(g) for _, g in questions)
    return {
        "conversations": len(convs),
        "turns": turns,
        "evidence_turns": gold_turns,
        "questions": questions_n,
        "window_gold": window_gold,
        "rules": total,
    }


def longmemeval(budgets: Sequence[int], limit: int | None) -> dict[str, Any]:
    with gzip.open(LONGMEMEVAL) as f:
        raw = {q["question_id"]: q for q in json.load(f)}
    total: dict[str, dict[str, int]] = {}
    turns = gold_turns = 0
    questions = load_longmemeval(LONGMEMEVAL)[:limit]
    for q in questions:
        tasks = _lme_tasks(q)
        sessions = [list(g) for _, g in groupby(tasks, key=lambda t: t.task_id.split("t")[0])]
        marked = raw[q.question_id]["haystack_sessions"]
        evidence = {
            f"s{s}t{t}"
            for s, session in enumerate(marked)
            for t, turn in enumerate(session)
            if turn.get("has_answer")
        }
        texts = {t.task_id: str(t.parameters["content"]) for t in tasks}
        gold = {e: texts[e] for e in evidence}
        now = q.question_date
        clock = None if now is None else (lambda now=now: now)
        ask = [(q.question, gold)] if gold else []
        _add(total, measure(q.question_id, sessions, evidence, ask, budgets, clock))
        turns += len(tasks)
        gold_turns += len(evidence)
    return {
        "questions": len(questions),
        "turns": turns,
        "evidence_turns": gold_turns,
        "window_gold": gold_turns,
        "rules": total,
    }


def _print(name: str, result: dict[str, Any], budgets: Sequence[int]) -> None:
    n, w = result["evidence_turns"], result["window_gold"]
    print(f"\n{name}: {result['turns']} turns, {n} evidence turns")
    keys = [f"{k}@{b}" for b in budgets for k in WINDOWS]
    print(f"{'rule':<8} {'in L2':>14} {'above 0.6':>14} " + " ".join(f"{k:>14}" for k in keys))
    for rule, row in result["rules"].items():
        cells = [f"{row['in_l2']:>5} {row['in_l2'] / n:>7.1%}", f"{row['above']:>5} "
                 f"{row['above'] / n:>7.1%}"]  # fmt: skip
        cells += [f"{row[k]:>5} {row[k] / w:>7.1%}" for k in keys]
        print(f"{rule:<8} " + " ".join(f"{c:>14}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--budgets", default="2000,4000", help="input budgets, comma-separated")
    parser.add_argument("--limit", type=int, help="only the first N conversations / questions")
    parser.add_argument("--skip-longmemeval", action="store_true")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    t0 = time.perf_counter()
    results = {"locomo": locomo(budgets, args.limit)}
    _print("LoCoMo", results["locomo"], budgets)
    if not args.skip_longmemeval:
        results["longmemeval"] = longmemeval(budgets, args.limit)
        _print("LongMemEval_S", results["longmemeval"], budgets)
    print(f"\n{time.perf_counter() - t0:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

"""LoCoMo retrieval quality, measured against gold evidence (no LLM): the function behind
``loomctx bench locomo PATH``.

Each conversation is its own `LoomMemory`; each turn is a Task with ``task_id = dia_id``
(``"D1:3"``), `speaker_a`'s turns as `USER_MESSAGE` and `speaker_b`'s as `ASSISTANT_MESSAGE`,
``parameters = {"content", "speaker", "session_date"}``, recorded when its session took
place. The searchable text is ``"Speaker: text"`` (with ``" and shared <blip_caption>."`` for
shared images, as the LoCoMo paper's own retrieval code does); the session date is not in it
unless `date_in_text` (then ``"[date] text"``). Two kinds of figure, each from its own
builder (the result's ``config["figures"]`` says which produced what):

- Ranking (R@5/10/20, nDCG@10): retrieval alone, `UnifiedRetrievalSource.candidates` over
  the memory (recall, `QueryRewriter`, `Reranker`), 20 deep; per question the share of its
  gold turns in the top k, averaged over questions (macro); nDCG with binary relevance.
- Evidence in the window @ B: the window an `Agent` sends for the question, built by
  `Agent.preview` (the one window recipe, `loomctx.context.recipe`, exactly as the agent
  builds it: its instructions, history read from the memory's store as far back as its
  room, compacted as the agent compacts it, important memory, and retrieval in the dynamic
  tail within the agent's `CachePolicy` cap) over the memory holding the whole
  conversation, as an agent opened on it (`loomctx ingest`, then `loomctx chat`) has it when
  the question comes; B input tokens with `WINDOW_RESERVE` more for the reply. A gold turn
  counts when its text is inside a kept block of its own; the share is over all gold turns
  (micro), per category and per conversation too.

Questions without evidence are skipped (counted in ``skipped``); evidence ids not in the
conversation stay gold.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import fields, replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from loomctx.agent.executor import Agent
from loomctx.agent.llm import LLMChunk, LLMOptions
from loomctx.agent.settings import AgentSources, AgentWindow
from loomctx.context.compactor import CachePolicy
from loomctx.context.recipe import DEFAULT_HISTORY_DEPTH, WindowSettings
from loomctx.errors import ConfigError
from loomctx.evaluation._ranking import (
    MAIN_STAGE,
    Clock,
    Progress,
    Rankers,
    bench_embedder,
    close_rankers,
    open_rankers,
    stages_of,
)
from loomctx.evaluation.cost import SYSTEM
from loomctx.evaluation.crossval import LOCOMO_GRID, check_grid, cv_report, label_of
from loomctx.evaluation.datasets import (
    LocomoConversation,
    LocomoQuestion,
    load_locomo,
    locomo_date,
)
from loomctx.evaluation.metrics import mean, ndcg_at, recall_at
from loomctx.memory.core import LoomMemory
from loomctx.memory.task import ASSISTANT_MESSAGE, USER_MESSAGE, Task
from loomctx.messages import Message
from loomctx.retrieval.settings import RetrievalSettings

if TYPE_CHECKING:
    from loomctx.embeddings import Embedder

__all__ = [
    "LOCOMO_KS",
    "WINDOW_RESERVE",
    "evaluate_locomo",
    "window_agent",
    "window_ready",
]

LOCOMO_KS: Final = (5, 10, 20)
WINDOW_RESERVE: Final = 1000
"""Tokens kept for the reply beside each budget B: the agent's window is B + this."""

_FIGURES: Final = {
    "r@k, ndcg@10": "retrieval alone: UnifiedRetrievalSource.candidates over the memory, "
    "ranked 20 deep (no window)",
    "window@B": "Agent.preview: the one window recipe (loomctx.context.recipe) as an Agent "
    "sends it, over the memory holding the whole conversation; B input tokens",
}


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


class _Unsent:
    """The model of the agent whose windows are measured: they are built (`Agent.preview`),
    never sent, so a call to it is a mistake of the bench's, said as such."""

    name = "unsent"

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        options: LLMOptions | None = None,
    ) -> AsyncIterator[LLMChunk]:
        raise ConfigError("the LoCoMo bench's agent builds windows to measure; it sends none")
        yield  # pragma: no cover - an async generator, as the `LLM` protocol has it


def window_agent(memory: LoomMemory, budget: int, *, policy: CachePolicy | None = None) -> Agent:
    """The agent whose windows the bench measures: the conversation's assistant (the cost
    bench's instructions, `loomctx.evaluation.cost.SYSTEM`) over `memory`, with a window of
    `budget` input tokens and `WINDOW_RESERVE` more for the reply, its `CachePolicy` `policy`
    (default: the window recipe's) and everything else as an `Agent` has it by default. A
    source may take up to two minutes (a first query may load the embedding model)."""
    window = budget + WINDOW_RESERVE
    return Agent(
        _Unsent(),
        SYSTEM,
        memory=memory,
        name="assistant",
        window=AgentWindow(
            model_context_window=window,
            # ceil(window * ratio) is the reserve: half a token under it, whatever the rounding
            output_reserve_ratio=(WINDOW_RESERVE - 0.5) / window,
            cache_policy=policy,
        ),
        sources=AgentSources(timeout=120.0),
    )


def window_ready(settings: RetrievalSettings) -> bool:
    """Whether an `Agent`'s window runs with `settings`: only the memory's search fields
    (`RetrievalSettings.memory_ranking`) reach it; the agent's retrieval source has the
    defaults of the others."""
    return replace(RetrievalSettings(), **_memory_fields(settings)) == settings


def _memory_fields(settings: RetrievalSettings) -> dict[str, Any]:
    """The memory's search fields of `settings` (those `memory_ranking` carries), by name."""
    ranking = settings.memory_ranking()
    return {f.name: getattr(ranking, f.name) for f in fields(ranking)}


async def _windows(
    memory: LoomMemory, questions: Sequence[LocomoQuestion], budgets: Sequence[int],
    texts: Mapping[str, str], policy: CachePolicy | None,
) -> list[dict[int, set[str]]]:  # fmt: skip
    """Per question, the gold turns inside the agent's window at each budget."""
    agents = {b: window_agent(memory, b, policy=policy) for b in budgets}
    out = []
    for q in questions:
        gold = {e: texts[e] for e in q.evidence if e in texts}
        found = {}
        for b, agent in agents.items():
            window = await agent.preview(q.question)  # a run's first call, sent nowhere
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
            out[key] = mean([r[key] for r in rows])
    return out


def _locomo_report(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> dict[str, Any]:
    """The summary of `rows`, per category, without category 5, and per conversation (for
    rows that say which they are of)."""
    out = _locomo_summary(rows, keys)
    cats = sorted({r["category"] for r in rows})
    out["by_category"] = {
        str(c): _locomo_summary([r for r in rows if r["category"] == c], keys) for c in cats
    }
    out["excluding_category_5"] = _locomo_summary([r for r in rows if r["category"] != 5], keys)
    named = list(dict.fromkeys(r["conversation"] for r in rows if "conversation" in r))
    if named:
        out["conversations"] = {
            c: _locomo_summary([r for r in rows if r.get("conversation") == c], keys) for c in named
        }
    return out


def _locomo_rows(
    rankers: Rankers, usable: Sequence[LocomoQuestion], budgets: Sequence[int],
    texts: Mapping[str, str], stage: str,
) -> list[dict[str, Any]]:  # fmt: skip
    """One row per question: the ranking metrics of `stage`, and with the main stage the gold
    turns in the agent's window at each budget (``window@B``) and how many there are
    (``gold``)."""
    rows = []
    for q in usable:
        ranked = rankers.rank(q.question, stage, max(LOCOMO_KS))
        row: dict[str, Any] = {f"r@{k}": recall_at(ranked, q.evidence, k) for k in LOCOMO_KS}
        row["ndcg@10"] = ndcg_at(ranked, q.evidence, 10)
        row["category"] = q.category
        rows.append(row)
    if stage != MAIN_STAGE:
        return rows
    windows = asyncio.run(_windows(rankers.fused, usable, budgets, texts, rankers.policy))
    for q, found, row in zip(usable, windows, rows, strict=True):
        row["gold"] = len(q.evidence)
        for b in budgets:
            row[f"window@{b}"] = len(found[b])
    return rows


def _grid(
    grid: Sequence[RetrievalSettings | CachePolicy] | None, target: str, keys: Sequence[str]
) -> tuple[list[RetrievalSettings | CachePolicy], list[str]]:
    """The settings cross-validation measures, and the labels of those left out: with window
    figures, only what an agent's window runs with (`window_ready`, or a `CachePolicy`)."""
    chosen = list(grid if grid is not None else LOCOMO_GRID)
    check_grid(chosen, target, keys, policies=True)
    if not any(k.startswith("window@") for k in keys):
        return chosen, []
    ready = [g for g in chosen if isinstance(g, CachePolicy) or window_ready(g)]
    left = [label_of(g) for g in chosen if g not in ready]
    if grid is not None and left:
        raise ConfigError(
            f"`grid` holds settings an agent's window does not run with ({', '.join(left)}): "
            "an `Agent` builds its retrieval source with the defaults of all but the memory's "
            "search fields; cross-validate them on the ranking figures alone (`budgets=()`)"
        )
    return ready, left


def _check_settings(plain: RetrievalSettings, budgets: Sequence[int]) -> None:
    if budgets and not window_ready(plain):
        raise ConfigError(
            f"the window figures are an `Agent`'s windows, whose retrieval runs with the "
            f"default {plain.label()!r} would change (only the memory's search fields, "
            f"{', '.join(_memory_fields(plain))}, reach it); measure it on the ranking "
            "figures alone (`budgets=()`, on the command line `--budgets ''`)"
        )


def _locomo_config(
    path: str | Path, emb: Any, plain: RetrievalSettings, policy: CachePolicy | None,
    budgets: Sequence[int], limit: int | None, date_in_text: bool, dense: bool,
) -> dict[str, Any]:  # fmt: skip
    used = policy or WindowSettings().cache_policy
    return {
        "dense": dense,
        "embedder": emb.name if emb is not None else None,
        "ranking": MAIN_STAGE,
        "budgets": list(budgets),
        "limit": limit,
        "date_in_text": date_in_text,
        "figures": dict(_FIGURES),
        "window_recipe": {
            "builder": "Agent.preview",
            "instructions": SYSTEM,
            "reserve": WINDOW_RESERVE,
            "history_depth": DEFAULT_HISTORY_DEPTH,
            "policy": label_of(used),
            "max_dynamic": used.max_dynamic,
        },
        "settings": plain.label(),
        "policy": label_of(used),
    }


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
    only: Sequence[str] = (),
    progress: Progress | None = None,
) -> dict[str, Any]:
    """R@5/10/20, nDCG@10 and evidence in the agent's window @ each budget on a LoCoMo file
    (the module docstring says how each is built), overall, per category and per
    conversation (``conversations``).

    `dense`: hybrid search with `embedder` (default: `default_embedder()`); else lexical
    only. `limit`: only the first `limit` questions (in file order). `only`: only the
    conversations of these `sample_id`s (to hold one out, or report it apart). `stages`:
    also the lexical / dense / fused rankings (needs `dense`). `cache_dir`: keep document and
    query vectors on disk there between runs (e.g.
    `loomctx.evaluation._vector_cache.DEFAULT_CACHE_DIR`). `settings`: the retrieval
    constants of the plain figures (default `RetrievalSettings()`; with window figures, only
    those an agent's window runs with, `window_ready`); `policy`: the agent's `CachePolicy`
    (default: the window recipe's).

    `cv`: also ``cross_validated``, leave-one-conversation-out: every setting of `grid`
    (default `loomctx.evaluation.crossval.LOCOMO_GRID`, with window figures less the
    settings an agent's window does not run with, named under ``left_out``; a `CachePolicy`
    in it stands for the plain retrieval settings with that policy, a `RetrievalSettings`
    for those settings with the plain policy) is measured once per conversation; each
    conversation is then reported under the setting that maximizes `cv_target` on the other
    conversations (`loomctx.evaluation.crossval.cross_validate`).
    """
    if limit is not None and limit < 1:
        raise ConfigError(f"`limit` must be >= 1 or None, got {limit!r}")
    if any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in budgets):
        raise ConfigError(f"`budgets` must be ints >= 1, got {budgets!r}")
    plain = settings or RetrievalSettings()
    _check_settings(plain, budgets)
    rank_keys = [f"r@{k}" for k in LOCOMO_KS] + ["ndcg@10"]
    window_keys = [f"window@{b}" for b in budgets]
    chosen_grid, left_out = _grid(grid, cv_target, rank_keys + window_keys) if cv else ([], [])
    conversations = _chosen(load_locomo(path), only, path)
    emb = bench_embedder(dense, embedder, cache_dir)
    run_stages = stages_of(dense, stages)
    rows: list[dict[str, Any]] = []
    stage_rows: dict[str, list[dict[str, Any]]] = {s: [] for s in run_stages}
    table: dict[str, dict[str, list[dict[str, Any]]]] = {}
    skipped = 0
    left = limit
    runs = 1 + len(chosen_grid)
    clock = Clock(total=sum(len(c.turns) for c in conversations) * runs)
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
        rankers = open_rankers(conv.sample_id, tasks, emb)
        try:
            rankers.configure(plain)
            rankers.policy = policy
            for stage in run_stages:
                stage_rows[stage].extend(_locomo_rows(rankers, usable, budgets, texts, stage))
            own = stage_rows[MAIN_STAGE][-len(usable) :]
            for row in own:
                row["conversation"] = conv.sample_id
            rows.extend(own)
            for setting in chosen_grid:
                got = _grid_rows(rankers, setting, plain, policy, own, (usable, budgets, texts))
                for row in got:
                    row["conversation"] = conv.sample_id
                table.setdefault(label_of(setting), {})[conv.sample_id] = got
        finally:
            close_rankers(rankers, emb)
    keys = rank_keys + window_keys
    result: dict[str, Any] = {
        "dataset": "locomo",
        "path": str(path),
        **_locomo_report(rows, keys),
        "skipped": skipped,
        "config": _locomo_config(path, emb, plain, policy, budgets, limit, date_in_text, dense),
    }
    if stages:
        result["stages"] = {s: _locomo_report(stage_rows[s], rank_keys) for s in run_stages}
    if cv:
        result["cross_validated"] = cv_report(
            table, cv_target, len(chosen_grid), lambda r: _locomo_report(r, keys)
        )
        result["cross_validated"]["left_out"] = left_out
    return result


def _chosen(
    conversations: list[LocomoConversation], only: Sequence[str], path: str | Path
) -> list[LocomoConversation]:
    """The conversations named in `only` (all without), or `ConfigError` naming the unknown."""
    if not only:
        return conversations
    names = [c.sample_id for c in conversations]
    missing = [n for n in only if n not in names]
    if missing:
        raise ConfigError(
            f"no conversation {', '.join(map(repr, missing))} in {str(path)!r}; it has "
            f"{', '.join(map(repr, names))}"
        )
    return [c for c in conversations if c.sample_id in only]


def _grid_rows(
    rankers: Rankers, setting: RetrievalSettings | CachePolicy, plain: RetrievalSettings,
    policy: CachePolicy | None, measured: list[dict[str, Any]],
    work: tuple[Sequence[LocomoQuestion], Sequence[int], Mapping[str, str]],
) -> list[dict[str, Any]]:  # fmt: skip
    """One conversation's rows under one grid `setting` (those `measured` already when it is
    the plain run's)."""
    if isinstance(setting, RetrievalSettings):
        same = setting == plain
        rankers.configure(setting)
        rankers.policy = policy
    else:
        same = setting == (policy or WindowSettings().cache_policy)
        rankers.configure(plain)
        rankers.policy = setting
    if same:
        return measured
    return _locomo_rows(rankers, *work, MAIN_STAGE)

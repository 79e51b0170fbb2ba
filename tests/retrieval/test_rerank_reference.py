"""The reranker against a plain reference, bit for bit: every signal read piece by piece from
the evidence (no value remembered between calls), summed and sorted as the reranker's
docstring says. The fast paths (a task's session worked out once per task object, a knowledge
hit's read from its fields) must rank, score and report exactly as the reference does."""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from loomctx.knowledge import KnowledgeHit
from loomctx.memory.task import ASSISTANT_MESSAGE, USER_MESSAGE, Task
from loomctx.retrieval import (
    ContentLengthSignal,
    Evidence,
    OriginDiversitySignal,
    QueryOverlapSignal,
    RelevanceSignal,
    Reranker,
    RoleSignal,
    SessionSignal,
    SpeakerSignal,
    TimeSignal,
    default_signals,
)
from loomctx.retrieval.evidence import session_of
from loomctx.retrieval.reranker import spread_sessions
from loomctx.retrieval.signals import Signal
from loomctx.text import terms

# --- the reference: each signal written out piece by piece ---------------------------------


def _session(e: Evidence) -> Hashable | None:
    task = e.item
    for where in ("metadata", "parameters"):
        fields = getattr(task, where, None)
        sid = fields.get("session_id") if isinstance(fields, Mapping) else None
        if isinstance(sid, str) and sid:
            return sid
    when = getattr(task, "created_at", None)
    return when.date() if isinstance(when, datetime) else None


def _speaker(e: Evidence) -> str | None:
    parameters = getattr(e.item, "parameters", None)
    if not isinstance(parameters, Mapping):
        return None
    speaker = parameters.get("speaker")
    return (speaker.strip() or None) if isinstance(speaker, str) else None


def _group(e: Evidence) -> Hashable:
    session = _session(e)
    if session is not None:
        return session
    document = e.metadata.get("document_id")
    if isinstance(document, str) and document:
        return ("document", e.origin, document)
    return ("piece", e.key)


def _reference_scores(signal: Signal, query: str, pool: Sequence[Evidence]) -> list[float]:
    n = len(pool)
    if isinstance(signal, RelevanceSignal):
        best = max((e.relevance for e in pool), default=1.0)
        return [0.0] * n if best <= 0 else [min(1.0, max(0.0, e.relevance / best)) for e in pool]
    if isinstance(signal, QueryOverlapSignal):
        wanted = sorted(set(terms(query)))
        df = {t: sum(1 for e in pool if t in e.terms) for t in wanted}
        weights = {t: math.log(1 + (n + 1) / (df[t] + 0.5)) for t in wanted}
        total = sum(weights.values())
        if not total:
            return [0.0] * n
        return [sum(w for t, w in weights.items() if t in e.terms) / total for e in pool]
    if isinstance(signal, OriginDiversitySignal):
        counts = Counter(e.origin for e in pool)
        share = {o: c / n for o, c in counts.items()}
        return [0.3 if share[e.origin] > 0.7 else 0.6 if share[e.origin] > 0.5 else 1.0
                for e in pool]  # fmt: skip
    if isinstance(signal, ContentLengthSignal):
        lengths = [len(e.text.strip()) for e in pool]
        low, high = signal.low, signal.high
        return [k / low if k < low else 1.0 if k <= high else high / k for k in lengths]
    if isinstance(signal, SpeakerSignal):
        speakers = [_speaker(e) for e in pool]
        named = {
            s for s in speakers if s and re.search(rf"(?<!\w){re.escape(s)}(?!\w)", query, re.I)
        }
        if not named:
            return [1.0] * n
        return [1.0 if s is None or s in named else 0.0 for s in speakers]
    if isinstance(signal, TimeSignal):
        out = []
        for e in pool:
            match = e.metadata.get("time_match")
            out.append(float(match) if isinstance(match, int | float) else 1.0)
        return out
    if isinstance(signal, RoleSignal):
        first = re.search(r"(?<!\w)(?:i|me|my|mine|myself)(?!\w)|我", query, re.I)
        second = re.search(r"(?<!\w)(?:you|your|yours|yourself)(?!\w)|你|您", query, re.I)
        if not first or second:
            return [1.0] * n
        return [0.0 if getattr(e.item, "action", None) == ASSISTANT_MESSAGE else 1.0 for e in pool]
    if isinstance(signal, SessionSignal):
        groups = [_group(e) for e in pool]
        found: dict[Hashable, list[float]] = {}
        for e, g in zip(pool, groups, strict=True):
            found.setdefault(g, []).append(max(0.0, e.relevance))
        mass = {g: sum(sorted(v, reverse=True)[: signal.top]) for g, v in found.items()}
        best = max(mass.values(), default=0.0)
        return [1.0] * n if best <= 0 else [mass[g] / best for g in groups]
    return [float(x) for x in signal.score(query, pool)]


def reference_rerank(reranker: Reranker, query: str, pool: Sequence[Evidence]) -> list[Evidence]:
    kept: dict[str, Evidence] = {}
    for e in pool:
        seen = kept.get(e.fingerprint)
        dense = -math.inf if e.vector_score is None else e.vector_score
        if seen is None or dense > (-math.inf if seen.vector_score is None else seen.vector_score):
            kept[e.fingerprint] = e
    unique = list(kept.values())
    if not unique:
        return []
    scored = {s.name: _reference_scores(s, query, unique) for s in reranker.signals}
    final = np.zeros(len(unique))
    for name, weight in reranker.weights.items():
        final = final + np.array(scored[name]) * weight
    final = final / sum(reranker.weights.values())
    keep = [i for i in range(len(unique)) if final[i] >= reranker.min_score]
    order = sorted(keep, key=lambda i: -final[i])  # stable: ties keep recall order
    ranked = [
        unique[i].rescored(
            {"score": float(final[i])}, signals={n: float(scored[n][i]) for n in scored}
        )
        for i in order
    ]
    spread = reranker.session_spread
    return spread_sessions(ranked, spread, session=_session) if spread else ranked


# --- pools that reach every branch ------------------------------------------------------------

WORDS = "caroline melanie adoption agency support group kitchen gadget fryer bike paint lake"
QUERIES = [
    "What did Caroline say about the adoption agency?",
    "what kitchen gadget did I get before the fryer?",
    "What did you suggest I paint, Melanie?",
    "where is the lake",
    "我上周买了什么？",
    "",
]


def _text(rng: random.Random) -> str:
    words = WORDS.split()
    text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 12)))
    return text * rng.choice([1, 1, 1, 30, 120])  # short, in the 200-800 band, long


def _scores(rng: random.Random) -> dict[str, float]:
    scores = {"relevance": rng.choice([0.0, -0.1, rng.random(), rng.random(), 1.0])}
    if rng.random() < 0.6:
        scores["vector_score"] = rng.choice([rng.random(), -0.2, 0.0])
    if rng.random() < 0.6:
        scores["lexical_score"] = rng.random()
    return scores


def _task(rng: random.Random, n: int, tasks: list[Task]) -> Task:
    if tasks and rng.random() < 0.3:
        return rng.choice(tasks)  # the same task object again, as memory search returns it
    where = rng.choice(["metadata", "parameters", "neither", "neither"])
    session = rng.choice(["s1", "s2", "", 7])
    parameters: dict[str, Any] = {"content": "x"}
    metadata: dict[str, Any] = {}
    if where != "neither":
        (parameters if where == "parameters" else metadata)["session_id"] = session
    if rng.random() < 0.5:
        parameters["speaker"] = rng.choice(["Caroline", "Melanie", " Caroline ", "", 3])
    task = Task(
        task_id=f"t{n}",
        action=rng.choice([USER_MESSAGE, ASSISTANT_MESSAGE, "search_web"]),
        parameters=parameters,
        metadata=metadata,
        created_at=datetime(2024, 5, 1, tzinfo=UTC) + timedelta(hours=rng.randint(0, 72)),
    )
    tasks.append(task)
    return task


def _hit(rng: random.Random, n: int, text: str) -> KnowledgeHit:
    metadata: dict[str, Any] = {"source": "a.md"}
    if rng.random() < 0.3:
        metadata["session_id"] = rng.choice(["s1", "k", ""])
    return KnowledgeHit(
        chunk_id=f"k{n}",
        document_id=rng.choice(["guide", "faq", ""]),
        text=text,
        score=0.5,
        vector_score=None,
        lexical_score=None,
        metadata=metadata,
        knowledge_base="kb",
    )


def pool(rng: random.Random, size: int) -> list[Evidence]:
    out: list[Evidence] = []
    tasks: list[Task] = []
    for n in range(size):
        kind = rng.choice(["task", "task", "hit", "plain"])
        text = _text(rng) if not out or rng.random() > 0.1 else rng.choice(out).text.upper()
        metadata: dict[str, Any] = {}
        if rng.random() < 0.3:
            metadata["time_match"] = rng.choice([0.0, 0.25, 1.0, 1, "soon"])
        item: Any = None
        origin = "memory"
        if kind == "task":
            item = _task(rng, n, tasks)
        elif kind == "hit":
            item = _hit(rng, n, text)
            origin = rng.choice(["knowledge:kb", "knowledge:other"])
            metadata |= {"chunk_id": item.chunk_id, "document_id": item.document_id}
        scores = _scores(rng)
        out.append(Evidence(id=f"e{n}", origin=origin, text=text, item=item, metadata=metadata,
                            scores=scores))  # fmt: skip
    return out


RERANKERS = [
    Reranker(),
    Reranker(session_spread=0.5),
    Reranker(weights={"session": 0.0, "speaker": 0.7}, min_score=0.3),
    Reranker([SessionSignal(top=1), RoleSignal(), QueryOverlapSignal(0.0), TimeSignal()]),
]


@pytest.mark.parametrize("seed", range(40))
def test_the_reranker_ranks_scores_and_reports_as_the_plain_reference_does(seed: int) -> None:
    rng = random.Random(seed)
    found = pool(rng, rng.choice([0, 1, 5, 40, 160]))
    for reranker in RERANKERS:
        for query in QUERIES:
            got = reranker.rerank(query, found)
            assert repr(got) == repr(reference_rerank(reranker, query, found)), (seed, query)
            # Again: what is remembered between calls changes nothing.
            assert repr(reranker.rerank(query, found)) == repr(got)


@pytest.mark.parametrize("seed", range(10))
def test_every_default_signal_scores_as_the_reference_does(seed: int) -> None:
    rng = random.Random(seed)
    found = pool(rng, 60)
    for signal in default_signals():
        for query in QUERIES:
            got = signal.score(query, found).tolist()
            assert got == _reference_scores(signal, query, found), (signal.name, query)


def test_a_tasks_session_is_read_again_for_a_new_task_object() -> None:
    """The session is remembered per task object: a changed task (`Task.evolve`, a new
    object) is read anew, and the remembered value is what reading it gives."""
    task = Task(task_id="t", action=USER_MESSAGE, metadata={"session_id": "s1"})
    piece = Evidence(id="t", origin="memory", text="x", item=task)
    assert session_of(piece) == session_of(piece) == "s1"
    moved = task.evolve(metadata={"session_id": "s2"})
    assert session_of(Evidence(id="t", origin="memory", text="x", item=moved)) == "s2"
    assert session_of(piece) == "s1"

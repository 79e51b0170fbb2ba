"""The golden rankings: what memory search, knowledge-base search and the unified retrieval
source return on a fixed real corpus (a LoCoMo dev conversation, `golden_corpus.json`).

`snapshot()` computes them; `golden_rankings.json` holds them as they were before retrieval
was rebuilt over arrays, and `test_golden.py` compares the two exactly (scores by `repr`), so
a structural change that moves any ranking or any score by one bit fails. Regenerate only for
a change of scoring that was measured better (LoCoMo, the cost bench), with
``PYTHONPATH=src python -m tests.search.golden``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from loomctx import MemoryEmbedding
from loomctx.context.block import BuildContext, TokenBudget
from loomctx.context.sources import UnifiedRetrievalSource
from loomctx.knowledge import KnowledgeBase
from loomctx.memory.core import LoomMemory
from loomctx.memory.task import ASSISTANT_MESSAGE, USER_MESSAGE, Task
from loomctx.stores.sqlite import SQLiteStore
from loomctx.testing import HashingEmbedder
from loomctx.tokens import TiktokenCounter

HERE = Path(__file__).parent
CORPUS = HERE / "golden_corpus.json"
GOLDEN = HERE / "golden_rankings.json"

# Queries beyond the dataset's questions: a time named ("last week", "5 days ago"; resolved
# against the memory's clock), a question asking when, words no turn holds.
EXTRA_QUERIES = (
    "what did Gina say last week about her store?",
    "what happened 5 days ago at the dance studio?",
    "When did Jon open his dance studio?",
    "zebra quantum xylophone",
)


def _when(date: str) -> datetime:
    return datetime.strptime(date.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def corpus() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(CORPUS.read_text(encoding="utf-8"))
    return data


def tasks(data: dict[str, Any]) -> list[Task]:
    """One task per turn, recorded when its session took place (a second apart per turn)."""
    out = []
    seen: dict[int, int] = {}
    for t in data["turns"]:
        n = seen[t["session"]] = seen.get(t["session"], -1) + 1
        out.append(
            Task(
                task_id=t["dia_id"],
                action=ASSISTANT_MESSAGE if t["speaker"] == data["speakers"][1] else USER_MESSAGE,
                parameters={"content": t["text"], "speaker": t["speaker"]},
                created_at=_when(t["date"]) + timedelta(seconds=n),
            )
        )
    return out


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _f(x: float | None) -> str | None:
    return None if x is None else repr(float(x))


def _memory_hits(memory: LoomMemory, query: str, **kw: Any) -> list[list[Any]]:
    return [
        [
            h.task.task_id,
            _f(h.score),
            list(h.via),
            _f(h.lexical_score),
            _f(h.vector_score),
            _f(h.time_match),
        ]
        for h in memory.search(query, **kw)
    ]


def snapshot() -> dict[str, Any]:
    """Every ranking the golden test pins, JSON-ready."""
    data = corpus()
    all_tasks = tasks(data)
    queries = [*data["questions"], *EXTRA_QUERIES]
    last = max(t.created_at for t in all_tasks)
    clock = lambda: last + timedelta(days=6)  # noqa: E731
    counter = TiktokenCounter()
    out: dict[str, Any] = {}
    store = SQLiteStore(":memory:")
    dense, fast = HashingEmbedder(64), HashingEmbedder(16)
    half = len(all_tasks) // 2
    # Another namespace under the same prefix: a wider `search_scope` reads both.
    other = LoomMemory(
        "other",
        store=store,
        embedder=None,
        embedding=MemoryEmbedding(fast_embedder=None),
        clock=clock,
        counter=counter,
    )
    other.add_tasks(
        [
            Task(
                task_id=f"o{t.task_id}",
                action=t.action,
                parameters=t.parameters,
                created_at=t.created_at,
            )
            for t in all_tasks[:80]
        ]
    )
    fused = LoomMemory(
        "golden",
        store=store,
        embedder=dense,
        embedding=MemoryEmbedding(fast_embedder=fast, in_background=False),
        clock=clock,
        counter=counter,
    )
    fused.add_tasks(all_tasks[:half])
    fused.promote_tasks()
    fused.add_tasks(all_tasks[half:])
    background = fused.background
    assert background is not None
    assert background.first is not None
    background.first.drain()  # every record has the fast vector, none the dense one yet
    out["memory_fast_only"] = {q: _memory_hits(fused, q, limit=12) for q in queries}
    background.drain()
    lexical = LoomMemory(
        "golden",
        store=store,
        embedder=None,
        embedding=MemoryEmbedding(fast_embedder=None),
        clock=clock,
        counter=counter,
    )
    wide = LoomMemory(
        "golden",
        store=store,
        embedder=None,
        embedding=MemoryEmbedding(fast_embedder=None),
        search_scope=("default",),
        clock=clock,
        counter=counter,
    )
    no_fast = LoomMemory(
        "golden",
        store=store,
        embedder=dense,
        embedding=MemoryEmbedding(fast_embedder=None, in_background=False),
        clock=clock,
        counter=counter,
    )
    exclude = [t.task_id for t in all_tasks[10:40:3]]
    for name, memory in (("fused", fused), ("lexical", lexical), ("wide", wide),
                         ("no_fast", no_fast)):  # fmt: skip
        out[f"memory_{name}"] = {
            q: {
                "deep": _memory_hits(memory, q, limit=25, pool=200),
                "default": _memory_hits(memory, q, limit=8),
                "exclude": _memory_hits(memory, q, limit=10, exclude=exclude),
            }
            for q in queries
        }
    kb = KnowledgeBase(
        "notes",
        SQLiteStore(":memory:"),
        embedder=dense,
        fast_embedder=fast,
        embed_in_background=False,
        counter=counter,
        chunk_tokens=120,
        overlap_tokens=20,
    )
    sessions: dict[int, list[str]] = {}
    for t in data["turns"]:
        sessions.setdefault(t["session"], []).append(f"{t['speaker']}: {t['text']}")
    for n, lines in sorted(sessions.items()):
        kb.add_text("\n".join(lines), document_id=f"session-{n:02}")

    def kb_hits() -> dict[str, Any]:
        return {
            q: [
                [h.chunk_id, _f(h.score), _f(h.vector_score), _f(h.lexical_score)]
                for h in kb.search_sync(q, limit=15)
            ]
            for q in queries
        }

    out["knowledge_fast_only"] = kb_hits()
    assert kb.background is not None
    kb.background.drain()
    out["knowledge"] = kb_hits()
    lexical_kb = KnowledgeBase(
        "notes", kb.store, embedder=None, counter=counter, chunk_tokens=120, overlap_tokens=20
    )
    out["knowledge_lexical"] = {
        q: [[h.chunk_id, _f(h.score)] for h in lexical_kb.search_sync(q, limit=15)] for q in queries
    }
    source = UnifiedRetrievalSource(fused, [kb])
    ctx = BuildContext(counter=counter)

    async def blocks() -> dict[str, Any]:
        found = {}
        for q in queries:
            got = await source.collect(q, TokenBudget(tokens=1500, ceiling=3000), ctx=ctx)
            found[q] = [
                [b.id, _digest(b.content), b.token_count, _f(b.priority), b.truncatable, b.metadata]
                for b in got
            ]
        return found

    out["unified"] = asyncio.run(blocks())
    for m in (other, fused, lexical, wide, no_fast):
        m.close()
    kb.close()
    lexical_kb.close()
    store.close()
    return out


def dumps(snap: dict[str, Any]) -> str:
    return json.dumps(snap, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


if __name__ == "__main__":
    GOLDEN.write_text(dumps(snapshot()) + "\n", encoding="utf-8")

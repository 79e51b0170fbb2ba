"""LoomMemory.search: value fusion of lexical and dense scores, and neighbour smoothing."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomctx import MemoryEmbedding, MemoryRanking, MemoryTiers
from loomctx.errors import ConfigError
from loomctx.memory._found import rows_of as _rows
from loomctx.memory.core import LoomMemory, MemoryHit
from loomctx.memory.task import MemoryTier, Task, task_text
from loomctx.stores.base import Op, Rank, StoreContext
from loomctx.stores.sqlite import SQLiteStore
from loomctx.testing.embedders import HashingEmbedder
from tests.retrieval.fixtures import open_store, remember, turn

QUESTION = "staging database port"
CHAT = [
    ("user", "Which port does the staging database listen on?"),
    ("assistant", "It is 5433, changed last spring."),  # the answer: no word of the query
    ("user", "Who bakes sourdough for the team lunch?"),
    ("assistant", "Maria brings loaves on Fridays."),
    (
        "user",
        "On the long train ride I skimmed a thick old database textbook, a novel and "
        "two magazines.",
    ),
    ("assistant", "Sounds like a long commute."),
    ("user", "What colour is the office kettle?"),
    ("assistant", "Bright red enamel."),
]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with open_store(tmp_path) as s:
        yield s


def memory_of(store: SQLiteStore, *, dense: bool = True, **options: object) -> LoomMemory:
    memory = LoomMemory(
        "session",
        store=store,
        embedder=HashingEmbedder(256) if dense else None,
        embedding=MemoryEmbedding(in_background=False),
        ranking=MemoryRanking(**options),
    )  # type: ignore[arg-type]
    remember(memory, CHAT)
    return memory


def ranks(hits: Sequence[MemoryHit]) -> list[str]:
    return [h.task.task_id for h in hits]


def test_lexical_only_finds_what_shares_words(store: SQLiteStore) -> None:
    hits = memory_of(store, dense=False).search(QUESTION, limit=10)
    assert ranks(hits) == ["m0", "m4"]
    assert all(h.via == ("lexical",) and h.vector_score is None for h in hits)
    # BM25 relative to the best lexical hit.
    assert hits[0].lexical_score == 1.0
    assert hits[1].lexical_score is not None
    assert 0 < hits[1].lexical_score < 1


def test_hybrid_adds_dense_hits_and_their_cosine(store: SQLiteStore) -> None:
    memory = memory_of(store)
    hits = memory.search(QUESTION, limit=10)
    assert ranks(hits)[0] == "m0"
    assert sorted(ranks(hits)) == [f"m{i}" for i in range(len(CHAT))]  # dense finds every turn
    embedder = memory.embedder
    assert embedder is not None
    query = embedder.embed([QUESTION], kind="query")[0]
    for h in hits:
        assert "dense" in h.via
        assert ("lexical" in h.via) == (h.lexical_score is not None)
        doc = embedder.embed([task_text(h.task)], kind="document")[0]
        assert h.vector_score == pytest.approx(float(np.dot(query, doc)), abs=1e-5)
    assert {h.task.task_id for h in hits if h.lexical_score is not None} == {"m0", "m4"}


def fused_by_hand(hits: Sequence[MemoryHit], lexical: float, dense: float) -> dict[str, float]:
    """The documented fusion: BM25 relative to the best (as `lexical_score`), cosine min-max
    scaled over the dense hits, weighted mean. Needs every task among `hits`."""
    cosines = [h.vector_score for h in hits if h.vector_score is not None]
    low, high = min(cosines), max(cosines)
    out = {}
    for h in hits:
        scaled = (h.vector_score - low) / (high - low) if h.vector_score is not None else 0.0
        out[h.task.task_id] = (lexical * (h.lexical_score or 0.0) + dense * scaled) / (
            lexical + dense
        )
    return out


@pytest.mark.parametrize("weights", [(0.5, 0.5), (0.8, 0.2), (0.0, 1.0), (1.0, 0.0)])
def test_scores_fuse_by_value_with_the_fusion_weights(
    store: SQLiteStore, weights: tuple[float, float]
) -> None:
    memory = memory_of(store, fusion_weights=weights, neighbour_weight=0.0, answer_weight=0.0)
    hits = memory.search(QUESTION, limit=20)
    # Every turn, each found by the dense search at least, even with its weight 0.
    assert sorted(ranks(hits)) == [f"m{i}" for i in range(len(CHAT))]
    expected = fused_by_hand(hits, *weights)
    assert {h.task.task_id: h.score for h in hits} == pytest.approx(expected)


def test_lexical_weight_alone_scores_as_lexical_search(store: SQLiteStore, tmp_path: Path) -> None:
    # Without neighbours: with them, dense search also finds the turns next to a lexical hit.
    hybrid = memory_of(store, fusion_weights=(1.0, 0.0), neighbour_weight=0.0, answer_weight=0.0)
    with SQLiteStore(tmp_path / "other.db") as other:
        lexical = memory_of(other, dense=False, neighbour_weight=0.0, answer_weight=0.0).search(
            QUESTION, limit=2
        )
    assert ranks(hybrid.search(QUESTION, limit=2)) == ranks(lexical)
    assert [h.score for h in hybrid.search(QUESTION, limit=2)] == pytest.approx(
        [h.score for h in lexical]
    )


def test_neighbour_smoothing_lifts_the_answer_after_a_strong_hit(
    store: SQLiteStore, tmp_path: Path
) -> None:
    plain = memory_of(store, neighbour_weight=0.0, answer_weight=0.0).search(QUESTION, limit=3)
    # Without neighbours, the answer (no word of the query) scores 0, below a weak distractor.
    assert ranks(plain)[:2] == ["m0", "m4"]
    assert {h.task.task_id: h.score for h in plain}.get("m1", 0.0) == 0.0
    with SQLiteStore(tmp_path / "smooth.db") as other:
        smooth = memory_of(other, neighbour_weight=0.3, answer_weight=0.0).search(
            QUESTION, limit=len(CHAT)
        )
    assert ranks(smooth)[:3] == ["m0", "m1", "m4"]
    # score = (own + 0.3 * (previous + next)) / (1 + 2 * 0.3), over the fused scores.
    fused = fused_by_hand(smooth, 0.5, 0.5)
    score = {h.task.task_id: h.score for h in smooth}
    for i in range(len(CHAT)):
        near = sum(fused.get(f"m{j}", 0.0) for j in (i - 1, i + 1))
        assert score[f"m{i}"] == pytest.approx((fused[f"m{i}"] + 0.3 * near) / 1.6)


def test_answer_weight_lifts_the_message_after_a_question(
    store: SQLiteStore, tmp_path: Path
) -> None:
    # m0 asks ("Which port ... ?"), m1 answers in words of its own; m4 -> m5 asks nothing.
    plain = memory_of(store, answer_weight=0.0).search(QUESTION, limit=len(CHAT))
    before = {h.task.task_id: h.score for h in plain}
    with SQLiteStore(tmp_path / "answer.db") as other:
        hits = memory_of(other, answer_weight=0.7).search(QUESTION, limit=len(CHAT))
    score = {h.task.task_id: h.score for h in hits}
    assert ranks(hits)[:2] == ["m0", "m1"]
    assert score["m1"] / score["m0"] > before["m1"] / before["m0"]
    # score = (own + 0.3 * (previous + next) + 0.7 * previous if it asks) / (1 + 0.6 + 0.7).
    fused = fused_by_hand(hits, 0.5, 0.5)
    asks = {i for i, (_, text) in enumerate(CHAT) if "?" in text}
    assert asks == {0, 2, 6}
    for i in range(len(CHAT)):
        near = sum(fused.get(f"m{j}", 0.0) for j in (i - 1, i + 1))
        answer = 0.7 * fused[f"m{i - 1}"] if i - 1 in asks else 0.0
        assert score[f"m{i}"] == pytest.approx((fused[f"m{i}"] + 0.3 * near + answer) / 2.3)
    assert all(0 <= s <= 1 for s in score.values())


def test_answer_weight_skips_tool_calls_and_is_checked(tmp_path: Path) -> None:
    def scores(weight: float, name: str) -> dict[str, float]:
        with SQLiteStore(tmp_path / name) as store:
            memory = LoomMemory(
                "session", store=store, embedder=None, ranking=MemoryRanking(answer_weight=weight)
            )
            url = {"url": "https://x.test/?q=port"}
            memory.add_task(
                Task(task_id="call", action="fetch", parameters=url, result="staging database 5433")
            )
            memory.add_task(turn("after", "assistant", "the staging database port is noted"))
            hits = memory.search("staging database port", limit=5)
            return {h.task.task_id: h.score for h in hits}

    # `after` follows a tool call with a "?" in its arguments: not a question, no bonus; the
    # scores only share the larger divisor (1 + 0.6 + 1 instead of 1 + 0.6).
    off, on = scores(0.0, "off.db"), scores(1.0, "on.db")
    assert on == pytest.approx({k: v * 1.6 / 2.6 for k, v in off.items()})
    with SQLiteStore(tmp_path / "bad.db") as store, pytest.raises(ConfigError, match="answer"):
        LoomMemory("session", store=store, embedder=None, ranking=MemoryRanking(answer_weight=1.5))


def test_exclude_blank_and_limit(store: SQLiteStore) -> None:
    memory = memory_of(store)
    assert "m0" not in ranks(memory.search(QUESTION, limit=10, exclude=["m0"]))
    assert memory.search("   ", limit=5) == []
    assert memory.search(QUESTION, limit=0) == []
    assert len(memory.search(QUESTION, limit=3)) == 3


def test_a_task_archived_straight_to_l4_has_no_conversation_neighbours(
    store: SQLiteStore,
) -> None:
    memory = LoomMemory("session", store=store, embedder=None)
    memory.add_task(turn("first", "user", "the staging database listens on port 5433"))
    memory.add_task(turn("lunch", "user", "lunch is at noon"))
    memory.add_task(turn("later", "user", "we ordered a new database textbook"))
    memory.add_task(turn("kettle", "user", "the kettle is red"))
    memory.add_task(turn("archived", "user", "we ordered a new database manual"), MemoryTier.L4)
    score = {h.task.task_id: h.score for h in memory.search("staging database", limit=5)}
    # `later` and `archived` match the query alike and neither follows `first` in the chat.
    assert score["archived"] == pytest.approx(score["later"])


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"fusion_weights": (0.0, 0.0)}, "not both 0"),
        ({"fusion_weights": (-0.5, 1.0)}, r"weights >= 0"),
        ({"fusion_weights": (0.2, 0.3, 0.5)}, r"\(lexical, dense\)"),
        ({"fusion_weights": (1.0,)}, r"\(lexical, dense\)"),
        ({"neighbour_weight": -0.1}, r"`neighbour_weight` must be in 0..1"),
        ({"neighbour_weight": 1.5}, r"`neighbour_weight` must be in 0..1"),
        ({"neighbour_weight": math.nan}, r"`neighbour_weight` must be in 0..1"),
    ],
)
def test_fusion_settings_are_validated(options: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        MemoryRanking(**options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options",
    [
        {"fusion_weights": (math.nan, 0.5)},
        {"fusion_weights": (0.5, math.inf)},
        {"fusion_weights": ("0.5", "0.5")},
        {"neighbour_weight": "0.3"},
    ],
)
def test_non_finite_or_non_numeric_fusion_settings(options: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        MemoryRanking(**options)  # type: ignore[arg-type]


WORDS = st.sampled_from(
    ["port", "database", "staging", "数据库", "端口", "lunch", "kettle", "red", "5433", "the"]
)
SENTENCE = st.lists(WORDS, min_size=1, max_size=8).map(" ".join)


@given(
    turns=st.lists(SENTENCE, min_size=1, max_size=8),
    query=SENTENCE,
    weights=st.tuples(st.floats(0, 1), st.floats(0.01, 1)),
    neighbour=st.floats(0, 1),
    dense=st.booleans(),
)
def test_scores_stay_in_0_1_best_first(
    turns: list[str],
    query: str,
    weights: tuple[float, float],
    neighbour: float,
    dense: bool,
) -> None:
    memory = LoomMemory(
        "session",
        embedder=HashingEmbedder(32) if dense else None,
        embedding=MemoryEmbedding(in_background=False),
        ranking=MemoryRanking(fusion_weights=weights, neighbour_weight=neighbour),
    )
    remember(memory, [("user", t) for t in turns])
    hits = memory.search(query, limit=5)
    assert len(hits) <= 5
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    for h in hits:
        assert 0.0 <= h.score <= 1.0 + 1e-9
        assert h.lexical_score is None or 0.0 <= h.lexical_score <= 1.0
        assert (h.vector_score is not None) == ("dense" in h.via)
        assert h.vector_score is None or -1.0 - 1e-6 <= h.vector_score <= 1.0 + 1e-6
    memory.close()


def test_a_summarized_task_is_found_once_as_itself(store: SQLiteStore) -> None:
    # Nothing is important enough for L2, so what leaves L1 is summarized into L3.
    memory = LoomMemory(
        "session",
        store=store,
        tiers=MemoryTiers(max_l1_size=2, promote_threshold=1.0),
        embedder=None,
    )
    remember(memory, CHAT)
    memory.promote_tasks()  # what left L1 is summarized into L3 (and stays in L4)
    assert memory.get_l3_summaries()
    hits = memory.search("sourdough lunch", limit=5)
    assert ranks(hits) == ["m2"]
    assert hits[0].via == ("lexical", "summary")
    assert hits[0].task.parameters["content"] == CHAT[2][1]


def test_a_deeper_pool_finds_the_answer_its_question_lifts(store: SQLiteStore) -> None:
    # The answer shares one word with the query, and five turns share it more often: in the
    # default pool (3 x limit) it is not found at all; with a deeper one it is, and its
    # question lifts it above them.
    chat = [
        ("user", "Which port does the staging database listen on?"),
        ("assistant", "5433, on the staging box since last spring when we moved it."),
    ]
    chat += [("user", f"Staging, staging: round {i} of the staging play.") for i in range(5)]
    memory = LoomMemory("session", store=store, embedder=None)
    remember(memory, chat)
    assert "m1" not in ranks(memory.search(QUESTION, limit=2))
    assert "m1" not in ranks(memory.search(QUESTION, limit=2, pool=6))  # the default
    assert ranks(memory.search(QUESTION, limit=2, pool=20)) == ["m0", "m1"]
    assert len(memory.search(QUESTION, limit=2, pool=1)) == 2  # never fewer than `limit`


class _ChangedAfterRanking(SQLiteStore):
    """A store that another writer changes right after the next search ranks its hits
    (before the search reads their records)."""

    change: Callable[[SQLiteStore], None] | None = None

    def batch(self, ops: Sequence[Op], *, ctx: StoreContext | None = None) -> list[Any]:
        out = super().batch(ops, ctx=ctx)
        change, self.change = self.change, None
        if change is not None and any(isinstance(op, Rank) for op in ops):
            change(self)
        else:
            self.change = change
        return out


def test_a_task_changed_between_ranking_and_reading_is_found_next_time(tmp_path: Path) -> None:
    with _ChangedAfterRanking(tmp_path / "race.db") as store:
        memory = memory_of(store, dense=False)
        record = store.get(memory.namespace, "task:m0")
        assert record is not None
        task = {**record.data["task"], "metadata": {"edited": True}}
        store.change = lambda s: s.put(replace(record, data={**record.data, "task": task}))
        first = memory.search(QUESTION, limit=10)
        assert ranks(first) == ["m4"]  # m0's version changed before the search read it
        again = memory.search(QUESTION, limit=10)
        assert ranks(again) == ["m0", "m4"]
        assert again[0].task.metadata == {"edited": True}


@given(
    st.lists(st.tuples(st.integers(0, 30), st.booleans()), min_size=1, max_size=120),
    st.sampled_from([0, 1 << 58]),
)
def test_rows_of_hits_are_numpys_unique_and_first_task_pick(
    hits: list[tuple[int, bool]], offset: int
) -> None:
    """`_rows` (one packed sort) against `np.unique` and `np.lexsort`, the way it replaced;
    past a few hits, numbers offset by 2**58 are too large to pack and take numpy's way."""
    numbers = np.asarray([n + offset for n, _ in hits], dtype=np.intp)
    later = np.asarray([flag for _, flag in hits])
    _, want_rows = np.unique(numbers, return_inverse=True)
    pick = np.lexsort((np.arange(len(hits)), later, want_rows))
    want_chosen = pick[np.r_[True, want_rows[pick][1:] != want_rows[pick][:-1]]]
    rows, chosen = _rows(numbers, later)
    assert rows.tolist() == want_rows.tolist()
    assert chosen.tolist() == want_chosen.tolist()

"""The retrieval pipeline as functions: its order, and each stage adding scores to new values."""

from __future__ import annotations

import dataclasses

import pytest

from loomctx.retrieval import Evidence, QueryRewriter, Reranker, RetrievalSettings, retrieve
from loomctx.retrieval.evidence import new_evidence
from loomctx.retrieval.pipeline import after, hop_merge, rewritten
from tests.retrieval.fixtures import turn


def piece(pid: str, relevance: float, text: str | None = None) -> Evidence:
    return Evidence(
        id=pid,
        origin="memory",
        text=text or f"note {pid}",
        scores={"relevance": relevance, "lexical_score": 1.0},
    )


class Recalls:
    """A strict fake recall: hands out the pieces scripted for each query, in order, and
    records each query and limit it was asked for."""

    def __init__(self, script: dict[str, list[Evidence]]) -> None:
        self.script = script
        self.asked: list[tuple[str, int]] = []

    async def __call__(self, query: str, limit: int) -> list[Evidence]:
        self.asked.append((query, limit))
        if query not in self.script:
            raise AssertionError(f"unexpected recall of {query!r}")
        return self.script[query][:limit]


def test_after_ranks_a_rewritten_querys_new_pieces_below_the_weakest_first_one() -> None:
    found = [piece("a", 0.8), piece("b", 0.5)]
    extra = [piece("b", 0.9), piece("c", 0.6), piece("d", 0.2)]
    added = after(found, extra)
    assert [(e.id, e.relevance) for e in added] == [("c", 0.6 * 0.5), ("d", 0.2 * 0.5)]
    assert added[0].lexical_score == 1.0  # other scores travel on
    assert [e.relevance for e in extra] == [0.9, 0.6, 0.2]  # its inputs are as they were
    assert [e.relevance for e in after([], [piece("e", 0.4)])] == [0.4]


def test_hop_merge_raises_what_both_found_and_adds_the_rest_scaled() -> None:
    found = [piece("a", 0.8), piece("b", 0.5)]
    merged = hop_merge(found, [piece("b", 0.6), piece("z", 0.4)], 0.5)
    assert [(e.id, e.relevance) for e in merged] == [
        ("a", 0.8),
        ("b", 0.5 + 0.5 * 0.6),
        ("z", 0.4 * 0.5),
    ]
    assert merged[0] is found[0]  # untouched pieces are the same values
    assert found[1].relevance == 0.5


def test_a_query_is_rewritten_only_when_short_and_something_is_added() -> None:
    recent = [turn("t1", "user", "The OAuth2 refresh token rotates hourly; the token is short.")]
    rewriter = QueryRewriter(top_k=2)
    assert rewritten("and its interval?", rewriter, recent, max_terms=4) == (
        "and its interval? [token short]"
    )
    assert rewritten("and its interval?", None, recent, max_terms=4) is None
    assert rewritten("and its interval?", rewriter, [], max_terms=4) is None
    assert rewritten("one two three four five", rewriter, recent, max_terms=4) is None
    assert rewritten("oauth2 token refresh", rewriter, recent[:0], max_terms=4) is None


async def test_retrieve_runs_recall_rewrite_hop_and_rerank_in_that_order() -> None:
    recent = [turn("t1", "user", "Oscar marched in the parade; Oscar loves parades.")]
    first = [
        piece("m1", 0.9, "I marched in the parade with Oscar last spring."),
        piece("m2", 0.3, "The weather at the parade was fine."),
    ]
    recalls = Recalls(
        {
            "who marched?": first,
            "who marched? [parade Oscar]": [first[1], piece("m3", 0.8, "More parade news.")],
            "who marched? Oscar": [piece("m9", 0.7, "Oscar adopted a greyhound afterwards.")],
        }
    )
    ranked = await retrieve(
        "who marched?",
        recalls,
        limit=30,
        reranker=Reranker(),
        settings=RetrievalSettings(hop_weight=0.5, hop_terms=1),
        rewriter=QueryRewriter(top_k=2),
        recent=recent,
        recall_limit=20,
    )
    # The first recall at the grant's limit; the rewrite and the hop at most `recall_limit`.
    assert recalls.asked == [
        ("who marched?", 30),
        ("who marched? [parade Oscar]", 20),
        ("who marched? Oscar", 20),
    ]
    by_id = {e.id: e for e in ranked}
    assert by_id["m3"].relevance == pytest.approx(0.8 * 0.3)  # after the weakest first one
    assert by_id["m9"].relevance == pytest.approx(0.7 * 0.5)  # the hop's, at its weight
    assert by_id["m1"].relevance == 0.9
    assert all("score" in e.scores and e.signals for e in ranked)
    assert [e.score for e in ranked] == sorted((e.score for e in ranked), reverse=True)


async def test_retrieve_without_rewriter_or_hop_recalls_once() -> None:
    recalls = Recalls({"deploys": [piece("a", 0.4), piece("b", 0.8)]})
    ranked = await retrieve(
        "deploys", recalls, limit=5, reranker=Reranker(), settings=RetrievalSettings()
    )
    assert recalls.asked == [("deploys", 5)]
    assert [e.id for e in ranked] == ["b", "a"]


def test_new_evidence_is_the_value_the_constructor_makes() -> None:
    fields = {
        "id": "c1",
        "origin": "knowledge:kb",
        "text": "chunk",
        "item": object(),
        "metadata": {"document_id": "a.md"},
        "scores": {"relevance": 0.4},
        "signals": {"speaker": 1.0},
    }
    assert [f.name for f in dataclasses.fields(Evidence)] == list(fields)  # all set below
    made = new_evidence(**fields)
    assert made == Evidence(**fields)
    assert type(made) is Evidence
    assert repr(made) == repr(Evidence(**fields))
    assert new_evidence(**{**fields, "signals": None}) == Evidence(**{**fields, "signals": {}})
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.text = "changed"  # type: ignore[misc]
    assert made.rescored({"score": 0.7}) == Evidence(
        **{**fields, "scores": {"relevance": 0.4, "score": 0.7}}
    )

"""`fit_ceiling`, the first fit of a source's blocks within its ceiling, and the retrieval
injector that feeds it lazily: blocks are built and counted only for the candidates looked at."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from loomctx.context.block import ContextBlock
from loomctx.context.sources import RetrievalInjector
from loomctx.context.sources._common import MIN_CUT_TOKENS, fit_ceiling
from loomctx.retrieval.evidence import MEMORY_ORIGIN, Evidence
from loomctx.tokens import CallableCounter

COUNTED: list[str] = []


def _words(text: str) -> int:
    COUNTED.append(text)
    return len(text.split())


WORDS = CallableCounter(_words, name="words", cache_entries=0)  # one token per word


def block(name: str, tokens: int, *, truncatable: bool = True) -> ContextBlock:
    text = " ".join(f"{name}{i}" for i in range(tokens))
    return ContextBlock(
        source="s",
        section="context",
        id=name,
        content=text,
        token_count=tokens,
        truncatable=truncatable,
    )


def read(blocks: Sequence[ContextBlock], pulled: list[str]) -> Iterator[ContextBlock]:
    for b in blocks:
        pulled.append(b.id)
        yield b


def test_first_fit_keeps_what_fits_cuts_what_may_be_cut_and_skips_the_rest() -> None:
    blocks = [
        block("a", 6),
        block("b", 6, truncatable=False),  # 4 left: skipped
        block("c", 3),  # fits whole
        block("d", 5),  # 1 left, fewer than MIN_CUT_TOKENS: not cut
        block("e", 1),
    ]
    kept = fit_ceiling(blocks, 10, WORDS)
    assert [b.id for b in kept] == ["a", "c", "e"]
    wide = fit_ceiling([block("a", 6), block("f", 40)], 6 + MIN_CUT_TOKENS + 4, WORDS)
    assert [b.id for b in wide] == ["a", "f"]
    assert wide[1].metadata["truncated_from"] == 40
    assert wide[1].token_count <= MIN_CUT_TOKENS + 4


def test_a_generator_is_read_no_further_than_min_room() -> None:
    blocks = [block("a", 5), block("b", 4), block("c", 1), block("d", 1)]
    pulled: list[str] = []
    # By default every block is read: "c" still fits in the last token.
    assert [b.id for b in fit_ceiling(read(blocks, pulled), 10, WORDS)] == ["a", "b", "c"]
    assert pulled == ["a", "b", "c", "d"]
    pulled.clear()
    kept = fit_ceiling(read(blocks, pulled), 10, WORDS, min_room=2)
    assert [b.id for b in kept] == ["a", "b"]
    assert pulled == ["a", "b"]  # 1 token left after "b": nothing more is built
    pulled.clear()
    assert fit_ceiling(read(blocks, pulled), 1, WORDS, min_room=2) == []
    assert pulled == []


def candidate(name: str, tokens: int, score: float) -> Evidence:
    return Evidence(
        id=name,
        text=" ".join(f"{name}{i}" for i in range(tokens)),
        origin=MEMORY_ORIGIN,
        scores={"relevance": score, "score": score},
        signals={"vector_score": score},
    )


def test_the_injector_builds_blocks_only_for_the_candidates_it_looks_at() -> None:
    ranked = [
        candidate("a", 30, 0.9),
        candidate("b", 50, 0.8),  # cut to what is left
        candidate("c", 3, 0.7),
        candidate("d", 2, 0.6),
    ]
    COUNTED.clear()
    blocks = RetrievalInjector().blocks(ranked, 64, WORDS, source="r")
    assert [b.id for b in blocks] == ["r:a", "r:b"]
    assert blocks[1].metadata["truncated_from"] == 50
    assert sum(b.token_count for b in blocks) > 64 - MIN_CUT_TOKENS
    assert ranked[2].text not in COUNTED
    assert ranked[3].text not in COUNTED


def test_the_injector_leaves_fewer_than_min_cut_tokens_unused() -> None:
    # Deliberate: after "a" and "b", 4 tokens are left. A 3-token candidate would fit whole,
    # but only something that small could still go in after every better candidate, so the
    # injector stops there instead of counting all the others.
    ranked = [candidate("a", 30, 0.9), candidate("b", 30, 0.8), candidate("c", 3, 0.7)]
    blocks = RetrievalInjector().blocks(ranked, 64, WORDS, source="r")
    assert [b.id for b in blocks] == ["r:a", "r:b"]
    eager = fit_ceiling(
        RetrievalInjector().blocks(ranked, 10_000, WORDS, source="r"), 64, WORDS
    )  # every block built, read to the end
    assert [b.id for b in eager] == ["r:a", "r:b", "r:c"]
    assert [b.priority for b in blocks] == [1.0, 0.8 / 0.9]

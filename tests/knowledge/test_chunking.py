"""The chunker: headings, paragraphs, sentences and tokens, with overlap, under a token limit."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomctx.errors import ConfigError
from loomctx.knowledge import Chunk, chunk_text
from loomctx.tokens import CallableCounter, TiktokenCounter

from ..strategies import ALPHABET

COUNTER = TiktokenCounter()


def squash(text: str) -> str:
    """`text` without whitespace: what must survive chunking exactly."""
    return re.sub(r"\s+", "", text)


def chunks_of(text: str, limit: int = 400, overlap: int = 60) -> list[Chunk]:
    return chunk_text(text, counter=COUNTER, chunk_tokens=limit, overlap_tokens=overlap)


# --- sections and headings --------------------------------------------------------------------


def test_headings_give_each_chunk_its_path_as_a_prefix_line() -> None:
    doc = (
        "Before any heading.\n\n# Guide\n\nWhat the guide is.\n\n## Install\n\nRun pip.\n\n"
        "### Linux ###\n\nUse apt.\n\n## Configure\n\nEdit the file.\n\n# FAQ\n\nAsk away."
    )
    chunks = chunks_of(doc)
    assert [(c.headings, c.body) for c in chunks] == [
        ((), "Before any heading."),
        (("Guide",), "What the guide is."),
        (("Guide", "Install"), "Run pip."),
        (("Guide", "Install", "Linux"), "Use apt."),
        (("Guide", "Configure"), "Edit the file."),
        (("FAQ",), "Ask away."),
    ]
    assert chunks[3].text == "Guide > Install > Linux\n\nUse apt."
    assert chunks[0].text == chunks[0].search_text == "Before any heading."


def test_what_is_not_a_heading_stays_text() -> None:
    doc = (
        "#hashtag is a word\n\n####### seven hashes\n\n    # indented code\n\n"
        "```python\n# a comment in code\n\nx = 1\n```\n\n~~~\n# also code\n~~~\n\n## C#\n\nSharp."
    )
    chunks = chunks_of(doc)
    assert chunks[0].headings == ()
    assert "#hashtag is a word" in chunks[0].body
    assert "####### seven hashes" in chunks[0].body
    assert "# indented code" in chunks[0].body
    # a fenced block stays one paragraph, blank line included
    assert "```python\n# a comment in code\n\nx = 1\n```" in chunks[0].body
    assert "~~~\n# also code\n~~~" in chunks[0].body
    assert chunks[-1].headings == ("C#",)


def test_an_unclosed_fence_runs_to_the_end() -> None:
    chunks = chunks_of("Intro.\n\n```\ncode\n# not a heading\n")
    assert [c.headings for c in chunks] == [()]
    assert chunks[0].body.endswith("# not a heading")


def test_empty_headings_and_sections_without_text() -> None:
    chunks = chunks_of("#\n\n## Empty\n\n## Full\n\nText.\n\n# \n\nUnder a blank title.")
    assert [(c.headings, c.body) for c in chunks] == [
        (("Full",), "Text."),
        ((), "Under a blank title."),
    ]


def test_a_long_heading_path_is_cut_to_a_quarter_of_the_chunk() -> None:
    title = " ".join(f"word{i}" for i in range(60))
    (chunk,) = chunks_of(f"# {title}\n\nBody text.", limit=64, overlap=8)
    assert chunk.headings == (title,)
    assert COUNTER.count(chunk.prefix) <= 16
    assert title.startswith(chunk.prefix)
    assert chunk.body == "Body text."


def test_blank_text_gives_no_chunks_and_line_endings_are_normalised() -> None:
    assert chunks_of("") == []
    assert chunks_of(" \n\t\n") == []
    assert [c.body for c in chunks_of("One.\r\n\r\nTwo.\rThree.")] == ["One.\n\nTwo.\nThree."]


# --- paragraphs, sentences, tokens -----------------------------------------------------------


def test_paragraphs_are_packed_until_the_limit() -> None:
    paragraphs = [f"Paragraph {i} says something short." for i in range(12)]
    chunks = chunks_of("\n\n".join(paragraphs), limit=40, overlap=0)
    assert len(chunks) > 1
    for c in chunks:
        assert COUNTER.count(c.search_text) <= 40
        # whole paragraphs only: no paragraph is cut between two chunks
        assert all(p in paragraphs for p in c.body.split("\n\n"))
    assert "\n\n".join(c.body for c in chunks) == "\n\n".join(paragraphs)


def test_a_long_paragraph_is_split_on_sentences() -> None:
    paragraph = " ".join(f"Sentence {i} is here!" for i in range(40))
    chunks = chunks_of(paragraph, limit=32, overlap=0)
    assert len(chunks) > 2
    for c in chunks:
        assert c.body.startswith("Sentence ")
        assert c.body.endswith("is here!")
    assert " ".join(c.body for c in chunks) == paragraph


def test_chinese_sentences_split_without_spaces() -> None:
    paragraph = "".join(
        f"第{i}句话在这里结束。" if i % 2 else f"这是问题{i}吗？" for i in range(40)
    )
    chunks = chunks_of(paragraph, limit=32, overlap=0)
    assert len(chunks) > 2
    for c in chunks:
        assert c.body[-1] in "。？"
        assert COUNTER.count(c.search_text) <= 32
    assert "".join(c.body for c in chunks) == paragraph


def test_a_sentence_longer_than_a_chunk_is_cut_on_tokens_at_spaces() -> None:
    words = [f"word{i}" for i in range(300)]
    chunks = chunks_of(" ".join(words), limit=32, overlap=0)
    assert len(chunks) > 5
    for c in chunks:
        assert COUNTER.count(c.search_text) <= 32
        assert all(w in words for w in c.body.split())  # no word was cut in two
    assert " ".join(c.body for c in chunks).split() == words


def test_unbroken_text_is_cut_hard_and_kept_whole() -> None:
    for text in ("=" * 5000, "汉" * 3000, "🏴󠁧󠁢󠁳󠁣󠁴󠁿" * 4):
        chunks = chunks_of(text, limit=16, overlap=0)
        assert "".join(c.body for c in chunks) == text
        assert all(COUNTER.count(c.search_text) <= 16 for c in chunks)


def test_a_grapheme_larger_than_a_chunk_is_cut_between_code_points() -> None:
    flag = "🏴󠁧󠁢󠁳󠁣󠁴󠁿"  # one grapheme of 7 code points, 26 tokens
    chunks = chunks_of(flag, limit=16, overlap=0)
    assert len(chunks) > 1
    assert "".join(c.body for c in chunks) == flag


# --- overlap ---------------------------------------------------------------------------------


def test_the_next_chunk_repeats_the_last_sentences_but_does_not_show_them() -> None:
    paragraph = " ".join(f"Fact {i} is true." for i in range(30))
    chunks = chunks_of(paragraph, limit=40, overlap=12)
    assert len(chunks) > 2
    assert chunks[0].overlap == ""
    for before, after in itertools.pairwise(chunks):
        assert after.overlap
        assert before.body.endswith(after.overlap)  # whole trailing sentences
        assert after.overlap.startswith("Fact ")
        assert COUNTER.count(after.overlap) <= 12
        assert after.search_text == f"{after.overlap}\n\n{after.body}"
        assert after.text == after.body
        assert COUNTER.count(after.search_text) <= 40
    assert " ".join(c.body for c in chunks) == paragraph


def test_overlap_takes_sentences_from_the_end_of_a_paragraph() -> None:
    long = " ".join(f"Point {i} matters." for i in range(8))
    doc = f"{long}\n\n{'Next paragraph starts here and goes on for a while. ' * 3}".strip()
    chunks = chunks_of(doc, limit=48, overlap=12)  # two sentences of 5 tokens and a join
    assert chunks[1].overlap == "Point 6 matters. Point 7 matters."
    assert chunks[1].body.startswith("Next paragraph")


def test_overlap_stays_within_a_section_and_gives_way_to_new_text() -> None:
    doc = "# A\n\n" + " ".join(f"Alpha {i} here." for i in range(20)) + "\n\n# B\n\nBeta."
    chunks = chunks_of(doc, limit=32, overlap=10)
    assert chunks[-1].headings == ("B",)
    assert chunks[-1].overlap == ""
    # a piece that needs the whole chunk takes it: no overlap then
    hard = chunks_of("Short one. " + "x" * 400, limit=16, overlap=8)
    assert all(COUNTER.count(c.search_text) <= 16 for c in hard)
    assert hard[1].overlap == ""


def test_a_sentence_too_long_for_the_overlap_is_not_repeated() -> None:
    doc = "A very long sentence that goes on and on without any break at all for sure. " * 6
    chunks = chunks_of(doc.strip(), limit=40, overlap=5)
    assert all(c.overlap == "" for c in chunks)


# --- sizes -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("chunk_tokens", "overlap_tokens", "match"),
    [
        (8, 0, "at least 16"),
        (True, 0, "`chunk_tokens` must be an int"),
        (400.0, 0, "`chunk_tokens` must be an int"),
        (400, "60", "`overlap_tokens` must be an int"),
        (400, 400, "smaller than `chunk_tokens`"),
        (400, -1, "`overlap_tokens` must be >= 0"),
    ],
)
def test_bad_sizes_are_refused(chunk_tokens: object, overlap_tokens: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        chunk_text(
            "text", counter=COUNTER, chunk_tokens=chunk_tokens, overlap_tokens=overlap_tokens
        )  # type: ignore[arg-type]


def test_the_limit_holds_when_joins_cost_more_than_estimated() -> None:
    # A counter under which a blank line costs 5 tokens, not the 1 the packer estimates:
    # every chunk is counted whole, and shrunk (less overlap, a unit less, a unit cut).
    def count(text: str) -> int:
        return len(text) + 3 * text.count("\n\n")

    odd = CallableCounter(count, name="odd")
    cases = [
        (
            "# T\n\n" + "\n\n".join(f"Line {i}. More {i}." for i in range(30)) + "\n\n" + "z" * 90,
            40,
        ),
        (
            "xxxxxxxxx. xxxxxxxxx.\n\nxxxxxxx. xxxxx.\n\nxxxxxxxxx. xxxxxx.\n\nxxxxxxxx.\n\n"
            "xxxx.\n\nxxx. xxxxxxx. xxxxxxxxxx.",
            24,
        ),
        ("\n\n".join(f"p{i}." for i in range(40)), 24),
    ]
    for doc, limit in cases:
        chunks = chunk_text(doc, counter=odd, chunk_tokens=limit, overlap_tokens=limit // 3)
        assert all(count(c.search_text) <= limit for c in chunks)
        assert all(count(c.overlap) <= limit // 3 for c in chunks)
        assert squash("".join(c.body for c in chunks)) == squash(doc.removeprefix("# T"))
        assert any(c.overlap for c in chunks)


# --- properties ------------------------------------------------------------------------------

_BODY = st.text(alphabet="abc xyz ABC 019 .,!?;:'\"()你好世界中文。！？；😀👍🏽\n\t", max_size=120)
_TITLE = st.text(alphabet="abc XY 19 你好.", min_size=1, max_size=12).filter(str.strip)
_BLOCKS = st.lists(st.one_of(st.tuples(st.integers(1, 6), _TITLE), _BODY), min_size=1, max_size=10)


def _document(blocks: list[tuple[int, str] | str]) -> tuple[str, list[tuple[tuple[str, ...], str]]]:
    """The Markdown of `blocks`, and the heading path and text of each section."""
    parts: list[str] = []
    sections: list[tuple[tuple[str, ...], str]] = [((), "")]
    stack: list[tuple[int, str]] = []
    for block in blocks:
        if isinstance(block, tuple):
            level, title = block
            parts.append(f"{'#' * level} {title}")
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title.strip()))
            sections.append((tuple(t for _, t in stack), ""))
        else:
            parts.append(block)
            path, text = sections[-1]
            sections[-1] = (path, text + block)
    return "\n\n".join(parts), sections


@given(
    blocks=_BLOCKS,
    limit=st.integers(16, 80),
    overlap_share=st.floats(0, 0.9),
)
def test_chunks_keep_every_character_in_order_within_the_limit(
    blocks: list[tuple[int, str] | str], limit: int, overlap_share: float
) -> None:
    overlap = int(limit * overlap_share)
    doc, sections = _document(blocks)
    chunks = chunk_text(doc, counter=COUNTER, chunk_tokens=limit, overlap_tokens=overlap)
    remaining = iter(chunks)
    for path, text in sections:
        want, got = squash(text), ""
        while len(got) < len(want):
            chunk = next(remaining)
            assert chunk.headings == path
            got += squash(chunk.body)
        assert got == want
    assert next(remaining, None) is None
    for before, chunk in zip([None, *chunks], chunks, strict=False):
        assert COUNTER.count(chunk.search_text) <= limit
        assert COUNTER.count(chunk.overlap) <= overlap
        if chunk.overlap:
            assert before is not None
            assert before.headings == chunk.headings
            assert squash(before.body).endswith(squash(chunk.overlap))


@given(text=st.text(alphabet=ALPHABET + "#`~", max_size=300), limit=st.integers(16, 48))
def test_any_text_chunks_within_the_limit_without_inventing_text(text: str, limit: int) -> None:
    chunks = chunk_text(text, counter=COUNTER, chunk_tokens=limit, overlap_tokens=limit // 4)
    source = iter(squash(text))
    for chunk in chunks:
        assert COUNTER.count(chunk.search_text) <= limit
        # the bodies are the text, in order, minus heading markup: a subsequence of it
        assert all(ch in source for ch in squash(chunk.body))

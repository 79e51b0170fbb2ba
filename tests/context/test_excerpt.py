"""Excerpts: a long text as its head and tail around a marker, within an exact token count,
the same bytes every time; a unit's long texts cut to a common level; the report told."""

from __future__ import annotations

import re
from collections.abc import Mapping

from hypothesis import given
from hypothesis import strategies as st

from loomctx import ContextReport, Message, TiktokenCounter, ToolCall
from loomctx.context import BlockReport, ContextBlock
from loomctx.context.excerpt import (
    MIN_EXCERPT_TOKENS,
    Excerpt,
    excerpt,
    fit_unit,
    handle_for,
    note_excerpts,
    task_of_handle,
)
from loomctx.tokens import TOKENS_REPLY_PRIMING
from tests.strategies import texts

COUNTER = TiktokenCounter()
HANDLE = handle_for("5f0c2a9e1b3d4c6f8a7e9d0b1c2d3e4f")
LOG = "\n".join(
    f"{i:05d} INFO worker {i % 7} processed batch {i * 13} in {i % 97} ms" for i in range(3000)
)
MARKER = re.compile(
    r"\n\[\.\.\. ([\d,]+) tokens left out \(characters ([\d,]+) to ([\d,]+) of ([\d,]+)\)"
)


def parts(out: str) -> tuple[int, int, int, int]:
    """Tokens left out, start and end of the gap, and the text's length, from the marker."""
    found = MARKER.search(out)
    assert found is not None, out[:200]
    left, start, end, size = (int(g.replace(",", "")) for g in found.groups())
    return left, start, end, size


def test_a_long_text_becomes_its_head_and_tail_around_a_marker_naming_the_handle() -> None:
    out = excerpt(COUNTER, LOG, 1000, handle=HANDLE, read_tool="read_result")
    assert COUNTER.count(out) <= 1000
    left, start, end, size = parts(out)
    assert size == len(LOG)
    assert out.startswith(LOG[:start])
    assert out.endswith(LOG[end:])
    assert f'read_result(handle="{HANDLE}", offset={start})]' in out
    assert left == COUNTER.count(LOG[start:end])
    # Cut at line ends, both sides, and head and tail get about half each.
    assert LOG[start] == "\n"
    assert LOG[end - 1] == "\n"
    head, tail = COUNTER.count(LOG[:start]), COUNTER.count(LOG[end:])
    assert abs(head - tail) < 60
    assert head + tail > 800


def test_without_a_reading_tool_the_marker_names_only_the_handle() -> None:
    out = excerpt(COUNTER, LOG, 500, handle=HANDLE)
    assert "read_result" not in out
    assert f"the whole text is stored as {HANDLE!r}]" in out


def test_a_text_that_fits_is_returned_as_is_and_one_too_small_for_the_marker_is_empty() -> None:
    assert excerpt(COUNTER, "short", 10, handle=HANDLE) == "short"
    assert excerpt(COUNTER, LOG, 20, handle=HANDLE) == ""


def test_handles_name_their_task() -> None:
    assert task_of_handle(handle_for("abc")) == "abc"
    assert task_of_handle("  abc ") == "abc"


# Pieces of the mixed alphabet, repeated: long enough that about a third must be cut.
long_texts = st.builds(
    lambda pieces, times, sep: sep.join(pieces * times),
    st.lists(texts(min_size=1, max_size=40), min_size=1, max_size=20),
    st.integers(1, 60),
    st.sampled_from(["", "\n", " ", ". "]),
)


@given(text=long_texts, max_tokens=st.integers(MIN_EXCERPT_TOKENS, 400))
def test_an_excerpt_fits_keeps_exact_head_and_tail_and_is_the_same_every_time(
    text: str, max_tokens: int
) -> None:
    out = excerpt(COUNTER, text, max_tokens, handle=HANDLE, read_tool="read_result")
    assert COUNTER.count(out) <= max_tokens
    if COUNTER.count(text) <= max_tokens:
        assert out == text
        return
    _, start, end, size = parts(out)
    assert size == len(text)
    assert 0 <= start <= end <= size
    assert out.startswith(text[:start] + "\n[... ")
    assert out.endswith("]\n" + text[end:])
    # A fresh counter (no cached counts) cuts the same bytes.
    again = excerpt(TiktokenCounter(), text, max_tokens, handle=HANDLE, read_tool="read_result")
    assert again == out


def billed(messages: tuple[Message, ...]) -> int:
    return COUNTER.count_messages(messages) - TOKENS_REPLY_PRIMING


def test_a_unit_cuts_its_longest_texts_to_a_common_level_and_keeps_the_short_ones() -> None:
    small, big, bigger = "12 rows", LOG[:30_000], LOG
    texts_ = {"r-a": small, "r-b": big, "r-c": bigger}
    call = Message.assistant(tool_calls=[ToolCall(id=k, name="q", arguments={}) for k in texts_])

    def frame(cut: Mapping[str, str]) -> list[Message]:
        return [call, *(Message.tool(t, tool_call_id=h) for h, t in cut.items())]

    unit, notes = fit_unit(texts_, frame, 2000, counter=COUNTER, read_tool="read_result")
    assert billed(unit) <= 2000
    assert unit[1].content == small
    assert [n.handle for n in notes] == ["r-b", "r-c"]
    shown_b, shown_c = (COUNTER.count(m.content) for m in unit[2:])
    # One level for both (an excerpt may end a few tokens short of it, at a line end).
    assert abs(shown_b - shown_c) <= 20
    assert notes[1] == Excerpt(handle="r-c", tokens=COUNTER.count(bigger), shown=shown_c)
    assert fit_unit(texts_, frame, 10**6, counter=COUNTER) == (tuple(frame(texts_)), ())


def test_the_report_marks_blocks_that_show_excerpts() -> None:
    note = Excerpt(handle="r-x", tokens=25_000, shown=3_000)
    cut = ContextBlock(
        source="turn", section="turn", id="turn:0", metadata={"excerpts": (note.to_dict(),)}
    )
    whole = ContextBlock(source="turn", section="turn", id="turn:1")
    report = ContextReport(
        window=16_000,
        output_reserve=3_200,
        available=12_800,
        token_count=4_000,
        overhead_tokens=10,
        token_counter=COUNTER.name,
        sources=(),
        blocks=tuple(
            BlockReport(
                id=b.id,
                source="turn",
                section="turn",
                offered_tokens=9,
                used_tokens=9,
                status="kept",
            )
            for b in (cut, whole)
        ),
    )
    marked = note_excerpts(report, [cut, whole])
    first, second = marked.blocks
    assert first.status == "truncated"
    assert "`r-x` shown as an excerpt of 3,000 of its 25,000 tokens" in first.reason
    assert second == report.blocks[1]
    assert note_excerpts(report, [whole]) is report
    assert ContextReport.from_dict(marked.to_dict()) == marked

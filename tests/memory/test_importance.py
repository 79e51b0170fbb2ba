"""Importance from content: the seed's rule is the prior, small talk falls below the
promotion threshold, facts, names, numbers, preferences, decisions and corrections stay above."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomctx.memory import importance
from loomctx.memory.core import LoomMemory
from loomctx.memory.importance import _WORD, _names, content_score, message_importance
from loomctx.memory.task import ASSISTANT_MESSAGE, USER_MESSAGE, Task, TaskStatus, importance_of

SMALL_TALK = [
    "Sounds great!",
    "Thanks a lot, see you soon!",
    "haha ok",
    "Me too, it was fun.",
    "Bye!",
    "好的，谢谢",
    "",
    "   ",
]
WORTH_KEEPING = [
    "I moved from Sweden 4 years ago.",  # a fact with a name and a number
    "Actually, the deadline is Friday, not Monday.",  # a correction
    "I prefer tea over coffee.",  # a preference
    "We decided to ship the Postgres backend first.",  # a decision, a name
    "My daughter's birthday is on 13 August.",
    "我对花生过敏",  # an allergy, in Chinese
]


@pytest.mark.parametrize("text", SMALL_TALK)
def test_small_talk_falls_below_the_promotion_threshold(text: str) -> None:
    assert content_score(text) < 0.1
    task = Task(action=USER_MESSAGE, source_agent="user", parameters={"content": text})
    assert importance_of(task) < 0.6


@pytest.mark.parametrize("text", WORTH_KEEPING)
def test_what_a_later_turn_needs_keeps_the_users_prior(text: str) -> None:
    assert content_score(text) > 0.5
    task = Task(action=USER_MESSAGE, source_agent="user", parameters={"content": text})
    assert importance_of(task) >= 0.9


def test_an_assistants_decision_or_correction_rises_above_its_prior() -> None:
    said = "Actually I'll move the launch to 3 June: the venue changed."
    task = Task(action=ASSISTANT_MESSAGE, status=TaskStatus.COMPLETED, parameters={"content": said})
    assert importance_of(task) > 0.6
    chat = Task(action=ASSISTANT_MESSAGE, parameters={"content": "Sounds great!"})
    assert importance_of(chat) < 0.5


def test_the_prior_bounds_the_result_and_stays_in_unit_range() -> None:
    for prior in (0.0, 0.5, 0.9, 1.0):
        for text in SMALL_TALK + WORTH_KEEPING:
            value = message_importance(prior, text)
            assert 0.0 <= value <= 1.0
            assert value <= prior if content_score(text) < 0.5 else value >= prior


def test_explicit_importance_and_tool_calls_are_not_rescored() -> None:
    chat = {"content": "ok thanks"}
    assert (
        importance_of(Task(action=USER_MESSAGE, parameters=chat, metadata={"importance": 0.95}))
        == 0.95
    )
    # A tool's result is data: its worth is the seed's rule, whatever its wording.
    tool = Task(action="sql", status=TaskStatus.COMPLETED, result="ok thanks")
    assert importance_of(tool) == 0.7


def test_l2_holds_the_fact_not_the_small_talk() -> None:
    memory = LoomMemory("imp", embedder=None)
    try:
        turns = ["Sounds great!", "My flight to Lisbon leaves at 7:40 on Tuesday.", "haha ok",
                 "Thanks!", "Cool, bye!"]  # fmt: skip
        memory.add_tasks(
            Task(action=USER_MESSAGE, source_agent="user", parameters={"content": t}) for t in turns
        )
        memory.promote_tasks()
        l2 = [t.parameters["content"] for t in memory.get_l2_tasks()]
        assert l2 == ["My flight to Lisbon leaves at 7:40 on Tuesday."]
    finally:
        memory.close()


_OLD_SENTENCE_START = re.compile(r"(^|[.!?]\s+|\n)\W*$")


def _names_by_searching_all_the_text_before(text: str) -> int:
    """The reference: `_names` as first written, searching the whole text before each word."""
    count = 0
    for m in _WORD.finditer(text):
        word = m.group()
        if not word[0].isupper() or word in ("I", "I'm", "I've", "I'll", "I'd"):
            continue
        if _OLD_SENTENCE_START.search(text[: m.start()]):
            continue
        count += 1
    return count


_WORDS = ["Alice", "bob", "I", "I'm", "Caroline's", "_Bo", "x_Y", "Ünal", "the", "42", "Zoë"]
_GAPS = [" ", "  ", ". ", "! ", "?", "?\t", "\n", ", ", "...", ".", " — ", "(", ")", "'", "_"]
_PIECES = st.sampled_from([*_WORDS, *_GAPS, "你好"])


@given(st.lists(_PIECES, max_size=40).map("".join) | st.text(max_size=80))
def test_names_are_found_as_by_searching_all_the_text_before_each(text: str) -> None:
    assert _names(text) == _names_by_searching_all_the_text_before(text)


_CUES = ["_TIME_WORDS", "_PREFERENCE", "_DECISION", "_CORRECTION", "_FIRST_PERSON_FACT"]
_CUE_WORDS = ["I AM", "We Decided", "not this but", "MY Wife", "Monday", "o'Clock", "Let's",
              "i'LL", "Actually", "FAVOURITE", "signed UP", "我是", "不是他而是"]  # fmt: skip
_CASED_TEXT = st.lists(
    st.sampled_from(_CUE_WORDS) | st.text("aAbBiIlLmMsStTyY'’ .,!?\n0123456789我", max_size=8),
    max_size=12,
).map(" ".join)


@given(_CASED_TEXT)
def test_cue_patterns_on_lowercased_text_match_as_case_insensitive_ones(text: str) -> None:
    """The cue patterns run on the lowercased text: they match exactly where the same
    patterns with `re.IGNORECASE` match the text as written."""
    for name in _CUES:
        lower: re.Pattern[str] = getattr(importance, name)
        folded = re.compile(lower.pattern, re.IGNORECASE)
        assert bool(lower.search(text.lower())) == bool(folded.search(text)), name

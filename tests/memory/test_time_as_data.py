"""Time words in a remembered turn ("yesterday", "上个月") resolved against the day it was
said, kept with the task, matched by questions about time, and shown in the window's label."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from loomctx import MemoryRanking
from loomctx.context.orchestrator import ContextOrchestrator
from loomctx.context.sources.prompt import UserInputSource
from loomctx.context.sources.retrieval import UnifiedRetrievalSource
from loomctx.errors import ConfigError
from loomctx.memory.core import LoomMemory
from loomctx.memory.task import ASSISTANT_MESSAGE, USER_MESSAGE, Task, task_label
from loomctx.memory.timeref import (
    TIME_REFS,
    TimeSpan,
    asks_when,
    span_text,
    spans_of,
    spans_to_data,
    time_spans,
    turn_spans,
)
from loomctx.stores.sqlite import SQLiteStore
from tests.retrieval.fixtures import open_store

SAID = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)  # a Monday


def day(y: int, m: int, d: int) -> datetime:
    return datetime(y, m, d, tzinfo=UTC)


TURNS = [
    ("I went to a support group yesterday", day(2023, 5, 7), day(2023, 5, 8)),
    ("the day before yesterday it rained", day(2023, 5, 6), day(2023, 5, 7)),
    ("Last Fri I took my kids to a pottery workshop", day(2023, 5, 5), day(2023, 5, 6)),
    ("I joined an activist group last Tues.", day(2023, 5, 2), day(2023, 5, 3)),
    ("that roadtrip this past weekend was wild", day(2023, 5, 6), day(2023, 5, 8)),
    ("we went camping two weekends ago", day(2023, 4, 21), day(2023, 4, 28)),
    ("I ran a marathon last week", day(2023, 5, 1), day(2023, 5, 8)),
    ("I painted that sunrise last year", day(2022, 1, 1), day(2023, 1, 1)),
    ("we moved here two years ago", day(2021, 3, 9), day(2021, 7, 8)),
    ("my talk is tomorrow", day(2023, 5, 9), day(2023, 5, 10)),
    ("the conference is next month", day(2023, 6, 1), day(2023, 7, 1)),
    ("we fly out next week", day(2023, 5, 15), day(2023, 5, 22)),
    ("我昨天去了医院", day(2023, 5, 7), day(2023, 5, 8)),
    ("上周我们搬家了", day(2023, 5, 1), day(2023, 5, 8)),
    ("上个月我换了工作", day(2023, 4, 1), day(2023, 5, 1)),
    ("两年前我来到这里", day(2021, 3, 9), day(2021, 7, 8)),
    ("去年我们结婚了", day(2022, 1, 1), day(2023, 1, 1)),
    ("明天见", day(2023, 5, 9), day(2023, 5, 10)),
    ("下个月开会", day(2023, 6, 1), day(2023, 7, 1)),
]


@pytest.mark.parametrize(("text", "start", "end"), TURNS)
def test_a_turns_time_words_resolve_against_the_day_it_was_said(
    text: str, start: datetime, end: datetime
) -> None:
    (span,) = turn_spans(text, SAID)
    assert (span.start, span.end) == (start, end)


@pytest.mark.parametrize("text", ["I last sat there", "see you soon", "next to the lake"])
def test_words_that_name_no_time_resolve_to_nothing(text: str) -> None:
    assert turn_spans(text, SAID) == []


def test_a_span_as_the_label_says_it() -> None:
    texts = [span_text(turn_spans(text, SAID)[0]) for text, _, _ in TURNS[:9]]
    assert texts == [
        "7 May 2023", "6 May 2023", "5 May 2023", "2 May 2023", "6-7 May 2023",
        "21-27 Apr 2023", "1-7 May 2023", "2022", "about May 2021",
    ]  # fmt: skip
    assert span_text(turn_spans("上个月", SAID)[0]) == "Apr 2023"


def test_questions_that_ask_when() -> None:
    asked = ["When did Caroline go to the support group?", "What year did we move?",
             "How long ago was the trip?", "她什么时候换的工作？", "我们哪天搬的家"]  # fmt: skip
    plain = ["What did Caroline paint?", "Where is the conference?", "我换了什么工作"]
    assert all(asks_when(q) for q in asked)
    assert not any(asks_when(q) for q in plain)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with open_store(tmp_path) as s:
        yield s


def turn(
    task_id: str, text: str, when: datetime, *, metadata: dict[str, object] | None = None
) -> Task:
    return Task(task_id=task_id, action=USER_MESSAGE, parameters={"content": text},
                created_at=when, metadata=metadata or {})  # fmt: skip


def test_a_task_stores_its_resolved_dates(store: SQLiteStore) -> None:
    memory = LoomMemory("diary", store=store, embedder=None)
    memory.add_tasks(
        [
            turn("group", "I went to a support group yesterday", SAID),
            turn("plain", "The support group meets on Mondays", SAID),
            turn("own", "yesterday was fine", SAID, metadata={"importance": 0.2}),
            Task(
                task_id="tool",
                action="search_web",
                parameters={"q": "news yesterday"},
                created_at=SAID,
            ),
        ]
    )
    memory.close()
    # Another memory on the same store reads them back: they are part of the stored task.
    again = LoomMemory("diary", store=store, embedder=None)
    tasks = {t.task_id: t for t in again.get_l1_tasks(limit=10)}
    (span,) = spans_of(tasks["group"].metadata)
    assert (span.phrase, span.start, span.end) == ("yesterday", day(2023, 5, 7), day(2023, 5, 8))
    assert TIME_REFS not in tasks["plain"].metadata
    assert tasks["own"].metadata["importance"] == 0.2  # what the caller gave is kept
    assert spans_of(tasks["own"].metadata)
    assert TIME_REFS not in tasks["tool"].metadata  # a tool call's arguments are not speech
    (hit,) = again.search("support group yesterday", limit=1)
    assert spans_of(hit.task.metadata)
    again.close()


def test_malformed_stored_dates_are_skipped_not_fatal() -> None:
    bad = {TIME_REFS: [{"phrase": "x", "start": "not a date", "end": 3}, "junk", {"start": 1}]}
    assert spans_of(bad) == ()
    assert spans_of({TIME_REFS: "yesterday"}) == ()
    assert task_label(turn("t", "hello", SAID, metadata=bad)) == "8 May 2023"


def test_a_time_query_finds_the_turn_by_the_date_it_speaks_of(store: SQLiteStore) -> None:
    """ "12 days ago" shares no word with "the day before yesterday", nor is either turn
    recorded then: only the resolved date says which hike the question is about."""
    now = day(2023, 5, 31)
    memory = LoomMemory(
        "diary",
        store=store,
        clock=lambda: now,
        ranking=MemoryRanking(neighbour_weight=0, answer_weight=0),
        embedder=None,
    )
    memory.add_tasks(
        [
            turn("dated", "The day before yesterday I went hiking in Sintra", day(2023, 5, 21)),
            turn("other", "I went hiking in Arrabida, such great hiking", day(2023, 5, 5)),
        ]
    )
    assert memory.search("hiking", limit=1)[0].task.task_id == "other"
    hits = memory.search("where did I go hiking 12 days ago?", limit=2)
    assert [(h.task.task_id, h.time_match) for h in hits] == [("dated", 1.0), ("other", 0.0)]
    memory.close()


def test_a_question_about_when_prefers_the_turn_that_says_when(store: SQLiteStore) -> None:
    memory = LoomMemory(
        "talk",
        store=store,
        ranking=MemoryRanking(neighbour_weight=0, answer_weight=0),
        embedder=None,
    )
    memory.add_tasks(
        [
            turn("dated", "I went to an LGBTQ support group yesterday", SAID),
            turn("other", "The LGBTQ support group was so powerful, that group is great", SAID),
        ]
    )
    query = "When did Caroline go to the LGBTQ support group?"
    assert memory.search("Caroline LGBTQ support group", limit=1)[0].task.task_id == "other"
    hits = memory.search(query, limit=2)
    assert hits[0].task.task_id == "dated"
    off = LoomMemory(
        "talk",
        store=store,
        ranking=MemoryRanking(neighbour_weight=0, answer_weight=0, date_weight=0),
        embedder=None,
    )
    assert off.search(query, limit=1)[0].task.task_id == "other"
    assert all(0 <= h.score <= 1 for h in hits)
    off.close()
    memory.close()


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), True, "0.5"])
def test_date_weight_is_validated(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"`date_weight` must be in 0..1"):
        LoomMemory("session", ranking=MemoryRanking(date_weight=bad), embedder=None)  # type: ignore[arg-type]


def test_the_window_label_shows_the_resolved_date() -> None:
    memory = LoomMemory("label", embedder=None)
    try:
        memory.add_tasks(
            [
                turn("q", "How was your week?", SAID),
                Task(
                    task_id="a",
                    action=ASSISTANT_MESSAGE,
                    created_at=SAID,
                    parameters={
                        "content": "I went to a support group yesterday and "
                        "painted that sunrise last year"
                    },
                ),
            ]
        )
        source = UnifiedRetrievalSource(memory, name="retrieved")
        window = ContextOrchestrator(
            sources=[source, UserInputSource()], model_context_window=3000
        ).build_sync("When did I go to the support group?")
        text = "\n".join(m.content for m in window.messages)
        assert "[8 May 2023; yesterday = 7 May; last year = 2022] assistant: I went to" in text
    finally:
        memory.close()


def test_a_turn_naming_several_times_matches_by_the_closest(store: SQLiteStore) -> None:
    """A turn's time match is the best of when it was recorded and each time it names (the
    closest one need not be its first), as `TimeSpan.proximity` and `meets` say."""
    now = day(2023, 5, 31)
    memory = LoomMemory("diary", store=store, clock=lambda: now, embedder=None)
    hour = timedelta(hours=1)
    named = {
        "none": [],
        "first": [(day(2023, 5, 18), day(2023, 5, 20)), (day(2022, 1, 1), day(2022, 2, 1))],
        "last": [(day(2023, 1, 1), day(2023, 1, 2)), (day(2023, 5, 8), day(2023, 5, 9)),
                 (day(2023, 5, 17) + 12 * hour, day(2023, 5, 18) + 12 * hour)],
        "after": [(day(2023, 5, 20) + 18 * hour, day(2023, 5, 22)),
                  (day(2023, 5, 26), day(2023, 5, 28))],
        "far": [(day(2020, 1, 1), day(2020, 1, 2))],
    }  # fmt: skip
    recorded = {"none": 19, "first": 2, "last": 29, "after": 10, "far": 30}
    memory.add_tasks(
        [
            turn(
                task_id,
                f"we went hiking, {task_id}",
                day(2023, 5, recorded[task_id]),
                metadata={TIME_REFS: spans_to_data([TimeSpan(a, b, "then") for a, b in spans])},
            )
            for task_id, spans in named.items()
        ]
    )
    query = "where did I go hiking 12 days ago?"
    asked = time_spans(query, now)
    hits = memory.search(query, limit=len(named))
    assert len(hits) == len(named)
    for hit in hits:
        spans = spans_of(hit.task.metadata)
        created = hit.task.created_at
        expected = max(
            [*(s.proximity(created) for s in asked), *(s.meets(n) for s in asked for n in spans)]
        )
        assert hit.time_match == expected, hit.task.task_id
    matches = {h.task.task_id: h.time_match for h in hits}
    assert matches == {"first": 1.0, "none": 1.0, "last": 0.5, "after": 0.25, "far": 0.0}
    memory.close()

"""Time references in queries ("5 days ago", "上个月") resolved to spans, and memory search
favouring what was recorded then."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomctx import MemoryRanking
from loomctx.errors import ConfigError
from loomctx.memory import timeref
from loomctx.memory.core import LoomMemory
from loomctx.memory.task import USER_MESSAGE, Task
from loomctx.memory.timeref import (
    NO_TIME,
    TimeSpan,
    meetings,
    micros,
    proximities,
    time_spans,
)
from loomctx.stores.sqlite import SQLiteStore
from tests.retrieval.fixtures import open_store

NOW = datetime(2023, 5, 31, 15, 30, tzinfo=UTC)  # a Wednesday


def day(y: int, m: int, d: int) -> datetime:
    return datetime(y, m, d, tzinfo=UTC)


def spans(query: str, now: datetime = NOW) -> list[tuple[datetime, datetime]]:
    return [(s.start, s.end) for s in time_spans(query, now)]


ENGLISH = [
    ("what did I post yesterday?", day(2023, 5, 30), day(2023, 5, 31)),
    ("and the day before yesterday", day(2023, 5, 29), day(2023, 5, 30)),
    ("anything today", day(2023, 5, 31), day(2023, 6, 1)),
    ("the milestone 5 days ago", day(2023, 5, 26), day(2023, 5, 27)),
    ("a couple of days ago", day(2023, 5, 29), day(2023, 5, 30)),
    ("one day ago", day(2023, 5, 30), day(2023, 5, 31)),
    # weeks, months and years are loose in speech: a span around the offset
    ("four weeks ago", day(2023, 4, 30), day(2023, 5, 7)),
    ("a month ago", day(2023, 4, 21), day(2023, 5, 12)),
    ("2 years ago", day(2021, 4, 1), day(2021, 7, 31)),
    ("last week", day(2023, 5, 22), day(2023, 5, 29)),  # the calendar week before
    ("last weekend", day(2023, 5, 27), day(2023, 5, 29)),
    ("last month", day(2023, 4, 1), day(2023, 5, 1)),
    ("last year", day(2022, 1, 1), day(2023, 1, 1)),
    ("last friday", day(2023, 5, 26), day(2023, 5, 27)),
    ("last wednesday", day(2023, 5, 24), day(2023, 5, 25)),  # not today
    ("this week", day(2023, 5, 29), NOW + timedelta(days=1)),
    ("this month", day(2023, 5, 1), NOW + timedelta(days=1)),
    ("this year", day(2023, 1, 1), NOW + timedelta(days=1)),
    ("over the past 3 days", NOW - timedelta(days=3), NOW + timedelta(days=1)),
    ("the past month", NOW - timedelta(days=30), NOW + timedelta(days=1)),
    ("in the last two weeks", NOW - timedelta(days=14), NOW + timedelta(days=1)),
    # a month by name: the latest one up to now, unless a year is given
    ("the first BBQ in June", day(2022, 6, 1), day(2022, 7, 1)),
    ("early May", day(2023, 5, 1), day(2023, 6, 1)),
    ("during March 2023", day(2023, 3, 1), day(2023, 4, 1)),
    ("since December, 2021", day(2021, 12, 1), day(2022, 1, 1)),
]
CHINESE = [
    ("昨天说的", day(2023, 5, 30), day(2023, 5, 31)),
    ("前天", day(2023, 5, 29), day(2023, 5, 30)),
    ("大前天", day(2023, 5, 28), day(2023, 5, 29)),
    ("今天的会议", day(2023, 5, 31), day(2023, 6, 1)),
    ("三天前我说了什么", day(2023, 5, 28), day(2023, 5, 29)),
    ("12天前", day(2023, 5, 19), day(2023, 5, 20)),
    ("二十天前", day(2023, 5, 11), day(2023, 5, 12)),
    ("十五天以前", day(2023, 5, 16), day(2023, 5, 17)),
    ("两周前的决定", day(2023, 5, 14), day(2023, 5, 21)),
    ("两个月前", day(2023, 3, 22), day(2023, 4, 12)),
    ("上周的计划", day(2023, 5, 22), day(2023, 5, 29)),
    ("上周末", day(2023, 5, 27), day(2023, 5, 29)),
    ("上个月", day(2023, 4, 1), day(2023, 5, 1)),
    ("去年", day(2022, 1, 1), day(2023, 1, 1)),
    ("本周", day(2023, 5, 29), NOW + timedelta(days=1)),
    ("这个月", day(2023, 5, 1), NOW + timedelta(days=1)),
    ("今年", day(2023, 1, 1), NOW + timedelta(days=1)),
    ("最近三天", NOW - timedelta(days=3), NOW + timedelta(days=1)),
    ("过去两周", NOW - timedelta(days=14), NOW + timedelta(days=1)),
    ("六月的烧烤", day(2022, 6, 1), day(2022, 7, 1)),
    ("十二月", day(2022, 12, 1), day(2023, 1, 1)),
    ("2022年3月的会议", day(2022, 3, 1), day(2022, 4, 1)),
    ("5月", day(2023, 5, 1), day(2023, 6, 1)),
]


@pytest.mark.parametrize(("query", "start", "end"), ENGLISH + CHINESE)
def test_references(query: str, start: datetime, end: datetime) -> None:
    assert spans(query) == [(start, end)]


@pytest.mark.parametrize(
    "query",
    [
        "the last day of the trip",  # "last" without a number or "past" is not a stretch
        "what should I cook this weekend?",  # the future says nothing of what was recorded
        "plans for next week",
        "recently I started running",
        "how many days are in a week",
        "下周的安排",
        "you may leave now",  # "may" alone is a verb
        "每月的报告",
        "两个月的计划",
        "",
    ],
)
def test_no_reference(query: str) -> None:
    assert spans(query) == []


def test_several_references_in_the_order_named_once_each() -> None:
    assert spans("yesterday or 3 天前, or yesterday again") == [
        (day(2023, 5, 30), day(2023, 5, 31)),
        (day(2023, 5, 28), day(2023, 5, 29)),
    ]


def test_month_boundaries_and_a_naive_now() -> None:
    naive = datetime(2024, 1, 3, 9, 0)
    assert spans("last month", naive) == [(day(2023, 12, 1), day(2024, 1, 1))]
    assert spans("上个月", naive) == [(day(2023, 12, 1), day(2024, 1, 1))]
    assert spans("last year", naive) == [(day(2023, 1, 1), day(2024, 1, 1))]


def test_proximity_is_one_inside_and_falls_off_over_the_margin() -> None:
    span = TimeSpan(day(2023, 5, 26), day(2023, 5, 27), "5 days ago")
    assert span.proximity(datetime(2023, 5, 26, 12, 0, tzinfo=UTC)) == 1.0
    assert span.proximity(datetime(2023, 5, 27, 12, 0)) == pytest.approx(0.5)  # naive: UTC
    assert span.proximity(datetime(2023, 5, 25, 18, 0, tzinfo=UTC)) == pytest.approx(0.75)
    assert span.proximity(day(2023, 5, 20)) == 0.0
    month = TimeSpan(day(2023, 4, 1), day(2023, 5, 1), "last month")
    assert month.proximity(day(2023, 5, 8)) == pytest.approx(1 - 7 / 15)  # margin: 15 days


@given(
    now=st.datetimes(min_value=datetime(1900, 3, 1), max_value=datetime(2900, 1, 1)),
    query=st.text(
        alphabet="abcdeglnorstwy 0123456789上本去今昨前天周月年个两三十最近过去", max_size=40
    ),
)
def test_any_text_gives_well_formed_spans(now: datetime, query: str) -> None:
    for span in time_spans(query, now):
        assert span.start < span.end
        assert span.start.tzinfo is not None
        assert span.phrase
        assert 0.0 <= span.proximity(now) <= 1.0


_PIECES = st.sampled_from(
    ["3 ", "a few ", "two ", "day", "days", "week", "weekend", "month", "year", "s", " ago",
     "the ", "past ", "last ", "previous ", "yesterday", "today", "tonight", "this ", "night",
     "morning", "friday", "tues", "in ", "may", "june", " 2023", ", ", "?", "Last ", "AGO",
     "三", "两个", "天", "周", "星期", "个月", "年", "前", "以前", "最近", "过去", "近", "的",
     "5", "月", "2023年", "十二", "上个月", "昨天", "去年", "x",
     # whole phrases, and the words around them
     "this morning", "this week", "this year", "past weekend", "last night", "in march",
     "3 weeks ago", "the past 2 months", "三天前", "最近两周", "过去的三个月", "6月", "上周"]
)  # fmt: skip


@given(
    now=st.datetimes(min_value=datetime(1900, 3, 1), max_value=datetime(2900, 1, 1)),
    pieces=st.lists(_PIECES, max_size=12),
)
def test_skipping_a_pattern_whose_words_a_text_lacks_finds_the_same_spans(
    now: datetime, pieces: list[str]
) -> None:
    query = "".join(pieces)
    with pytest.MonkeyPatch.context() as patch:  # every pattern scanned, as before the skip
        patch.setattr(timeref, "_matches", lambda pattern, text, needles: pattern.finditer(text))
        scanned = time_spans(query, now)
    assert time_spans(query, now) == scanned


_TIMES = st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2026, 1, 1))


@given(
    now=_TIMES,
    query=st.sampled_from(
        ["yesterday", "last week", "3 months ago", "in May", "last year", "上周", "the past 5 days"]
    ),
    times=st.lists(st.one_of(st.none(), _TIMES), max_size=30),
)
def test_proximities_over_an_array_are_each_span_proximity_exactly(
    now: datetime, query: str, times: list[datetime | None]
) -> None:
    found = time_spans(query, now)
    at = np.array([NO_TIME if t is None else micros(t) for t in times], dtype=np.int64)
    got = proximities(found, at).tolist()
    for t, value in zip(times, got, strict=True):
        if t is None or not found:
            assert math.isnan(value)
        else:  # the same float, not merely close: search's scores stay byte-identical
            assert value == max(span.proximity(t) for span in found)


_HOUR_US = 3_600 * 1_000_000


@given(
    now=_TIMES,
    query=st.sampled_from(["yesterday", "last week", "3 days ago", "2 months ago", "上周, 昨天"]),
    # each named span: its start relative to `now`, and its length (both in microseconds),
    # near the spans queried: overlapping them, and before and after them within a margin
    named=st.lists(
        st.tuples(
            st.integers(min_value=-80 * 24, max_value=5 * 24).map(lambda h: h * _HOUR_US + 7),
            st.integers(min_value=1, max_value=10 * 24).map(lambda h: h * _HOUR_US - 3),
        ),
        max_size=40,
    ),
)
def test_meetings_over_arrays_are_each_span_meets_exactly(
    now: datetime, query: str, named: list[tuple[int, int]]
) -> None:
    found = time_spans(query, now)
    aware = now.replace(tzinfo=UTC)
    spans = [
        TimeSpan(aware + timedelta(microseconds=at), aware + timedelta(microseconds=at + n), "x")
        for at, n in named
    ]
    starts = np.array([micros(s.start) for s in spans], dtype=np.int64)
    ends = np.array([micros(s.end) for s in spans], dtype=np.int64)
    got = meetings(found, starts, ends).tolist()
    for span, value in zip(spans, got, strict=True):  # the same float, not merely close
        assert value == max(query_span.meets(span) for query_span in found)


# --- memory search -----------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with open_store(tmp_path) as s:
        yield s


def said(task_id: str, text: str, when: datetime) -> Task:
    return Task(
        task_id=task_id,
        action=USER_MESSAGE,
        source_agent="user",
        parameters={"content": text},
        created_at=when,
    )


DIARY = [
    said("march", "I posted a photo of my garden on social media", day(2023, 3, 2)),
    said("may", "I posted a short video on social media", day(2023, 5, 26)),
    said("april", "We shared a long social media post about the garden photo", day(2023, 4, 10)),
]


def test_search_favours_what_was_recorded_when_the_query_says(store: SQLiteStore) -> None:
    memory = LoomMemory(
        "diary",
        store=store,
        clock=lambda: NOW,
        ranking=MemoryRanking(neighbour_weight=0),
        embedder=None,
    )
    memory.add_tasks(DIARY)
    plain = memory.search("what did I post on social media", limit=3)
    assert all(h.time_match is None for h in plain)
    timed = memory.search("what did I post on social media 5 days ago", limit=3)
    assert timed[0].task.task_id == "may"
    assert {h.task.task_id: h.time_match for h in timed} == {"may": 1.0, "march": 0, "april": 0}
    # outside the span a task keeps half its score (time_decay 0.5)
    untimed = {h.task.task_id: h.score for h in memory.search("social media 5 days", limit=3)}
    for hit in timed:
        factor = 1.0 if hit.task.task_id == "may" else 0.5
        assert hit.score == pytest.approx(untimed[hit.task.task_id] * factor)


def test_chinese_time_reference_in_search(store: SQLiteStore) -> None:
    memory = LoomMemory(
        "diary",
        store=store,
        clock=lambda: NOW,
        ranking=MemoryRanking(neighbour_weight=0),
        embedder=None,
    )
    memory.add_tasks(
        [
            said("february", "我们讨论了数据库迁移", day(2023, 2, 1)),
            said("april", "我们讨论了数据库迁移", day(2023, 4, 18)),
        ]
    )
    assert [h.task.task_id for h in memory.search("数据库迁移", limit=2)] == ["april", "february"]
    assert [h.task.task_id for h in memory.search("二月的数据库迁移", limit=2)] == [
        "february",
        "april",
    ]
    hits = memory.search("上个月的数据库迁移", limit=2)
    assert [(h.task.task_id, h.time_match) for h in hits] == [("april", 1.0), ("february", 0.0)]
    assert hits[1].score == pytest.approx(hits[0].score / 2)


def test_a_time_no_task_is_near_changes_nothing(store: SQLiteStore) -> None:
    """A story's "last year" is not about when things were recorded here."""
    memory = LoomMemory("diary", store=store, clock=lambda: NOW, embedder=None)
    memory.add_tasks(DIARY)
    query = "social media garden photo yesterday"
    hits = memory.search(query, limit=3)
    assert all(h.time_match is None for h in hits)
    assert [h.score for h in hits] == [
        h.score for h in memory.search("social media garden photo", limit=3)
    ]


def test_time_decay_zero_ignores_time_and_the_clock_defaults_to_now(store: SQLiteStore) -> None:
    memory = LoomMemory(
        "diary", store=store, ranking=MemoryRanking(time_decay=0), clock=lambda: NOW, embedder=None
    )
    memory.add_tasks(DIARY)
    assert all(h.time_match is None for h in memory.search("social media 5 days ago", limit=3))
    fresh = LoomMemory("other", store=store, embedder=None)
    assert abs(fresh.clock() - datetime.now(UTC)) < timedelta(minutes=5)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"ranking": {"time_decay": -0.1}}, r"`time_decay` must be in 0..1"),
        ({"ranking": {"time_decay": 1.5}}, r"`time_decay` must be in 0..1"),
        ({"ranking": {"time_decay": math.nan}}, r"`time_decay` must be in 0..1"),
        ({"ranking": {"time_decay": True}}, r"`time_decay` must be in 0..1"),
        ({"clock": "2023-05-31"}, r"`clock` must be a function"),
    ],
)
def test_time_settings_are_validated(options: dict[str, object], match: str) -> None:
    options = dict(options)
    ranking: Any = options.pop("ranking", {})
    with pytest.raises(ConfigError, match=match):
        LoomMemory("session", **options, embedder=None, ranking=MemoryRanking(**ranking))  # type: ignore[arg-type]

"""When a query points at: "5 days ago", "last week", "上个月" resolved to spans of time.

"What did I post 5 days ago?" names a time, not a topic: the turns that answer it share few
words with it, and the turns that share its words ("post") come from any day. Memory search
uses the span a query points at to favour what was recorded then (`LoomMemory.search`,
`time_decay`). No LLM and no date library: a few dozen patterns, English and Chinese, resolved
against a reference time (`now`):

- a day: ``yesterday``, ``today``, ``the day before yesterday``, ``last friday``; 昨天, 前天, 今天
- an offset: ``N days / weeks / months / years ago`` (digits, ``a``, ``one``-``twelve``,
  ``a couple of``, ``a few``); ``N天前``, ``三周前``, ``两个月前``, ``N年前``. Weeks, months and
  years are approximate in speech, so their span is wider than the exact offset: a week ago
  is 4-10 days back, a month ago 20-40 days;
- a calendar period: ``last week / weekend / month / year``, ``this week / month / year``;
  上周, 上周末, 上个月, 去年, 本周, 这个月, 今年;
- a stretch up to now: ``the past / last N days / weeks / months``, ``the past month``;
  最近三天, 过去两周;
- a month by name: ``in June``, ``during March 2023``, ``early May`` (a preposition or a
  qualifier first, as "may" is also a verb); 六月, 2023年3月. Without a year, the latest such
  month up to now.

Future references (``this weekend``, ``next week``) and vague ones (``recently``) resolve to
nothing in a query: they do not say when something was recorded. Proximity
(`TimeSpan.proximity`) is 1 inside a span and falls linearly to 0 over a margin around it (at
least a day), as dates in speech are loose.

The same phrases in a remembered turn ("I went to a support group yesterday") are resolved
against the day the turn was said, when it is written (`turn_spans`; there ``tomorrow``,
``next week / month / year`` and 明天, 下周, 下个月, 明年 count too: a plan has a date).
Memory keeps them with the task (`TIME_REFS`, as data: `spans_to_data`, `spans_of`), so a
question that asks when something happened (`asks_when`) or names a time finds the turn by
the date it speaks of, and the window's label shows that date (`span_text`): a model reading
"yesterday" in a turn from last year should not have to work it out.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = [
    "NO_TIME",
    "TIME_REFS",
    "TimeSpan",
    "asks_when",
    "meetings",
    "micros",
    "proximities",
    "span_text",
    "spans_of",
    "spans_to_data",
    "time_spans",
    "turn_spans",
]

TIME_REFS: Final = "time_refs"
"""The task metadata key of the times a turn speaks of, resolved when it was written: a list
of ``{"phrase", "start", "end"}`` (ISO datetimes, ``start <= t < end``)."""

_DAY: Final = timedelta(days=1)
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO: Final = timedelta(microseconds=1)

NO_TIME: Final = np.iinfo(np.int64).min
"""`micros` of no time: `proximities` leaves it out."""

_EN_NUMBERS: Final = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
    "a couple of": 2, "a few": 3, "couple of": 2, "few": 3,
}  # fmt: skip
_EN_NUMBER: Final = r"\d{1,3}|a couple of|couple of|a few|few|an|a|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"  # noqa: E501
_WEEKDAYS: Final = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")

# Offsets back in time, in days, and how loose each unit is (days either side).
_UNITS: Final = {"day": (1, 0), "week": (7, 3), "weekend": (7, 3), "month": (30, 10),
                  "year": (365, 60)}  # fmt: skip
_ZH_UNITS: Final = {"天": "day", "日": "day", "周": "week", "星期": "week", "个星期": "week",
                    "礼拜": "week", "个礼拜": "week", "个月": "month", "月": "month",
                    "年": "year"}  # fmt: skip
_ZH_DIGITS: Final = {"零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6,
                     "七": 7, "八": 8, "九": 9}  # fmt: skip
_ZH_NUMBER: Final = r"\d{1,3}|[零一二两三四五六七八九十]{1,3}"
_ZH_UNIT: Final = r"个星期|个礼拜|星期|礼拜|个月|天|日|周|月|年"

_EN_AGO: Final = re.compile(rf"\b({_EN_NUMBER})\s+(day|weekend|week|month|year)s?\s+ago\b")
_EN_PAST: Final = re.compile(
    rf"\b(?:the\s+)?(?:past|last|previous)\s+(?:({_EN_NUMBER})\s+)?(day|week|month|year)s?\b"
)
_EN_WORDS: Final = re.compile(
    r"\b(the day before yesterday|yesterday|last night|today|tonight|this morning"
    r"|this afternoon|this evening|last weekend|last week|last month|last year"
    r"|this week|this month|this year"
    r"|(?:this |the )?past weekend"
    r"|last (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday"
    r"|mon|tues?|wed|thu(?:rs?)?|fri))\b"
)
# "last tues", "last fri": weekday abbreviations, as people write them ("sat", "sun" are
# words too)
_WEEKDAY_OF: Final = {
    "mon": 0, "tue": 1, "tues": 1, "wed": 2, "thu": 3, "thur": 3, "thurs": 3, "fri": 4,
    "sat": 5, "sun": 6, **{day: i for i, day in enumerate(("monday", "tuesday", "wednesday",
    "thursday", "friday", "saturday", "sunday"))},
}  # fmt: skip
# What every match of a pattern holds (`_matches`): `_EN_AGO`, `_EN_PAST`, `_EN_WORDS`,
# `_ZH_AGO`, `_ZH_PAST`, `_ZH_MONTH` (and `_EN_MONTH` a month's name).
_AGO: Final = ("ago",)
_BACK: Final = ("past", "last", "previous")
_WORDS: Final = ("yesterday", "last", "today", "tonight", "this", "past")
_ZH_BEFORE: Final = ("前",)
_ZH_RECENT: Final = ("近", "过去")
_ZH_MONTH_SIGN: Final = ("月",)
_ZH_AGO: Final = re.compile(rf"({_ZH_NUMBER})\s*({_ZH_UNIT})(?:以前|之前|前)")
_ZH_PAST: Final = re.compile(rf"(?:最近|过去|近)\s*的?\s*({_ZH_NUMBER})\s*({_ZH_UNIT})")
_MONTHS: Final = ("january", "february", "march", "april", "may", "june", "july", "august",
                  "september", "october", "november", "december")  # fmt: skip
# "in May", "during March 2023", "early June": a preposition or qualifier first, as "may" is
# also a verb.
_EN_MONTH: Final = re.compile(
    rf"\b(?:in|during|since|of|early|mid|late|last)\s+({'|'.join(_MONTHS)})\b(?:,?\s+(\d{{4}}))?"
)
_ZH_MONTH: Final = re.compile(
    r"(?:(\d{4})\s*年\s*)?(?<![个上下这本每])(1[0-2]|0?[1-9]|十[一二]?|[一二三四五六七八九])月(?!前|以前|之前)"
)
_EN_NEXT: Final = re.compile(
    r"\b(tomorrow|next (?:week|month|year|monday|tuesday|wednesday|thursday|friday|saturday"
    r"|sunday))\b"
)
_ZH_NEXT: Final = re.compile(r"明天|后天|下周|下个?星期|下个月|下月|明年")
_EN_WHEN: Final = re.compile(
    r"\b(?:when|what (?:date|day|year|month|week)|which (?:date|day|year|month|week)"
    r"|how long ago|how many (?:days|weeks|months|years) ago)\b"
)
_ZH_WHEN: Final = re.compile(
    r"什么时候|何时|哪天|哪一天|哪年|哪一年|几月|几号|哪个月|多久以前|多久前"
)
_ZH_WORDS: Final = re.compile(
    r"大前天|前天|昨天|昨日|昨晚|今天|今日|今晚|上周末|上个?星期|上个?礼拜|上周|上个月|上月"
    r"|去年|本周|这周|这个?星期|本月|这个月|今年"
)


@dataclass(frozen=True, slots=True)
class TimeSpan:
    """A span of time a query points at, ``start <= t < end`` (aware datetimes, UTC), and
    the words that named it."""

    start: datetime
    end: datetime
    phrase: str

    def proximity(self, when: datetime) -> float:
        """1 inside the span, falling linearly to 0 over a margin of half its length (at
        least a day) on either side. Naive datetimes are taken as UTC."""
        when = _aware(when)
        if self.start <= when < self.end:
            return 1.0
        margin = max(_DAY, (self.end - self.start) / 2)
        gap = self.start - when if when < self.start else when - self.end
        return max(0.0, 1.0 - gap / margin)

    def meets(self, other: TimeSpan) -> float:
        """How close `other` (a time a turn names) is to this span (one a query names): 1
        when they overlap, else this span's proximity to its nearer end."""
        if other.start < self.end and self.start < other.end:
            return 1.0
        return max(self.proximity(other.start), self.proximity(other.end))


def micros(when: datetime) -> int:
    """`when` as whole microseconds since the epoch (naive: UTC), exact: what `proximities`
    compares (a datetime's own resolution, so no rounding)."""
    return (_aware(when) - _EPOCH) // _MICRO


def proximities(spans: Sequence[TimeSpan], times: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """The best `TimeSpan.proximity` of each of `times` (`micros`) to any of `spans`, over a
    whole array at once (memory search scores every task found); the same floats, as the
    gaps and margins are exact integers of microseconds divided as `timedelta`s divide.
    NaN for `NO_TIME` and when `spans` is empty."""
    best = np.full(times.shape, np.nan)
    timed = times != NO_TIME
    at = times[timed]
    if not spans or not at.size:
        return best
    out = np.full(at.shape, -np.inf)
    for span in spans:
        out = np.maximum(out, _proximity(span, at))
    best[timed] = out
    return best


def meetings(
    spans: Sequence[TimeSpan], starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]
) -> npt.NDArray[np.float64]:
    """The best `TimeSpan.meets` of each span of times a turn names (its start and end in
    `starts` and `ends`, as `micros`) with any of `spans` (a query's; not empty), over whole
    arrays: the same floats, as `proximities` gives."""
    out = np.full(starts.shape, -np.inf)
    for span in spans:
        start, end = micros(span.start), micros(span.end)
        near = np.maximum(_proximity(span, starts), _proximity(span, ends))
        out = np.maximum(out, np.where((starts < end) & (start < ends), 1.0, near))
    return out


def _proximity(span: TimeSpan, at: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """`span.proximity` of each of `at` (`micros`): the gap and the margin are exact integers
    of microseconds, divided as `timedelta`s divide (a gap whose float is not exact lies far
    beyond any margin, so comes to 0 either way)."""
    start, end = micros(span.start), micros(span.end)
    margin = max(_DAY, (span.end - span.start) / 2) // _MICRO
    gap = np.where(at < start, start - at, at - end)
    near = np.maximum(0.0, 1.0 - gap / margin)
    out: npt.NDArray[np.float64] = np.where((start <= at) & (at < end), 1.0, near)
    return out


def time_spans(query: str, now: datetime) -> list[TimeSpan]:
    """The spans of time `query` points at, in the order named (empty if none), relative to
    `now` (a naive `now` is taken as UTC)."""
    now = _aware(now)
    text = query.lower()
    found: list[tuple[int, TimeSpan]] = []
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    for m in _matches(_EN_AGO, text, _AGO):
        found.append((m.start(), _ago(today, _EN_NUMBERS.get(m[1]) or int(m[1]), m[2], m[0])))
    for m in _matches(_EN_PAST, text, _BACK):
        count = 1 if m[1] is None else _EN_NUMBERS.get(m[1]) or int(m[1])
        if m[1] is None and "past" not in m[0]:
            continue  # "last week" is a calendar week (below), "the past week" 7 days
        found.append((m.start(), _stretch(now, count, m[2], m[0])))
    for m in _matches(_EN_WORDS, text, _WORDS):
        found.append((m.start(), _named(now, today, m[0])))
    for m in _matches(_ZH_AGO, query, _ZH_BEFORE):
        found.append((m.start(), _ago(today, _zh_number(m[1]), _ZH_UNITS[m[2]], m[0])))
    for m in _matches(_ZH_PAST, query, _ZH_RECENT):
        found.append((m.start(), _stretch(now, _zh_number(m[1]), _ZH_UNITS[m[2]], m[0])))
    for m in _matches(_EN_MONTH, text, _MONTHS):
        found.append((m.start(), _month(today, _MONTHS.index(m[1]) + 1, m[2], m[0])))
    for m in _matches(_ZH_MONTH, query, _ZH_MONTH_SIGN):
        found.append((m.start(), _month(today, _zh_number(m[2]), m[1], m[0])))
    for m in _ZH_WORDS.finditer(query):
        found.append((m.start(), _named(now, today, m[0])))
    spans: list[TimeSpan] = []
    for _, span in sorted(found, key=lambda pair: pair[0]):
        if span.end > span.start and span not in spans:
            spans.append(span)
    return spans


def _matches(
    pattern: re.Pattern[str], text: str, needles: Sequence[str]
) -> Iterator[re.Match[str]]:
    """`pattern`'s matches in `text`, found without a scan of a text that holds none of
    `needles` (words every match of the pattern holds): most texts name no time, and the
    patterns' alternatives cost a try at every position."""
    return pattern.finditer(text) if any(n in text for n in needles) else iter(())


def turn_spans(text: str, said: datetime) -> list[TimeSpan]:
    """The times a remembered turn speaks of, resolved against `said` (when it was said):
    `time_spans`' phrases and the future ones a plan names (``tomorrow``, ``next week``,
    明天, 下个月). Empty when it names none."""
    said = _aware(said)
    spans = time_spans(text, said)
    today = said.replace(hour=0, minute=0, second=0, microsecond=0)
    ahead = [(m.start(), m[0]) for m in _EN_NEXT.finditer(text.lower())]
    ahead += [(m.start(), m[0]) for m in _ZH_NEXT.finditer(text)]
    for _, phrase in sorted(ahead):
        span = _next(today, phrase)
        if span not in spans:
            spans.append(span)
    return spans


def asks_when(query: str) -> bool:
    """Whether `query` asks when something happened ("When did ...", "what year", "how long
    ago", 什么时候, 哪天)."""
    return bool(_EN_WHEN.search(query.lower()) or _ZH_WHEN.search(query))


def spans_to_data(spans: list[TimeSpan]) -> list[dict[str, str]]:
    """`spans` as JSON-ready data (the `TIME_REFS` form)."""
    return [
        {"phrase": s.phrase, "start": s.start.isoformat(), "end": s.end.isoformat()} for s in spans
    ]


def spans_of(metadata: object) -> tuple[TimeSpan, ...]:
    """The spans stored under `TIME_REFS` in a task's `metadata`; entries that are not of
    that form are skipped (metadata comes from outside), so this never raises."""
    if not isinstance(metadata, Mapping):
        return ()
    items = metadata.get(TIME_REFS)
    if not isinstance(items, list):
        return ()
    out = []
    for item in items:
        try:
            start = _aware(datetime.fromisoformat(item["start"]))
            end = _aware(datetime.fromisoformat(item["end"]))
            out.append(TimeSpan(start, end, str(item["phrase"])))
        except (TypeError, KeyError, ValueError):
            continue
    return tuple(out)


def span_text(span: TimeSpan) -> str:
    """A span as a label says it: a day ``"7 May 2023"``, a calendar month ``"May 2023"``, a
    calendar year ``"2022"``, a loose stretch longer than a month by its middle (``"about
    May 2021"``), else its first and last day (``"1-7 May 2023"``)."""
    start, last = span.start, span.end - _DAY
    if last <= start:
        return f"{start.day} {start:%b %Y}"
    calendar = start.day == 1 and span.end.day == 1
    if calendar and (start.month, span.end.month, span.end.year) == (1, 1, start.year + 1):
        return str(start.year)
    if calendar and last.month == start.month:
        return f"{start:%b %Y}"
    if span.end - span.start > 31 * _DAY:
        middle = span.start + (span.end - span.start) / 2
        return f"about {middle:%b %Y}"
    if (start.year, start.month) == (last.year, last.month):
        return f"{start.day}-{last.day} {last:%b %Y}"
    if start.year == last.year:
        return f"{start.day} {start:%b}-{last.day} {last:%b %Y}"
    return f"{start.day} {start:%b %Y}-{last.day} {last:%b %Y}"


def _next(today: datetime, phrase: str) -> TimeSpan:
    """A day or calendar period ahead of `today`."""
    monday = today - timedelta(days=today.weekday())
    month = today.replace(day=1)
    if phrase in ("tomorrow", "明天", "后天"):
        day = today + timedelta(days=2 if phrase == "后天" else 1)
        return TimeSpan(day, day + _DAY, phrase)
    if phrase.startswith("next ") and phrase[5:] in _WEEKDAYS:
        gap = (_WEEKDAYS.index(phrase[5:]) - today.weekday()) % 7 or 7
        day = today + timedelta(days=gap)
        return TimeSpan(day, day + _DAY, phrase)
    if phrase in ("next week", "下周", "下星期", "下个星期"):
        return TimeSpan(monday + 7 * _DAY, monday + 14 * _DAY, phrase)
    if phrase in ("next month", "下个月", "下月"):
        start = (month + 32 * _DAY).replace(day=1)
        return TimeSpan(start, (start + 32 * _DAY).replace(day=1), phrase)
    assert phrase in ("next year", "明年"), phrase
    start = today.replace(year=today.year + 1, month=1, day=1)
    return TimeSpan(start, start.replace(year=start.year + 1), phrase)


def _aware(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


def _zh_number(text: str) -> int:
    if text.isdigit():
        return int(text)
    if "十" not in text:
        return _ZH_DIGITS.get(text, 1)
    tens, _, ones = text.partition("十")
    return (_ZH_DIGITS.get(tens, 1) if tens else 1) * 10 + (_ZH_DIGITS.get(ones, 0) if ones else 0)


def _ago(today: datetime, count: int, unit: str, phrase: str) -> TimeSpan:
    """The day `count` units back, widened by the unit's looseness."""
    days, loose = _UNITS[unit]
    day = today - timedelta(days=count * days)
    return TimeSpan(day - timedelta(days=loose), day + timedelta(days=loose + 1), phrase)


def _month(today: datetime, month: int, year: str | None, phrase: str) -> TimeSpan:
    """A named month: of `year`, else the latest one not after today ("in June" asked in
    March means last year's June)."""
    number = int(year) if year else today.year - (month > today.month)
    start = today.replace(year=number, month=month, day=1)
    end = start.replace(year=number + month // 12, month=month % 12 + 1)
    return TimeSpan(start, end, phrase)


def _stretch(now: datetime, count: int, unit: str, phrase: str) -> TimeSpan:
    """From `count` units back up to now."""
    return TimeSpan(now - timedelta(days=count * _UNITS[unit][0]), now + _DAY, phrase)


def _named(now: datetime, today: datetime, phrase: str) -> TimeSpan:
    """A named day or calendar period."""
    monday = today - timedelta(days=today.weekday())
    month = today.replace(day=1)
    year = today.replace(month=1, day=1)
    back = {
        "the day before yesterday": 2, "前天": 2, "大前天": 3, "yesterday": 1, "last night": 1,
        "昨天": 1, "昨日": 1, "昨晚": 1, "today": 0, "tonight": 0, "this morning": 0,
        "this afternoon": 0, "this evening": 0, "今天": 0, "今日": 0, "今晚": 0,
    }  # fmt: skip
    if phrase in back:
        day = today - timedelta(days=back[phrase])
        return TimeSpan(day, day + _DAY, phrase)
    if phrase.startswith("last ") and phrase[5:] in _WEEKDAY_OF:
        gap = (today.weekday() - _WEEKDAY_OF[phrase[5:]]) % 7 or 7
        day = today - timedelta(days=gap)
        return TimeSpan(day, day + _DAY, phrase)
    if phrase in ("last weekend", "上周末") or phrase.endswith("past weekend"):
        saturday = monday - timedelta(days=2)
        return TimeSpan(saturday, monday, phrase)
    if phrase in ("this week", "本周", "这周", "这星期", "这个星期"):
        return TimeSpan(monday, now + _DAY, phrase)
    if phrase in ("this month", "本月", "这个月"):
        return TimeSpan(month, now + _DAY, phrase)
    if phrase in ("this year", "今年"):
        return TimeSpan(year, now + _DAY, phrase)
    if phrase in ("last week", "上周", "上星期", "上个星期", "上礼拜", "上个礼拜"):
        return TimeSpan(monday - 7 * _DAY, monday, phrase)
    if phrase in ("last month", "上个月", "上月"):
        previous = (month - _DAY).replace(day=1)
        return TimeSpan(previous, month, phrase)
    assert phrase in ("last year", "去年"), phrase
    return TimeSpan(year.replace(year=year.year - 1), year, phrase)

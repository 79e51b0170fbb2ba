"""The benchmark datasets as values: LoCoMo conversations and LongMemEval_S questions.

`load_locomo` reads a ``locomo10.json``-format file, `load_longmemeval` a
``longmemeval_s.json``-format one (``.json`` or ``.json.gz``); anything else raises a
`ConfigError` naming the file, the place and what was expected there.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from loomctx.errors import ConfigError

__all__ = [
    "LocomoConversation",
    "LocomoQuestion",
    "LocomoTurn",
    "LongMemEvalQuestion",
    "load_locomo",
    "load_longmemeval",
    "locomo_date",
    "read_json",
]


@dataclass(frozen=True, slots=True)
class LocomoTurn:
    dia_id: str
    speaker: str
    text: str  # with the image caption, if any
    session: int
    date: str


@dataclass(frozen=True, slots=True)
class LocomoQuestion:
    question: str
    evidence: tuple[str, ...]
    category: int


@dataclass(frozen=True, slots=True)
class LocomoConversation:
    sample_id: str
    speakers: tuple[str, str]
    turns: tuple[LocomoTurn, ...]
    questions: tuple[LocomoQuestion, ...]


@dataclass(frozen=True, slots=True)
class LongMemEvalQuestion:
    question_id: str
    question_type: str
    question: str
    session_ids: tuple[str, ...]
    sessions: tuple[tuple[tuple[str, str], ...], ...]  # per session: (role, content) turns
    answer_session_ids: tuple[str, ...]
    session_dates: tuple[datetime | None, ...] = ()  # when each session took place
    question_date: datetime | None = None  # when the question is asked
    # (session, turn) of each turn the file marks `has_answer`: for the metrics only
    answer_turns: tuple[tuple[int, int], ...] = ()

    @property
    def abstention(self) -> bool:
        return "_abs" in self.question_id


def read_json(path: str | Path) -> Any:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{str(p)!r}: no such file (expected a .json or .json.gz file)")
    try:
        if p.name.endswith(".gz"):
            with gzip.open(p, "rt", encoding="utf-8") as f:
                return json.load(f)
        with p.open(encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, EOFError) as exc:
        raise ConfigError(f"{str(p)!r}: not readable JSON ({exc})") from exc


def _need(obj: Any, key: str, kind: type | tuple[type, ...], path: Path, where: str) -> Any:
    if not isinstance(obj, Mapping) or key not in obj:
        raise ConfigError(f"{str(path)!r}: {where} has no `{key}`")
    value = obj[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise ConfigError(
            f"{str(path)!r}: {where}: `{key}` must be a {names}, got {type(value).__name__}"
        )
    return value


_SESSION = re.compile(r"^session_(\d+)$")
_DIA_ID = re.compile(r"D\d+:\d+")


def load_locomo(path: str | Path) -> list[LocomoConversation]:
    """The conversations of a LoCoMo file (``locomo10.json`` format), or `ConfigError`."""
    p = Path(path)
    data = read_json(p)
    if not isinstance(data, list) or not data:
        raise ConfigError(f"{str(p)!r}: a LoCoMo file is a non-empty list of conversations")
    out = []
    for i, item in enumerate(data):
        where = f"conversation {i}"
        sample_id = str(item.get("sample_id", f"conv-{i}")) if isinstance(item, Mapping) else ""
        conv = _need(item, "conversation", Mapping, p, where)
        qa = _need(item, "qa", list, p, where)
        sessions = sorted(
            (int(m.group(1)), k) for k in conv if (m := _SESSION.match(k)) and conv[k]
        )
        if not sessions:
            raise ConfigError(f"{str(p)!r}: {where}: `conversation` has no `session_N` turns")
        turns = []
        for n, key in sessions:
            date = str(conv.get(f"{key}_date_time", ""))
            for j, turn in enumerate(_need(conv, key, list, p, where)):
                tw = f"{where} {key} turn {j}"
                text = _need(turn, "text", str, p, tw)
                caption = turn.get("blip_caption")
                if caption:
                    text = f"{text} and shared {caption}."
                turns.append(
                    LocomoTurn(
                        dia_id=_need(turn, "dia_id", str, p, tw),
                        speaker=_need(turn, "speaker", str, p, tw),
                        text=text,
                        session=n,
                        date=date,
                    )
                )
        first = turns[0].speaker
        speaker_a = str(conv.get("speaker_a", first))
        speaker_b = str(conv.get("speaker_b", next((t.speaker for t in turns
                                                    if t.speaker != speaker_a), "")))  # fmt: skip
        questions = []
        for j, q in enumerate(qa):
            qw = f"{where} qa {j}"
            evidence = _need(q, "evidence", list, p, qw)
            category = _need(q, "category", int, p, qw)
            ids: list[str] = []
            for e in evidence:  # a few gold entries hold several ids ("D8:6; D9:17")
                for d in _DIA_ID.findall(str(e)):
                    if d not in ids:
                        ids.append(d)
            questions.append(
                LocomoQuestion(
                    question=_need(q, "question", str, p, qw),
                    evidence=tuple(ids),
                    category=category,
                )
            )
        out.append(
            LocomoConversation(
                sample_id=sample_id,
                speakers=(speaker_a, speaker_b),
                turns=tuple(turns),
                questions=tuple(questions),
            )
        )
    return out


def load_longmemeval(path: str | Path) -> list[LongMemEvalQuestion]:
    """The questions of a LongMemEval file (``longmemeval_s.json`` format), or `ConfigError`."""
    p = Path(path)
    data = read_json(p)
    if not isinstance(data, list) or not data:
        raise ConfigError(f"{str(p)!r}: a LongMemEval file is a non-empty list of questions")
    out = []
    for i, item in enumerate(data):
        where = f"question {i}"
        qid = str(_need(item, "question_id", (str, int), p, where))
        where = f"question {qid!r}"
        ids = _need(item, "haystack_session_ids", list, p, where)
        sessions = _need(item, "haystack_sessions", list, p, where)
        if len(ids) != len(sessions):
            raise ConfigError(
                f"{str(p)!r}: {where}: {len(sessions)} `haystack_sessions` but {len(ids)} "
                "`haystack_session_ids`"
            )
        parsed = []
        for s, session in enumerate(sessions):
            if not isinstance(session, list):
                raise ConfigError(f"{str(p)!r}: {where}: session {s} is not a list of turns")
            parsed.append(
                tuple(
                    (
                        str(_need(t, "role", str, p, f"{where} session {s} turn {j}")),
                        str(_need(t, "content", str, p, f"{where} session {s} turn {j}")),
                    )
                    for j, t in enumerate(session)
                )
            )
        out.append(
            LongMemEvalQuestion(
                question_id=qid,
                question_type=str(_need(item, "question_type", str, p, where)),
                question=_need(item, "question", str, p, where),
                session_ids=tuple(str(x) for x in ids),
                sessions=tuple(parsed),
                answer_session_ids=tuple(
                    str(x) for x in _need(item, "answer_session_ids", list, p, where)
                ),
                session_dates=tuple(_lme_date(d) for d in item.get("haystack_dates") or ()),
                question_date=_lme_date(item.get("question_date")),
                answer_turns=tuple(
                    (s, j)
                    for s, session in enumerate(sessions)
                    for j, t in enumerate(session)
                    if isinstance(t, dict) and t.get("has_answer") is True
                ),
            )
        )
    return out


def _lme_date(value: Any) -> datetime | None:
    """``2023/05/20 (Sat) 11:56`` as a UTC datetime; None if absent or in another form (the
    dates only serve questions that name a time, "5 days ago")."""
    if not isinstance(value, str):
        return None
    try:
        text = re.sub(r"\s*\([^)]*\)", "", value).strip()
        return datetime.strptime(text, "%Y/%m/%d %H:%M").replace(tzinfo=UTC)
    except ValueError:
        return None


def locomo_date(value: str) -> datetime | None:
    """``1:56 pm on 8 May, 2023`` as a UTC datetime; None if empty or in another form."""
    try:
        return datetime.strptime(value.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    except ValueError:
        return None

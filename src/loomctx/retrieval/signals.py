"""The reranker's signals (seed 002): each scores every piece of a pool from 0 to 1.

- `RelevanceSignal` (0.40): the recall score ("vector/relevance score" in seed 002): the
  fused relevance of the recall (which includes the cosine similarity when there is one),
  relative to the best piece's.
- `QueryOverlapSignal` (0.35): the share of the query's terms found in the piece, each term
  weighted by its rarity in the pool.
- `OriginDiversitySignal` (0.15): 0.3 if the piece's origin holds more than 70% of the pool,
  0.6 if more than 50%, else 1.
- `ContentLengthSignal` (0.10): 1 for 200-800 characters, less for shorter or longer.
- `SpeakerSignal` (0.10): 0 for a message said by someone other than the person a query
  names, else 1 (a query naming no speaker: 1 for all, which changes no order).
- `TimeSignal` (0.10): how close a task was recorded to the time the query names (memory's
  ``time_match``); 1 for every piece of a query naming no time, which changes no order.
- `RoleSignal` (0.05): for a query in the first person that does not address the assistant,
  0 for the assistant's messages, else 1 (any other query: 1 for all).
- `SessionSignal` (0.10): the recall relevance of the three best pieces of the piece's
  session (a knowledge chunk's: its document) in the pool, relative to the best session's: a
  session many of whose turns match the query a little rises past a stray turn of another.

A signal is anything with a `name`, a `weight` and ``score(query, pool)``, which returns one
score per piece of the pool, in its order, as a numpy array. It sees the whole pool at once
(diversity and rarity are properties of the pool) and keeps nothing between calls: a signal
object holds only its configuration, so one reranker may serve concurrent builds. Write your
own and pass it to `Reranker`.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from itertools import chain
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from loomctx.errors import ConfigError, check_int
from loomctx.memory.task import ASSISTANT_MESSAGE
from loomctx.retrieval.evidence import Evidence, session_of, term_set
from loomctx.text import terms

__all__ = [
    "ContentLengthSignal",
    "OriginDiversitySignal",
    "QueryOverlapSignal",
    "RelevanceSignal",
    "Scores",
    "SessionSignal",
    "Signal",
    "SpeakerSignal",
    "TimeSignal",
    "default_signals",
]

Scores = npt.NDArray[np.float64]
"""One float per piece of a pool, in the pool's order."""


@runtime_checkable
class Signal(Protocol):
    """One reason to rank a piece of evidence higher, scored 0..1, weighted in the final
    score."""

    name: str
    weight: float

    def score(self, query: str, pool: Sequence[Evidence]) -> Scores:
        """0..1 for each piece of `pool` (deduplicated), in its order."""
        ...


def is_weight(value: object) -> bool:
    """A finite number >= 0 (not a bool)."""
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and value >= 0
    )


class _Signal:
    name = "signal"

    def __init__(self, weight: float) -> None:
        if not is_weight(weight):
            raise ConfigError(
                f"signal `{self.name}`: `weight` must be a number >= 0, got {weight!r}"
            )
        self.weight = float(weight)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(weight={self.weight})"


class RelevanceSignal(_Signal):
    """The recall-time relevance relative to the best piece's (0..1). Seed 002 takes "the
    vector/relevance score from recall"; raw cosine alone would throw away the lexical
    evidence recall fused in (on LoCoMo it costs 5 points of R@10 against the recall order).

    Relative, because memory's relevance lives in a narrow band: its neighbour smoothing
    divides by ``1 + 2 * neighbour_weight``, so the best turn often scores about 0.5, while
    the other signals span 0..1; as it was, the signal weighed less than its 0.40 said
    (measurements: docs/benchmarks.md).

    Its `name` is ``"vector_score"``, seed 002's, which `Reranker(weights=...)`,
    `RetrievalSettings.vector_weight` and every report's ``signals`` already use."""

    name = "vector_score"

    def __init__(self, weight: float = 0.40) -> None:
        super().__init__(weight)

    def score(self, query: str, pool: Sequence[Evidence]) -> Scores:
        relevance = np.array([e.scores.get("relevance", 0.0) for e in pool], dtype=np.float64)
        best = max(relevance.tolist(), default=1.0)
        if best <= 0:
            return np.zeros(len(pool))
        return np.minimum(1.0, np.maximum(0.0, relevance / best))


class QueryOverlapSignal(_Signal):
    """The share of the query's distinct terms (stemmed words, CJK bigrams) in the piece,
    each term weighted by how rare it is in the pool: ``ln(1 + (n + 1) / (df + 0.5))``,
    `df` the pieces holding it, of `n`.

    Unweighted, "get" and "new" count as much as "fryer" and "gadget": in "what new kitchen
    gadget did I get before the Air Fryer?" a turn about getting a bike outranked the one
    about a new Instant Pot. Rarity is taken over the pool (as diversity is), as the
    reranker sees nothing else (measurements: docs/benchmarks.md)."""

    name = "query_overlap"

    def __init__(self, weight: float = 0.35) -> None:
        super().__init__(weight)

    def score(self, query: str, pool: Sequence[Evidence]) -> Scores:
        wanted = frozenset(terms(query))
        n = len(pool)
        # The query's terms each piece holds (a set intersection walks the smaller set: the
        # query's few terms, not a chunk's hundreds). Pieces share few distinct such sets, so
        # each set's weight is summed once.
        held = list(map(wanted.intersection, [term_set(e.text) for e in pool]))
        df = Counter(chain.from_iterable(held))
        # In sorted order: a set's order changes with the process's string hashing, and the
        # sums below would differ in their last bits between processes.
        weights = {t: math.log(1 + (n + 1) / (df[t] + 0.5)) for t in sorted(wanted)}
        total = sum(weights.values())
        if not total:
            return np.zeros(n)
        sums: dict[frozenset[str], float] = {}
        for have in held:
            if have not in sums:
                sums[have] = _held(weights, have) / total
        return np.array([sums[have] for have in held], dtype=np.float64)


def _held(weights: Mapping[str, float], have: frozenset[str]) -> float:
    """The weights of the terms `have` holds, summed in the order of `weights`."""
    return sum(w for t, w in weights.items() if t in have)


class OriginDiversitySignal(_Signal):
    """Keeps one origin from filling the window: pieces of an origin holding more than 70%
    of the pool score 0.3, more than 50% score 0.6, the rest 1."""

    name = "origin_diversity"

    def __init__(self, weight: float = 0.15) -> None:
        super().__init__(weight)

    def score(self, query: str, pool: Sequence[Evidence]) -> Scores:
        counts = Counter(e.origin for e in pool)
        total = len(pool)
        by_origin = {
            origin: 0.3 if n / total > 0.7 else 0.6 if n / total > 0.5 else 1.0
            for origin, n in counts.items()
        }
        return np.array([by_origin[e.origin] for e in pool], dtype=np.float64)


class ContentLengthSignal(_Signal):
    """Moderate length first: 1 for `low`..`high` characters (200-800), falling linearly to
    0 at an empty text and as ``high / length`` above `high` (a 1,600-character chunk: 0.5)."""

    name = "content_length"

    def __init__(self, weight: float = 0.10, *, low: int = 200, high: int = 800) -> None:
        super().__init__(weight)
        if not 0 < low <= high:
            raise ConfigError(f"ContentLengthSignal: need 0 < low <= high, got {low!r}, {high!r}")
        self.low = low
        self.high = high

    def score(self, query: str, pool: Sequence[Evidence]) -> Scores:
        low, high = self.low, self.high
        lengths = [len(e.text.strip()) for e in pool]
        return np.array(
            [n / low if n < low else 1.0 if n <= high else high / n for n in lengths],
            dtype=np.float64,
        )


class SpeakerSignal(_Signal):
    """Who said it: when the query names the speaker of some pieces ("What did Caroline
    research?"), a message said by another speaker scores 0, the rest 1 (those of a named
    speaker, and pieces without one: knowledge, tool calls). A query naming no speaker
    scores every piece 1, which changes no order. A speaker is the ``speaker`` a message
    task was recorded with (`Task.parameters`), matched as a whole word, in any case.

    In a conversation between two people, a question about one of them matches the other's
    turns that address her by name ("Woah, Caroline, ...") as well as her own: on the LoCoMo
    dev questions that name one speaker, 82% of the gold turns are that speaker's, against
    63% of the top five retrieved. The weight, 0.10, was chosen by leave-one-conversation-out
    (docs/benchmarks.md)."""

    name = "speaker"

    def __init__(self, weight: float = 0.10) -> None:
        super().__init__(weight)

    def score(self, query: str, pool: Sequence[Evidence]) -> Scores:
        speakers = [_speaker(e) for e in pool]
        named = {
            s
            for s in set(speakers)
            if s and re.search(rf"(?<!\w){re.escape(s)}(?!\w)", query, re.IGNORECASE)
        }
        if not named:
            return np.ones(len(pool))
        return np.array(
            [1.0 if s is None or s in named else 0.0 for s in speakers], dtype=np.float64
        )


def _speaker(evidence: Evidence) -> str | None:
    """The ``speaker`` of a message task, else None."""
    parameters = getattr(evidence.item, "parameters", None)
    # (a dict is asked first: `isinstance` against the `Mapping` ABC costs more)
    if parameters is None or (type(parameters) is not dict and not isinstance(parameters, Mapping)):
        return None
    speaker = parameters.get("speaker")
    return (speaker.strip() or None) if isinstance(speaker, str) else None


_FIRST_PERSON = re.compile(r"(?<!\w)(?:i|me|my|mine|myself)(?!\w)|我", re.IGNORECASE)
_SECOND_PERSON = re.compile(r"(?<!\w)(?:you|your|yours|yourself)(?!\w)|你|您", re.IGNORECASE)


class RoleSignal(_Signal):
    """Whose words: a query in the first person that does not address the assistant ("what
    did I buy?", not "what did you suggest?") asks about what the user said, so a user's
    message scores 1 and an assistant's 0; any other query scores every piece 1."""

    name = "role"

    def __init__(self, weight: float = 0.05) -> None:
        super().__init__(weight)

    def score(self, query: str, pool: Sequence[Evidence]) -> Scores:
        if not _FIRST_PERSON.search(query) or _SECOND_PERSON.search(query):
            return np.ones(len(pool))
        return np.array(
            [0.0 if getattr(e.item, "action", None) == ASSISTANT_MESSAGE else 1.0 for e in pool],
            dtype=np.float64,
        )


class TimeSignal(_Signal):
    """When it was said: for a query that names a time ("5 days ago", "last month"), how
    close each task was recorded to it (``time_match``, 0..1, which memory search adds to
    what it recalls); 1 for a piece without one (knowledge, or a query naming no time), which
    changes no order when no piece has one.

    Memory search already scales a task's relevance by its closeness (`time_decay`), but
    relevance is one signal of several: a turn of the wrong month that shares the query's
    words still outranked the right one on the other signals."""

    name = "time"

    def __init__(self, weight: float = 0.10) -> None:
        super().__init__(weight)

    def score(self, query: str, pool: Sequence[Evidence]) -> Scores:
        return np.array([_closeness(e) for e in pool], dtype=np.float64)


def _closeness(evidence: Evidence) -> float:
    match = evidence.metadata.get("time_match")
    if match is None:  # the common cases, asked first: no time named, or a float
        return 1.0
    if type(match) is float:
        return match
    return float(match) if isinstance(match, int | float) else 1.0


class SessionSignal(_Signal):
    """What a piece's session says as a whole: the sum of the recall relevance of the `top`
    (3) best pieces of its session in the pool, relative to the best session's (0..1). A
    session is `loomctx.retrieval.evidence.session_of`'s (a task's ``session_id``, else its
    day); a knowledge chunk's is its document, and a piece of neither is a session of one.

    Asked "any cocktail suggestions for a get-together?", a user means the session where they
    talked cocktails through, whose turns each match the query a little, not a stray turn of
    another session sharing "thinking", "not sure" and "choose" with it. Turn by turn the
    stray turn wins; taken together, a session's turns say what it was about. Only the pool
    counts (what recall found for this query), so a long session of unrelated turns gains
    nothing, and every piece of a session scores alike: the signal moves sessions past each
    other, not turns within one. A document is to its chunks what a session is to its turns,
    and scoring chunks by it (rather than 1 for all) keeps the signal from favouring
    knowledge over memory in a pool that holds both."""

    name = "session"

    def __init__(self, weight: float = 0.10, *, top: int = 3) -> None:
        super().__init__(weight)
        check_int(top, "SessionSignal: `top`", minimum=1)
        self.top = top

    def score(self, query: str, pool: Sequence[Evidence]) -> Scores:
        groups = list(map(_group, pool))
        found: dict[Hashable, list[float]] = {}
        for g, e in zip(groups, pool, strict=True):
            relevance = max(0.0, e.scores.get("relevance", 0.0))
            if (values := found.get(g)) is None:
                found[g] = [relevance]
            else:
                values.append(relevance)
        top = self.top
        # (a session of one piece, most knowledge documents, sums its one value unsorted)
        mass = {
            g: sum(sorted(v, reverse=True)[:top]) if len(v) > 1 else sum(v)
            for g, v in found.items()
        }
        best = max(mass.values(), default=0.0)
        if best <= 0:
            return np.ones(len(pool))
        return np.array([mass[g] / best for g in groups], dtype=np.float64)


def _group(evidence: Evidence) -> Hashable:
    """The session of a piece (`session_of`), else its document, else the piece itself."""
    session = session_of(evidence)
    if session is not None:
        return session
    document = evidence.metadata.get("document_id")
    if isinstance(document, str) and document:
        return ("document", evidence.origin, document)
    return ("piece", evidence.key)


def default_signals() -> list[Signal]:
    """Seed 002's four signals, `SpeakerSignal`, `TimeSignal`, `RoleSignal` and
    `SessionSignal`, with their default weights."""
    return [
        RelevanceSignal(),
        QueryOverlapSignal(),
        OriginDiversitySignal(),
        ContentLengthSignal(),
        SpeakerSignal(),
        TimeSignal(),
        RoleSignal(),
        SessionSignal(),
    ]

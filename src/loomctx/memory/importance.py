"""How much a message is worth remembering, from what it says (no LLM).

Seed 004 scores a task by who made it: a user's message 0.9, a failed tool call 0.8, a
completed one 0.7, a subtask or anything else 0.5. That rule is the prior here, and it
alone filled L2 with "Sounds great!": every user message scored 0.9. `message_importance`
moves the prior by what a message says:

- up (toward 1) for what a later turn may need: facts about people and things (numbers,
  dates, times, amounts), names, preferences ("I prefer", "my favourite", "allergic"),
  decisions and plans ("we decided", "let's", "I'll"), corrections ("actually", "I meant",
  "not X but Y", "no longer");
- down (toward 0) for small talk: a message made only of greetings, thanks, agreement or
  laughter ("Sounds great!", "thanks a lot", "haha ok"), and for very short messages that
  carry none of the above.

`content_score(text)` is the evidence in 0..1 (0.5: neutral). Below 0.5 the prior is scaled
down (small talk: 0.9 -> 0.33, under the promotion threshold of 0.6); above it the prior moves
toward 1 by the excess (a user's fact stays at 0.9 or more; an assistant's decision, prior
0.5, reaches 0.6-0.75). Tool calls keep the seed's rule: their results are data whose worth
depends on the task, not on its wording. English and Chinese cue words; anything else is
scored by its numbers, names and length.

Why: with the seed's rule L2 fills with small talk; with this score it holds nearly twice
the evidence a later question needs, so a window of recent and important memory alone holds
more of it (`bench/importance_bench.py`; the figures are in docs/benchmarks.md, "Design
measurements").
"""

from __future__ import annotations

import functools
import re
from typing import Final

__all__ = ["content_score", "message_importance"]

_WORD: Final = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
_CJK: Final = re.compile(r"[\u4e00-\u9fff]")

# Words that make up small talk: a message of these alone says nothing to remember.
_PHATIC_WORDS: Final = """
    a an and the so very really too just all well oh ah aw aww wow yay yeah yes yep yup ya no
    nope nah ok okay k kk sure fine cool nice great awesome amazing wonderful fantastic perfect
    lovely sweet good glad happy fun sounds sound like love it that's that this is was be will
    thanks thank thx ty you u much lot lots again bye goodbye cya later see soon hi hello hey
    morning evening night afternoon day care take same here totally absolutely definitely
    indeed agreed agree true right exactly haha hahaha hehe lol lmao omg hmm um uh me to for of
    in on at with we i i'm im it's its do does did have has had your yours my our talk catch
    chat cheers welcome congrats congratulations best luck wish wishes keep up work
"""
_PHATIC: Final = frozenset(_PHATIC_WORDS.split())
_PHATIC_ZH: Final = re.compile(
    r"^(好的?|嗯+|哈+|谢谢|多谢|是的|对|没问题|好吧|再见|你好|收到|明白了?|太好了|不错)+$"
)

_NUMBER: Final = re.compile(r"\d")
# The cue patterns below are lowercase and searched in the lowercased text: 2.3x faster than
# `re.IGNORECASE` (which folds case at every position of every alternative), the same
# matches on LoCoMo's turns (exotic foldings such as the long s aside).
_TIME_WORDS: Final = re.compile(
    r"\b(jan(uary)?|feb(ruary)?|mar(ch)?|apr(il)?|may|june?|july?|aug(ust)?|sept?(ember)?|"
    r"oct(ober)?|nov(ember)?|dec(ember)?|monday|tuesday|wednesday|thursday|friday|saturday|"
    r"sunday|yesterday|tomorrow|tonight|weekend|next week|last week|next month|"
    r"last month|last year|next year|o'clock|noon)\b|[年月日号点]|昨天|明天|上周|下周",
)
_PREFERENCE: Final = re.compile(
    r"\b(i|we)\s+(really\s+|do\s+not\s+|don't\s+|never\s+|always\s+)?"
    r"(like|love|prefer|hate|enjoy|dislike|want|need|can't stand|am into|'m into)\b|"
    r"\bfavou?rite\b|\ballergic\b|\bvegetarian\b|\bvegan\b|\bmy (name|wife|husband|partner|"
    r"son|daughter|kids?|children|mom|mother|dad|father|sister|brother|dog|cat|job|boss|"
    r"birthday|address|email|phone)\b|喜欢|不喜欢|讨厌|偏好|过敏|我叫",
)
_DECISION: Final = re.compile(
    r"\b(decided|decide|decision|agreed to|we agreed|let's|lets|we'll|i'll|i will|we will|"
    r"going to|gonna|plan(ning|ned)?|deadline|due|schedule[d]?|booked|signed up|"
    r"must|need to|have to|remember to|don't forget|make sure)\b|决定|计划|打算|必须|记得",
)
_CORRECTION: Final = re.compile(
    r"\b(actually|correction|i meant|i mean|not\s+\w+(\s+\w+)?\s+but|instead|changed|"
    r"no longer|anymore|wrong|mistake|update:|scratch that|rather than)\b|"
    r"其实|更正|不是.+而是|改成",
)
_FIRST_PERSON_FACT: Final = re.compile(
    r"\b(i am|i'm|i have|i've|i was|i had|i got|i went|i moved|i started|i work|i live|"
    r"we have|we went|we got|my|our)\b|我是|我有|我的|我们",
)
_SENTENCE_END: Final = re.compile(r"[.!?]\s|\n")

_NEUTRAL: Final = 0.5
_SMALL_TALK: Final = 0.05


def _names(text: str) -> int:
    """Capitalised words that do not start a sentence (and are not "I"): likely names."""
    count = 0
    end = 0  # where the text between the previous word and this one starts
    for m in _WORD.finditer(text):
        gap, first, end = text[end : m.start()], end == 0, m.end()
        word = m.group()
        if not word[0].isupper() or word in ("I", "I'm", "I've", "I'll", "I'd"):
            continue
        if _opens_sentence(gap, first=first):
            continue
        count += 1
    return count


def _opens_sentence(gap: str, *, first: bool) -> bool:
    """Whether a word after `gap` (the text since the previous word; `first`: there is
    none) starts a sentence: nothing but non-word characters before it, or a run of them
    that holds a line break or a ``.``, ``!`` or ``?`` with a space after it. Only the gap's
    last run of non-word characters is read: searching all the text before each capitalised
    word made scoring a long message quadratic (a fifth of ingest time)."""
    i = len(gap)
    while i and not (gap[i - 1].isalnum() or gap[i - 1] == "_"):
        i -= 1
    return (first and i == 0) or _SENTENCE_END.search(gap[i:]) is not None


@functools.lru_cache(maxsize=8192)
def content_score(text: str) -> float:
    """How much `text` says that a later turn may need, 0..1 (0.5: neutral; see the module
    docstring). Small talk scores 0.05.

    Cached: every build scores each L2 task again (`L2ImportantSource` ranks by importance),
    and a long message is not cheap to score (finding names looks back over the text for
    each capitalised word)."""
    stripped = text.strip()
    if not stripped:
        return _SMALL_TALK
    words = [w.lower().replace("’", "'") for w in _WORD.findall(stripped)]
    cjk = len(_CJK.findall(stripped))
    if cjk:
        compact = re.sub(r"[\s\W]+", "", stripped)
        if _PHATIC_ZH.match(compact):
            return _SMALL_TALK
    elif not words or all(w in _PHATIC for w in words):
        return _SMALL_TALK
    score = 0.0
    lowered = stripped.lower()
    if _NUMBER.search(stripped) or _TIME_WORDS.search(lowered):
        score += 0.25
    names = _names(stripped)
    if names:
        score += min(0.3, 0.15 * names)
    if _PREFERENCE.search(lowered):
        score += 0.3
    if _DECISION.search(lowered):
        score += 0.2
    if _CORRECTION.search(lowered):
        score += 0.3
    if _FIRST_PERSON_FACT.search(lowered):
        score += 0.15
    # Substance: words beyond small talk (a CJK character counts as half a word).
    content = sum(1 for w in words if w not in _PHATIC) + cjk / 2
    score += min(0.3, content / 25)
    if content < 3 and score < 0.3:
        score *= 0.5  # a few words and no cue: "Me too, it was fun."
    return max(0.0, min(1.0, 0.25 + score))


def message_importance(prior: float, text: str) -> float:
    """The seed's `prior` moved by `content_score(text)`: scaled down below neutral (small
    talk keeps 0.37 of it), moved toward 1 above it. Stays in 0..1."""
    s = content_score(text)
    up = prior + (1.0 - prior) * (s - _NEUTRAL)
    value = prior * (0.3 + 1.4 * s) if s < _NEUTRAL else up
    return round(max(0.0, min(1.0, value)), 4)

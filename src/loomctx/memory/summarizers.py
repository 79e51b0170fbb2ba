"""Summarizers: what is forgotten in full is kept as a summary within a token budget.

A `Summarizer` turns texts (oldest first) into one summary of at most `max_tokens` tokens as
counted by a given `TokenCounter`. Two are built in:

- `ExtractiveSummarizer` needs no model: it keeps the most informative sentences of each text,
  in their original order. A sentence is informative when its content words recur across the
  texts (document frequency), so the thread of a conversation (its cities, dates, names, ids)
  outranks greetings and acknowledgements. English and Chinese are both handled.
- `LLMSummarizer` asks a language model, given as a plain async function ``prompt -> text``,
  and cuts the reply to the budget if the model overruns it.

Both guarantee the budget: the final string is re-counted, never estimated.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

from loomctx.errors import ConfigError, check_int
from loomctx.text import terms
from loomctx.tokens import TokenCounter

__all__ = [
    "DEFAULT_INSTRUCTIONS",
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "Summarizer",
]


@runtime_checkable
class Summarizer(Protocol):
    """Summarizes texts within a token budget. Implement this to plug in your own."""

    async def summarize(
        self, texts: Sequence[str], *, max_tokens: int, counter: TokenCounter
    ) -> str:
        """A summary of `texts` (oldest first) of at most `max_tokens` tokens by `counter`;
        ``""`` when there is nothing to summarize or no budget."""
        ...


# A sentence ends at . ! ? followed by whitespace (so "3.5" and "example.com" do not end one),
# at 。！？ (Chinese needs no space after them), closing quotes included, or at a line end.
_BOUNDARY: Final = re.compile(r"[.!?]+[\"')\]”’]*(?=\s|$)|[。！？]+[”’」』）)]*|\n")
_CJK_START: Final = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_CJK_ENDS: Final = ("。", "！", "？", "。”", "！”", "？”", "」", "』", "）")

_ELLIPSIS: Final = "…"
_FIRST_SENTENCE_BONUS: Final = 1.5  # a message's first sentence usually states its point
_LINE_PREFIX: Final = "- "


def _sentences(text: str) -> list[str]:
    out: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        piece = text[start : m.end()].strip()
        if piece:
            out.append(piece)
        start = m.end()
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out


def _fit(text: str, max_tokens: int, counter: TokenCounter, *, prefix: str = "") -> str:
    """``prefix + text`` if it fits `max_tokens`; else `text` cut on a token boundary with
    "…" appended, re-counted until it fits; ``""`` when not even that fits."""
    whole = prefix + text
    if counter.count(whole) <= max_tokens:
        return whole
    allowance = max_tokens - counter.count(prefix + _ELLIPSIS)
    while allowance > 0:
        cut = counter.truncate(text, allowance).rstrip()
        if not cut:
            return ""
        out = prefix + cut + _ELLIPSIS
        over = counter.count(out) - max_tokens
        if over <= 0:
            return out
        allowance -= over  # strictly smaller, so the loop ends
    return ""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Sentence:
    text: str
    score: float
    doc: int  # index of its text in the input
    pos: int  # index within its text

    @property
    def rank(self) -> tuple[float, int, int]:
        """Best first: higher score, then earlier text, then earlier in its text."""
        return (-self.score, self.doc, self.pos)


class ExtractiveSummarizer:
    """No LLM: picks the most informative sentences, in their original order, within the budget.

    Each text is split into sentences (at . ! ? and 。！？, and at line ends). A sentence scores
    the sum, over its content terms, of the number of texts containing that term, divided by
    the square root of its number of terms; a text's first sentence scores half as much again.
    At most `max_sentences_per_text` sentences are taken from each text, best first, while
    they fit. The summary has one line per text that kept something: ``"- "`` and its chosen
    sentences, in their original order. If no whole sentence fits, the best one is cut to fit
    and ends with "…". The same input always gives the same summary.
    """

    __slots__ = ("max_sentences_per_text",)

    def __init__(self, *, max_sentences_per_text: int = 2) -> None:
        check_int(max_sentences_per_text, "`max_sentences_per_text`", minimum=1)
        self.max_sentences_per_text = max_sentences_per_text
        """The most sentences kept from any one text."""

    async def summarize(
        self, texts: Sequence[str], *, max_tokens: int, counter: TokenCounter
    ) -> str:
        """The chosen sentences of `texts`, one line per text, within `max_tokens`."""
        return self.summarize_now(texts, max_tokens=max_tokens, counter=counter)

    def summarize_now(self, texts: Sequence[str], *, max_tokens: int, counter: TokenCounter) -> str:
        """`summarize` without the event loop: it does no I/O, so synchronous callers (memory
        promotion) use it directly."""
        if max_tokens <= 0:
            return ""
        split = [_sentences(text) for text in texts]
        sentence_terms = [[terms(s) for s in sentences] for sentences in split]
        df: Counter[str] = Counter()
        for per_text in sentence_terms:
            df.update({t for found in per_text for t in found})

        candidates: list[_Sentence] = []
        for doc, sentences in enumerate(split):
            scored = []
            for pos, text in enumerate(sentences):
                found = sentence_terms[doc][pos]
                score = sum(df[t] for t in found) / math.sqrt(len(found)) if found else 0.0
                if pos == 0:
                    score *= _FIRST_SENTENCE_BONUS
                scored.append(_Sentence(text=text, score=score, doc=doc, pos=pos))
            scored.sort(key=lambda s: s.rank)
            candidates += scored[: self.max_sentences_per_text]
        if not candidates:
            return ""
        candidates.sort(key=lambda s: s.rank)

        # Choose by estimate (a sentence costs its tokens plus one for the space or newline
        # before it; a new line also costs its "- "), then re-count the real string below.
        line_cost = counter.count(_LINE_PREFIX) + 1
        chosen: list[_Sentence] = []
        docs: set[int] = set()
        spent = 0
        for s in candidates:
            cost = counter.count(s.text) + 1 + (0 if s.doc in docs else line_cost)
            if spent + cost <= max_tokens:
                chosen.append(s)
                docs.add(s.doc)
                spent += cost
        while chosen:
            summary = _render(chosen)
            if counter.count(summary) <= max_tokens:
                return summary
            chosen.pop()  # the lowest-ranked: `chosen` is in rank order
        return _fit(candidates[0].text, max_tokens, counter, prefix=_LINE_PREFIX)


def _render(chosen: Sequence[_Sentence]) -> str:
    lines: dict[int, str] = {}
    for s in sorted(chosen, key=lambda s: (s.doc, s.pos)):
        line = lines.get(s.doc)
        if line is None:
            lines[s.doc] = _LINE_PREFIX + s.text
        else:
            # Chinese runs sentences together; a space after 。 would look like a typo.
            cjk = line.endswith(_CJK_ENDS) and _CJK_START.match(s.text) is not None
            lines[s.doc] = line + ("" if cjk else " ") + s.text
    return "\n".join(lines.values())


DEFAULT_INSTRUCTIONS: Final = (
    "Summarize the texts below, which are parts of an AI agent's conversation and work, so "
    "that the agent can continue without them. Be factual and concise. Keep every name, "
    "number, date, identifier, decision, request, tool call with its result, and error; "
    "drop greetings, filler and repetition. Do not add anything that is not in the texts. "
    "Write in the language of the texts. Reply with the summary only."
)
"""`LLMSummarizer`'s default instructions."""


class LLMSummarizer:
    """Summarizes with a language model given as an async function prompt -> text.

    The prompt is `instructions`, the budget in tokens, and the texts numbered oldest first.
    The reply is stripped and, if the model overran the budget, cut to it (ending with "…").
    """

    __slots__ = ("complete", "instructions")

    def __init__(
        self,
        complete: Callable[[str], Awaitable[str]],
        *,
        instructions: str = DEFAULT_INSTRUCTIONS,
    ) -> None:
        if not callable(complete):
            raise ConfigError(
                f"`complete` must be an async function prompt -> text, got {complete!r}"
            )
        if not isinstance(instructions, str) or not instructions.strip():
            raise ConfigError(
                f"`instructions` must be a non-empty string, got {instructions!r}; leave it "
                "out to use `DEFAULT_INSTRUCTIONS`"
            )
        self.complete = complete
        """The model: an async function from a prompt to its reply."""
        self.instructions = instructions
        """What the model is asked to do, before the budget and the texts."""

    def prompt(self, texts: Sequence[str], *, max_tokens: int) -> str:
        """The prompt sent to the model for `texts` and a budget of `max_tokens`."""
        numbered = "\n\n".join(f"[{i}] {text.strip()}" for i, text in enumerate(texts, 1))
        return (
            f"{self.instructions}\n\n"
            f"The summary must be at most {max_tokens} tokens long.\n\n"
            f"Texts, oldest first:\n\n{numbered}"
        )

    async def summarize(
        self, texts: Sequence[str], *, max_tokens: int, counter: TokenCounter
    ) -> str:
        """The model's summary of `texts`, cut to `max_tokens` if it is longer."""
        if max_tokens <= 0 or not any(text.strip() for text in texts):
            return ""
        reply = await self.complete(self.prompt(texts, max_tokens=max_tokens))
        return _fit(reply.strip(), max_tokens, counter)

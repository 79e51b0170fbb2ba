"""`OfflineResponder`: an `LLM` that answers from its context window, with no model at all.

It is what `loomctx demo` and `loomctx chat` use when no model is configured, and it says so in
every reply. It reads the window the way a model would (the reference context, the history,
the user's turn), finds the sentence that shares the most terms with the question (stemmed,
stop words dropped; ties go to the later sentence, which is the newer one in the history), and
quotes it. It never calls tools. It is a way to watch Loom build windows without an API key,
not a substitute for a model.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final

from loomctx.agent.llm import Completed, LLMChunk, LLMOptions, TextDelta, Usage
from loomctx.messages import Message
from loomctx.text import terms
from loomctx.tokens import TiktokenCounter, TokenCounter

__all__ = ["LABEL", "OfflineResponder"]

LABEL: Final = "[offline responder]"
_FENCE: Final = re.compile(r'<context source="([^"]*)"[^>]*>\n(.*?)\n</context>', re.S)
_ITEM_START: Final = re.compile(r"^(?:- |\[[^\]\n]*\] )")
_SENTENCE: Final = re.compile(r"(?<=[.!?])\s+")
_PARAGRAPH: Final = re.compile(r"\n\s*\n")


def _sentences(text: str) -> list[str]:
    """Sentences of `text`: paragraphs split at sentence ends, soft line breaks joined."""
    out = []
    for paragraph in _PARAGRAPH.split(text):
        joined = " ".join(line.strip() for line in paragraph.splitlines())
        out += [s.strip(" -|") for s in _SENTENCE.split(joined) if s.strip(" -|")]
    return out


def _items(text: str) -> list[str]:
    """The items of a piece of reference context: a line starting with ``- `` or an ``[id]``
    tag, or one after a blank line, starts an item; other lines continue the one before."""
    items: list[list[str]] = []
    fresh = True
    for line in text.splitlines():
        if not line.strip():
            fresh = True
            continue
        if fresh or _ITEM_START.match(line):
            items.append([_ITEM_START.sub("", _ITEM_START.sub("", line, count=1), count=1)])
        else:
            items[-1].append(line)
        fresh = False
    return ["\n".join(lines) for lines in items]


def _context_pieces(content: str) -> list[tuple[str, str]]:
    """(where, item) of a system message or of fenced reference data: the items of each
    fenced source if it has fences (however the items inside are marked), else of the whole
    message."""
    fenced = _FENCE.findall(content)
    if fenced:
        return [(f"context `{src}`", item) for src, body in fenced for item in _items(body)]
    return [("the context", item) for item in _items(content)]


def _passages(messages: Sequence[Message]) -> list[tuple[str, bool, list[str]]]:
    """(where, said by the user, sentences) for each piece of the window before the last
    user turn, in window order; earlier offline replies are left out."""
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    out: list[tuple[str, bool, list[str]]] = []
    for m in messages[:last_user] if last_user >= 0 else messages:
        if m.role == "system" or (m.role == "user" and _FENCE.search(m.content)):
            pieces = []
            for where, body in _context_pieces(m.content):
                who, colon, said = body.partition(": ")
                if colon and who in ("user", "assistant"):
                    pieces.append((f"{where} ({who})", who == "user", said))
                else:
                    pieces.append((where, False, body))
        else:
            pieces = [(f"the {m.role} message", m.role == "user", m.content)]
        for where, by_user, text in pieces:
            if LABEL in text:
                continue
            out.append((where, by_user, _sentences(text)))
    return out


def answer(messages: Sequence[Message]) -> str:
    """The labelled reply to the last user message of `messages`: the sentence sharing the
    most terms with it (a question scores nothing, the user's own words a little less), and
    the sentence after it in the same passage."""
    question = next((m.content for m in reversed(messages) if m.role == "user"), "")
    wanted = set(terms(question))
    best: tuple[float, int] = (0.0, -1)
    found = ""
    position = 0
    for where, by_user, sentences in _passages(messages):
        for k, sentence in enumerate(sentences):
            position += 1
            if sentence.endswith("?"):
                continue
            score = len(wanted & set(terms(sentence))) - (0.5 if by_user else 0.0)
            if score > 0 and (score, position) >= best:
                best = (score, position)
                quote = " ".join(sentences[k : k + 2])
                found = f"From {where}: {quote}"
    if not found:
        return f"{LABEL} Nothing in my context window matches that question."
    return f"{LABEL} {found}"


class OfflineResponder:
    """An `LLM` that quotes the best-matching sentence of its window (see the module)."""

    name = "offline"

    def __init__(self, *, counter: TokenCounter | None = None) -> None:
        self._counter = counter or TiktokenCounter()

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        options: LLMOptions | None = None,
    ) -> AsyncIterator[LLMChunk]:
        """One text chunk, the usage (counted with the real tokenizer), and `Completed`."""
        text = answer(messages)
        usage = Usage(
            input_tokens=self._counter.count_messages(messages, tools=tools),
            output_tokens=self._counter.count(text),
        )
        yield TextDelta(text=text)
        yield usage
        yield Completed(message=Message.assistant(text), finish_reason="stop", usage=usage)

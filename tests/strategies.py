"""Reusable hypothesis strategies for Loom's message model.

`histories()` draws VALID histories (every tool call answered exactly once, directly after the
message that made it, with unique ids); its switches turn off the features a round trip cannot
carry, so a property test states its precondition in the strategy call.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import strategies as st

from loomctx.messages import Message, ToolCall

# ASCII, CJK, emoji (one with a zero-width joiner, one with a variation selector) and
# whitespace: the text that breaks naive tokenizing, escaping and joining.
ALPHABET = (
    "abcxyzABC019 .,:;!?'\"\\{}[]<>/-_你好世界中文字漢語日本語한국어😀🚀👍🏽👩‍💻❤️ \t\n\r\u3000"
)


def texts(*, min_size: int = 0, max_size: int = 16) -> st.SearchStrategy[str]:
    """Text from the mixed ASCII/CJK/emoji/whitespace alphabet."""
    return st.text(alphabet=ALPHABET, min_size=min_size, max_size=max_size)


_keys = st.text(alphabet="abcdefghij_你好", min_size=1, max_size=6)
_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | texts(max_size=8)

# Two levels of nesting rather than `st.recursive`: as deep as the converters care about, and
# several times cheaper to draw, which keeps 500 histories per test to a few seconds.
json_values: st.SearchStrategy[Any] = (
    _scalars
    | st.lists(_scalars | st.lists(_scalars, max_size=2), max_size=3)
    | st.dictionaries(_keys, _scalars | st.lists(_scalars, max_size=2), max_size=2)
)
"""JSON values that survive `json.dumps` / `json.loads` unchanged: no floats, no tuples."""


def arguments() -> st.SearchStrategy[dict[str, Any]]:
    """A tool call's arguments: a JSON object with string keys."""
    return st.dictionaries(_keys, json_values, max_size=3)


def participant_names() -> st.SearchStrategy[str]:
    """A participant or tool name."""
    return st.text(alphabet="abcdefghijklmnopqrstuvwxyz_-0123456789", min_size=1, max_size=10)


def call_ids() -> st.SearchStrategy[str]:
    """A tool-call id (`histories()` appends a counter to make its ids unique)."""
    return st.text(alphabet="abcdefXYZ0123456789_-", min_size=1, max_size=12).map(
        lambda s: f"call_{s}"
    )


def tool_calls(*, ids: st.SearchStrategy[str] | None = None) -> st.SearchStrategy[ToolCall]:
    """One `ToolCall` with JSON-safe arguments."""
    return st.builds(
        ToolCall,
        id=ids if ids is not None else call_ids(),
        name=participant_names(),
        arguments=arguments(),
    )


def messages() -> st.SearchStrategy[Message]:
    """One valid message of any role (not necessarily valid in a history: ids are not paired)."""
    maybe_name = st.none() | participant_names()
    return st.one_of(
        st.builds(Message.system, texts()),
        st.builds(Message.user, texts(), name=maybe_name),
        st.builds(
            Message.assistant,
            texts(),
            tool_calls=st.lists(tool_calls(), max_size=3, unique_by=lambda c: c.id),
            name=maybe_name,
        ),
        st.builds(
            Message.tool,
            texts(),
            tool_call_id=call_ids(),
            name=maybe_name,
            is_error=st.booleans(),
        ),
    )


@st.composite
def histories(
    draw: st.DrawFn,
    *,
    system: bool = True,
    names: bool = True,
    errors: bool = True,
    empty_text: bool = True,
    adjacent_assistants: bool = True,
    min_tool_units: int = 0,
    max_units: int = 6,
) -> list[Message]:
    """A valid history: an optional leading system message, then user messages, plain
    assistant messages and tool units (an assistant message with 1-3 calls, then one result per
    call in shuffled order).

    Switches: `system=False` leaves out the system message; `names=False` sets no `name`;
    `errors=False` sets no `is_error`; `empty_text=False` gives every system, user and plain
    assistant message non-empty text (an assistant message with calls, and a result, may still
    be empty); `adjacent_assistants=False` puts a user message between an assistant message and
    the next one. `min_tool_units` forces at least that many tool units.
    """
    prose = _PROSE if empty_text else _NONEMPTY
    maybe_name = _MAYBE_NAME if names else st.none()
    counter = itertools.count()
    out: list[Message] = []
    if system and draw(st.booleans()):
        out.append(Message.system(draw(prose)))
    kinds = draw(st.lists(_KINDS, max_size=max_units))
    kinds += ["tools"] * max(0, min_tool_units - kinds.count("tools"))
    kinds = draw(st.permutations(kinds))
    for kind in kinds:
        if not adjacent_assistants and kind != "user" and out and out[-1].role == "assistant":
            out.append(Message.user(draw(_NONEMPTY), name=draw(maybe_name)))
        if kind == "user":
            out.append(Message.user(draw(prose), name=draw(maybe_name)))
        elif kind == "assistant":
            out.append(Message.assistant(draw(prose), name=draw(maybe_name)))
        else:
            # The counter after the last "_" makes every id unique, whatever was drawn before it.
            calls = [
                ToolCall(id=f"{draw(_CALL_IDS)}_{next(counter)}", name=draw(_NAMES), arguments=args)
                for args in draw(st.lists(_ARGUMENTS, min_size=1, max_size=3))
            ]
            out.append(Message.assistant(draw(_PROSE), tool_calls=calls, name=draw(maybe_name)))
            for call in draw(st.permutations(calls)):
                out.append(
                    Message.tool(
                        draw(_PROSE),
                        tool_call_id=call.id,
                        name=call.name if draw(maybe_name) is not None else None,
                        is_error=draw(st.booleans()) if errors else False,
                    )
                )
    return out


# Built once: building strategies inside every draw costs more than drawing from them.
_PROSE = texts()
_NONEMPTY = texts(min_size=1)
_NAMES = participant_names()
_MAYBE_NAME = st.none() | _NAMES
_CALL_IDS = call_ids()
_ARGUMENTS = arguments()
_KINDS = st.sampled_from(["user", "assistant", "tools"])

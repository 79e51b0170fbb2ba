"""`parse_json` reads a body's lone surrogates off its escapes, exactly: a pair (as
`json.dumps` escapes every emoji) is text, a lone half is refused, an escaped backslash
before ``u`` makes no escape at all."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomctx.server._errors import RequestError
from loomctx.server._input import parse_json

# Pieces a JSON string's raw text may be made of, surrogate escapes and backslashes among them.
_PIECES = st.sampled_from(
    ["a", "é", "\\\\", "\\n", "\\ud83d", "\\ude00", "\\uD800", "\\uDFFF", "\\udbff\\udfff",
     "\\u0041", "u", "d83d", "\\\\ud800", "\\\\\\ud800"]
)  # fmt: skip


def _refused(raw: bytes) -> bool:
    try:
        parse_json(raw, deep=("messages",))
    except RequestError as error:
        message = str(error)
    else:
        return False
    assert "lone surrogate" in message
    return True


def _lone(raw: bytes) -> bool:
    """The truth: a decoded string that cannot be encoded as UTF-8."""
    text = json.loads(raw)["messages"][0]["content"]
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


@given(st.lists(_PIECES, max_size=8))
def test_a_body_is_refused_exactly_when_a_string_holds_a_lone_surrogate(pieces: list[str]) -> None:
    content = "".join(pieces)
    raw = ('{"messages": [{"role": "user", "content": "' + content + '"}]}').encode()
    assert _refused(raw) == _lone(raw), content


@pytest.mark.parametrize(
    ("content", "lone"),
    [
        ("smile \\ud83d\\ude00", False),
        ("\\\\ud800", False),  # a backslash, then the text ud800
        ("\\\\\\ud800", True),  # a backslash, then a lone escape
        ("\\ud83d\\\\ude00", True),  # a high half, then a backslash and text
        ("\\\\ud83d\\ude00", True),  # text that looks like a high half, then a lone low one
        ("\\ud800\\ud800\\udc00", True),
        ("\\udc00", True),
    ],
)
def test_the_escapes_that_are_and_are_not_lone(content: str, lone: bool) -> None:
    raw = ('{"messages": [{"role": "user", "content": "' + content + '"}]}').encode()
    assert _lone(raw) == lone
    assert _refused(raw) == lone

"""What a message's text and a tool call's arguments may hold, checked where they enter.

Text must be valid Unicode: a surrogate code point (U+D800..U+DFFF, what
``errors="surrogateescape"`` or a JSON escape like ``"\\ud800"`` leaves in a `str`) cannot be
encoded as UTF-8, so it is refused with its field and position; `valid_text` repairs such text
for data that must be kept. Tool-call arguments must be JSON a provider accepts: no NaN or
Infinity, and no nesting deeper than `MAX_ARGUMENT_DEPTH` levels. `parse_arguments` reads
arguments from their JSON text under the same rules, and raises when they break them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final, NoReturn

from loomctx.errors import MessageFormatError

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "check_arguments",
    "check_text",
    "parse_arguments",
    "surrogate_at",
    "valid_text",
]

MAX_ARGUMENT_DEPTH: Final = 64
"""How deeply tool-call arguments may nest: the arguments object is level 1, each list or
object inside it one level more. Real tool calls stay within a handful of levels; deeper data
is refused where it enters, because recursive code (JSON encoders, renderers, providers) fails
on data nested thousands of levels deep."""

_SURROGATE = re.compile("[\ud800-\udfff]")


def surrogate_at(text: str) -> int | None:
    """The index of the first surrogate code point in `text` (never valid Unicode text, and
    not encodable as UTF-8), or None when there is none."""
    if text.isascii():  # O(1) in CPython: most text takes this path
        return None
    found = _SURROGATE.search(text)
    return None if found is None else found.start()


def valid_text(text: str) -> str:
    """`text` as valid Unicode: a surrogate pair is joined into the character it encodes and a
    lone surrogate becomes U+FFFD (the replacement character). For text that must be kept
    although it is malformed, such as a tool's output or a model's reply."""
    if surrogate_at(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def check_text(text: str, what: str) -> None:
    """Raise `MessageFormatError` naming `what` and the position when `text` holds a
    surrogate code point."""
    at = surrogate_at(text)
    if at is not None:
        raise MessageFormatError(
            f"{what} holds the surrogate code point {text[at]!r} at position {at}, which is "
            "not valid Unicode (it cannot be encoded as UTF-8); decode the source with "
            "`errors='replace'`, or repair the text with `loomctx.messages.valid_text`"
        )


def _shown(path: str) -> str:
    return path if len(path) <= 60 else f"{path[:57]}..."


def _where(path: str, call: str) -> str:
    return f"argument `{_shown(path)}` of {call}" if path else f"the arguments of {call}"


def check_arguments(value: Any, path: str, depth: int, call: str) -> None:
    """Refuse what JSON cannot carry, surrogates and deep nesting anywhere in `value`, the
    arguments of `call` (a phrase such as "tool call `c1`") at `path`, `depth` levels down."""
    if isinstance(value, str):
        check_text(value, _where(path, call))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise MessageFormatError(
                f"{_where(path, call)} is {value!r}, which is not JSON (providers reject NaN "
                "and Infinity); use a finite number, a string or None"
            )
    elif isinstance(value, Mapping | list | tuple):
        if depth > MAX_ARGUMENT_DEPTH:
            # Checked before going further down, so that no depth can exhaust the stack.
            raise MessageFormatError(
                f"the arguments of {call} nest deeper than {MAX_ARGUMENT_DEPTH} levels "
                f"(at `{_shown(path)}`); flatten them"
            )
        if isinstance(value, Mapping):
            for key, item in value.items():
                if isinstance(key, str):
                    check_text(key, f"a key of {_where(path, call)}")
                check_arguments(item, f"{path}.{key}" if path else str(key), depth + 1, call)
        else:
            for i, item in enumerate(value):
                check_arguments(item, f"{path}[{i}]", depth + 1, call)


def _not_a_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON (write a number, a string or null)")


def parse_arguments(raw: str, *, call_id: str | None = None) -> dict[str, Any]:
    """Tool-call arguments parsed from their JSON text (blank text means ``{}``).

    Raises `MessageFormatError` (naming the call `call_id`, if given) when the text is not
    JSON, not a JSON object, holds NaN or Infinity (which Python's `json` would accept), or
    nests deeper than `MAX_ARGUMENT_DEPTH` levels.
    """
    call = "the tool call" if call_id is None else f"tool call `{call_id}`"
    who = f"{call} has"
    if not raw.strip():
        return {}
    try:
        parsed = json.loads(raw, parse_constant=_not_a_constant)
    except RecursionError:
        raise MessageFormatError(
            f"{who} `arguments` that nest deeper than {MAX_ARGUMENT_DEPTH} levels "
            f"({raw[:40]!r}...); flatten them"
        ) from None
    except ValueError as exc:  # json.JSONDecodeError, or NaN / Infinity
        raise MessageFormatError(
            f"{who} `arguments` that are not a valid JSON string ({exc}): {raw[:200]!r}; "
            "send a JSON object"
        ) from exc
    if not isinstance(parsed, dict):
        raise MessageFormatError(
            f"{who} arguments that are a JSON {type(parsed).__name__}, not an object: "
            f"{raw[:200]!r}; tool arguments must be a JSON object"
        )
    check_arguments(parsed, "", 1, call)
    return parsed

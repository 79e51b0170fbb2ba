"""Reading a request's input strictly: its JSON body and its integer query parameters.

Whatever a request carries is checked here before any of it is stored or sent upstream, so a
request refused for its input stores nothing. What the standard library lets through and
the rest of the way cannot take is refused with a 400 naming the field:

- ``NaN``, ``Infinity`` and numbers too large for a float (``1e400``): `json.loads` accepts
  them, but no JSON encoder may send them on (they are not JSON);
- a lone surrogate (``"\\ud800"``): a valid JSON escape, but not Unicode text, so it can be
  neither stored nor encoded as UTF-8 for the upstream;
- a structure nested deeper than `MAX_DEPTH` (a body nested 100,000 deep overflows the
  parser's recursion; a few hundred levels would overflow the encoder of the upstream call).

A lone surrogate can only arrive as a ``\\uD8..``-``\\uDF..`` escape (raw UTF-8 cannot encode
one), so the whole body is walked for them only when the raw bytes hold such an escape that is
not half of a pair (`json.dumps` escapes every emoji as a pair); the
depth is checked on the fields other than those named in `parse_json`'s `deep` (a chat
history re-sent on every call is converted and checked message by message elsewhere).

Integer query parameters go through `int_param`: ASCII digits only (`str.isdigit` accepts
``"²"``, which `int` refuses).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection
from typing import Any, Final

from starlette.requests import Request

from loomctx.messages import MAX_ARGUMENT_DEPTH, surrogate_at
from loomctx.server._errors import RequestError

__all__ = ["MAX_DEPTH", "check_value", "int_param", "parse_json", "read_body", "read_json"]

MAX_DEPTH: Final = MAX_ARGUMENT_DEPTH  # the request body nests no deeper than tool arguments
_ESCAPED_SURROGATE: Final = re.compile(rb"\\u[dD][89a-fA-F]")
_HIGH_ESCAPE: Final = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}")
_LOW_ESCAPE: Final = re.compile(rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_HIGH: Final = frozenset(b"89abAB")
_DIGITS: Final = re.compile(r"[0-9]{1,18}")


def _invalid(message: str, param: str | None = None) -> RequestError:
    return RequestError(message, code="invalid_json" if not param else None, param=param or None)


def _no_constant(name: str) -> Any:
    raise _invalid(
        f"the request body holds `{name}`, which is not JSON: send a finite number or null"
    )


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _invalid(
            f"the number {text:.40} in the request body is too large for a float: "
            "send a finite number"
        )
    return value


def parse_json(body: bytes, *, deep: Collection[str] = ()) -> Any:
    """`body` as JSON, checked (see the module docstring): a 400 `RequestError` naming what
    is wrong. The top-level fields named in `deep` are not walked for their depth (their
    caller checks them) unless the body may hold a lone surrogate."""
    try:
        value = json.loads(body, parse_constant=_no_constant, parse_float=_finite)
    except RequestError:
        raise
    except RecursionError:
        raise _invalid(
            f"the request body is nested too deeply to read; no field may be nested deeper "
            f"than {MAX_DEPTH} levels"
        ) from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, a 5,000-digit integer
        raise _invalid(f"the request body is not valid JSON: {exc}") from None
    if _lone_surrogate_escape(body):
        check_value(value, "")
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in deep:
                check_value(item, key)
    return value


def _lone_surrogate_escape(body: bytes) -> bool:
    """Whether `body` (valid JSON) holds a ``\\uD800``-``\\uDFFF`` escape that is not half of
    a pair: a paired one (an emoji, as `json.dumps` escapes it) decodes to one character.
    An escape's backslash is one only after an even run of backslashes (``\\\\ud800`` is
    text)."""
    for found in _ESCAPED_SURROGATE.finditer(body):
        at = found.start()
        if not _escapes(body, at):
            continue
        if body[at + 3] in _HIGH:  # high half: a low escape must follow at once
            if _LOW_ESCAPE.match(body, at + 6) is None:
                return True
        elif at < 6 or _HIGH_ESCAPE.match(body, at - 6) is None or not _escapes(body, at - 6):
            return True  # low half without a high one just before it
    return False


def _escapes(body: bytes, at: int) -> bool:
    """Whether the backslash at `at` starts an escape (is preceded by an even run of them)."""
    start = at
    while start > 0 and body[start - 1] == 0x5C:  # backslash
        start -= 1
    return (at - start) % 2 == 0


def check_value(value: Any, path: str) -> None:
    """Refuse (400, naming the field at `path`) a lone surrogate in any string of `value`,
    keys included, or nesting deeper than `MAX_DEPTH`. Iterative: the depth is what it
    checks, so it must not recurse."""
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, str):
            if surrogate_at(item) is not None:
                raise _invalid(
                    f"`{where[:120] or 'body'}` holds a lone surrogate (a \\ud800-\\udfff "
                    "escape that is not half of a pair): text must be valid Unicode",
                    where.split(".")[0].split("[")[0],
                )
            continue
        if not isinstance(item, dict | list):
            continue
        if depth >= MAX_DEPTH:
            top = where.split(".")[0].split("[")[0]
            raise _invalid(f"`{top or 'body'}` is nested deeper than {MAX_DEPTH} levels", top)
        if isinstance(item, dict):
            for key, child in item.items():
                name = f"{where}.{key}" if where else str(key)
                stack.append((key, name, depth + 1))
                stack.append((child, name, depth + 1))
        else:
            stack.extend((child, f"{where}[{i}]", depth + 1) for i, child in enumerate(item))


def int_param(raw: str, *, name: str, low: int = 0, high: int | None = None) -> int:
    """The query parameter `name` (its text `raw`) as an integer from `low` to `high`, or a
    400 `RequestError` saying what it must be."""
    bound = f"from {low} to {high}" if high is not None else f"of at least {low}"
    if _DIGITS.fullmatch(raw) is None or int(raw) < low or (high is not None and int(raw) > high):
        raise RequestError(
            f"`{name}` must be a whole number {bound} (ASCII digits), got {raw!r:.40}",
            param=name,
        )
    return int(raw)


def _too_large(size: str) -> RequestError:
    return RequestError(
        f"the request body is {size} bytes, more than this server accepts; send less history, "
        "or raise `max_body_bytes` in `[serve]`",
        status=413,
        code="request_too_large",
    )


async def read_json(request: Request, limit: int, *, deep: Collection[str] = ()) -> Any:
    """The body as JSON: 413 past `limit` bytes (`read_body`), 400 if it is not JSON or
    holds what cannot be stored or sent on (`parse_json`; `deep`: its fields checked later)."""
    return parse_json(await read_body(request, limit), deep=deep)


async def read_body(request: Request, limit: int) -> bytes:
    """The body: 413 past `limit` bytes.

    A body somewhat over the limit is read to its end (and dropped) before the 413 is sent:
    a server that answers while the client is still sending closes a socket with unread data,
    which resets the connection, and the client sees a reset instead of the error. Past four
    times the limit, reading stops."""
    declared = request.headers.get("content-length")
    if (
        declared is not None
        and declared.isascii()
        and declared.isdigit()
        and int(declared) > 4 * limit
    ):
        raise _too_large(declared)
    body = bytearray()
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > 4 * limit:
            raise _too_large(f"more than {4 * limit}")
        if size <= limit:
            body += part
    if size > limit:
        raise _too_large(str(size))
    return bytes(body)

"""Loaders: a file to its text, chosen by the file's suffix.

Plain text (``.txt``) and Markdown (``.md``, ``.markdown``) are built in and read as UTF-8 (a
byte-order mark is dropped); so are reStructuredText and code, and PDF, Word and HTML are
converted when the `loaders` extra is installed (see `loomctx.knowledge._converters`). Any
other format is a plain callable ``path -> str`` registered for its suffix, e.g.
``loaders={".epub": read_epub}``; built-ins are registered the same way and can be replaced.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeAlias

from loomctx.errors import ConfigError, MissingExtraError
from loomctx.knowledge._converters import (
    CODE_SUFFIXES,
    CONVERTED_SUFFIXES,
    read_code,
    read_converted,
    read_rst,
    read_text,
)
from loomctx.messages import surrogate_at

__all__ = ["Loader", "check_unicode", "load_file", "loaders_with", "read_text"]

Loader: TypeAlias = Callable[[Path], str]
"""Turns a file into text; raises (any exception) when it cannot."""


def check_unicode(text: str, what: str) -> None:
    """`ConfigError` naming `what` and the position when `text` holds a surrogate code point:
    not valid Unicode, it cannot be stored or sent as UTF-8. Knowledge is refused rather than
    repaired: nothing has been stored yet, and the caller can decode its source properly."""
    at = surrogate_at(text)
    if at is not None:
        raise ConfigError(
            f"{what} holds the surrogate code point {text[at]!r} at position {at}, which is not "
            "valid Unicode; decode the source with `errors='replace'` (or repair the text with "
            "`loomctx.messages.valid_text`) before adding it"
        )


_BUILT_IN: Mapping[str, Loader] = {
    ".txt": read_text,
    ".md": read_text,
    ".markdown": read_text,
    ".rst": read_rst,
    **dict.fromkeys(sorted(CODE_SUFFIXES), read_code),
    **dict.fromkeys(sorted(CONVERTED_SUFFIXES), read_converted),
}


def loaders_with(extra: Mapping[str, Loader] | None) -> dict[str, Loader]:
    """The built-in loaders updated with `extra` (suffixes compared case-insensitively)."""
    out = dict(_BUILT_IN)
    if extra is None:
        return out
    if not isinstance(extra, Mapping):
        raise ConfigError(
            f"`loaders` must map file suffixes to callables, e.g. {{'.rst': read_rst}}, "
            f"got {extra!r}"
        )
    for suffix, loader in extra.items():
        if not isinstance(suffix, str) or not suffix.startswith(".") or len(suffix) < 2:
            raise ConfigError(
                f"a `loaders` key must be a file suffix with its dot, such as '.rst', "
                f"got {suffix!r}"
            )
        if not callable(loader):
            raise ConfigError(
                f"the loader for {suffix!r} must be a callable taking a path, got {loader!r}"
            )
        out[suffix.lower()] = loader
    return out


def load_file(path: Path, loaders: Mapping[str, Loader]) -> str:
    """The text of `path` by the loader of its suffix; `ConfigError` naming the file when
    there is none, the loader fails, or it returns something other than a string, and
    `MissingExtraError` when its loader needs an extra that is not installed."""
    suffix = path.suffix.lower()
    loader = loaders.get(suffix)
    if loader is None:
        known = ", ".join(sorted(loaders))
        raise ConfigError(
            f"no loader for `{path}` (suffix {suffix or 'none'!r}; loaders exist for {known}); "
            f"register one with `loaders={{{suffix or '.ext'!r}: callable}}`"
        )
    try:
        text = loader(path)
    except (ConfigError, MissingExtraError):
        raise
    except Exception as error:
        raise ConfigError(f"the loader for {suffix!r} failed on `{path}`: {error!r}") from error
    if not isinstance(text, str):
        raise ConfigError(
            f"the loader for {suffix!r} returned {type(text).__name__} for `{path}`; "
            f"a loader must return the file's text as a str"
        )
    check_unicode(text, f"the text the loader for {suffix!r} returned for `{path}`")
    return text

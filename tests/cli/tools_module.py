"""Tools imported by module name in `test_chat.py` (`--tools tests.cli.tools_module`)."""

from __future__ import annotations

from loomctx import tool


@tool
def shout(text: str) -> str:
    """The text in capitals.

    Args:
        text: What to shout.
    """
    return text.upper()

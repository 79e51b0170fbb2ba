"""`read_result`: the tool through which a model reads what an excerpt left out.

A tool result (or a message) too long for the window is shown as a head and a tail around a
marker naming a handle (`loomctx.context.excerpt`); the whole text is the Task the agent
recorded in its memory. `result_reader` builds the tool that reads it back: a slice by
character offset, or the lines that contain a search term, each answer within a token limit
so that reading never floods the window the excerpt kept small.

A handle is looked up only in the memory the tool was built for, by exact namespace (one
store `Get`): a handle from another session, agent or tenant finds nothing, the same as an
unknown one. Every problem (an unknown handle, an offset past the end, an empty search) is a
`ToolError`, which the model reads as an error result telling it what to fix.
"""

from __future__ import annotations

from typing import Final

from loomctx.agent.tools import Tool
from loomctx.context.excerpt import task_of_handle
from loomctx.errors import ToolError, check_int
from loomctx.memory.core import TASK, LoomMemory
from loomctx.memory.task import Task, task_body
from loomctx.stores.base import Get
from loomctx.tokens import TokenCounter

__all__ = ["DEFAULT_READ_CHARS", "READ_RESULT", "result_reader"]

READ_RESULT: Final = "read_result"
"""The name of the tool `result_reader` builds (and that excerpt markers name)."""

DEFAULT_READ_CHARS: Final = 8000
"""How many characters `read_result` reads when the model does not say."""

_AROUND: Final = 120  # characters shown on each side of a match in a long line


def result_reader(
    memory: LoomMemory,
    *,
    counter: TokenCounter | None = None,
    max_tokens: int = 2000,
    name: str = READ_RESULT,
) -> Tool:
    """The tool that reads, from `memory` only, the stored text behind an excerpt's handle.

    It takes ``handle`` and either ``offset`` and ``limit`` (characters) or ``search`` (a
    term: the lines that contain it, with their offsets). An answer takes at most
    `max_tokens` tokens (counted with `counter`, default the memory's); a longer slice is
    cut there, and the answer says at which offset to go on.
    """
    check_int(max_tokens, "`max_tokens` of the result reader", minimum=16)
    count = counter or memory.counter

    async def read_result(
        handle: str,
        offset: int = 0,
        limit: int = DEFAULT_READ_CHARS,
        search: str | None = None,
    ) -> str:
        """Read a part of a long tool result or message that the conversation shows only as
        an excerpt (its marker names the handle and the offset where the left-out part
        begins).

        Args:
            handle: The handle the excerpt's marker names, e.g. "r-5f0c2a".
            offset: The first character to read; 0 is the start of the text.
            limit: How many characters to read at most.
            search: Instead of reading at `offset`, list the lines that contain this text
                (ignoring case), each with its offset.
        """
        text = await _stored(memory, handle)
        if search is not None:
            return _search(text, handle.strip(), search, count, max_tokens)
        return _read(text, handle.strip(), offset, limit, count, max_tokens, name)

    return Tool.from_function(read_result, name=name)


async def _stored(memory: LoomMemory, handle: str) -> str:
    """The whole text a handle names, from `memory`'s own namespace."""
    task_id = task_of_handle(handle)
    record = None
    if task_id:
        (record,) = await memory.store.abatch(
            [Get(namespace=memory.namespace, key=f"{TASK}:{task_id}")]
        )
    if record is None:
        raise ToolError(
            f"no stored result has the handle {handle!r}; pass a handle exactly as an "
            'excerpt\'s marker gives it (e.g. handle="r-5f0c2a...")'
        )
    return task_body(Task.from_dict(record.data["task"]))


def _read(
    text: str,
    handle: str,
    offset: int,
    limit: int,
    counter: TokenCounter,
    max_tokens: int,
    name: str,
) -> str:
    size = len(text)
    if offset < 0 or (offset >= size and size):
        raise ToolError(
            f"`offset` {offset} is outside {handle!r}, which has {size:,} characters; "
            f"pass an offset from 0 to {max(size - 1, 0)}"
        )
    if limit < 1:
        raise ToolError(f"`limit` must be at least 1 character, got {limit}")

    def head(end: int) -> str:
        return f"[{handle}: characters {offset:,} to {end:,} of {size:,}]\n"

    def tail(end: int) -> str:
        return (
            f"\n[... {size - end:,} more characters; go on with "
            f'{name}(handle="{handle}", offset={end})]'
        )

    # The frame at its widest (the offset in `tail` at most one token per digit): the text
    # gets the rest of `max_tokens`.
    frame = counter.count(head(size)) + counter.count(tail(0)) + len(str(size))
    chunk = text[offset : offset + limit]
    part = counter.truncate(chunk, max(1, max_tokens - frame)) or chunk[:1]  # always move on
    end = offset + len(part)
    return head(end) + part + (tail(end) if end < size else "")


def _search(text: str, handle: str, term: str, counter: TokenCounter, max_tokens: int) -> str:
    needle = term.strip().lower()
    if not needle:
        raise ToolError(
            "`search` is empty; give a word or phrase to look for, or leave `search` out "
            "to read at `offset`"
        )
    entries: list[str] = []
    start = 0
    lines = text.split("\n")
    for line in lines:
        at = line.lower().find(needle)
        if at >= 0:
            shown, where = line, start
            if len(line) > 2 * _AROUND + len(needle):  # a long line: the part around the match
                lo = max(0, at - _AROUND)
                shown, where = f"...{line[lo : at + len(needle) + _AROUND]}...", start + lo
            entries.append(f"{where}: {shown}")
        start += len(line) + 1
    shown_term = term if len(term) <= 80 else term[:77] + "..."
    if not entries:
        return f"[{handle}: none of its {len(lines):,} lines contains {shown_term!r}]"
    head = (
        f"[{handle}: {len(entries):,} of its {len(lines):,} lines contain {shown_term!r}; "
        "offset: line]"
    )

    def more(rest: int) -> str:
        return f"\n[... {rest:,} more; search for something more specific, or read at an offset]"

    room = max_tokens - counter.count(head) - counter.count(more(len(entries)))
    found: list[str] = []
    for entry in entries:
        room -= counter.count(entry) + 1
        if room < 0:
            break
        found.append(entry)
    rest = len(entries) - len(found)
    return "\n".join([head, *found]) + (more(rest) if rest else "")

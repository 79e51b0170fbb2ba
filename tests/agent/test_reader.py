"""`result_reader`: slices and searches of a stored text by handle, within a token limit,
from its own memory only; every mistake is an error result that says what to fix."""

from __future__ import annotations

import pytest

from loomctx import ConfigError, LoomMemory, Task, TaskStatus, TiktokenCounter
from loomctx.agent import result_reader
from loomctx.context.excerpt import handle_for

COUNTER = TiktokenCounter()
LONG_LINE = "x" * 500 + " NEEDLE " + "y" * 500
TEXT = "\n".join(["first line", LONG_LINE, *(f"match {i}" for i in range(400)), "last line"])


def stored(text: str = TEXT) -> tuple[LoomMemory, str]:
    memory = LoomMemory("reader", embedder=None)
    task = Task(action="dump", status=TaskStatus.COMPLETED, result=text)
    memory.add_task(task)
    return memory, handle_for(task.task_id)


async def test_reads_a_slice_and_says_where_to_go_on() -> None:
    memory, handle = stored()
    reader = result_reader(memory, max_tokens=200)
    assert reader.name == "read_result"
    out = await reader.invoke({"handle": handle, "offset": 11, "limit": 30})
    assert not out.is_error
    assert out.content == (
        f"[{handle}: characters 11 to 41 of {len(TEXT):,}]\n{TEXT[11:41]}\n"
        f"[... {len(TEXT) - 41:,} more characters; go on with "
        f'read_result(handle="{handle}", offset=41)]'
    )
    # The token limit cuts a long slice; reading to the end says nothing more.
    capped = await reader.invoke({"handle": handle, "limit": 100_000})
    assert COUNTER.count(capped.content) <= 200
    assert "offset=" in capped.content
    tail = await reader.invoke({"handle": handle, "offset": len(TEXT) - 9})
    assert tail.content.endswith("]\nlast line")
    # A bare task id is a handle too.
    bare = await reader.invoke({"handle": handle.removeprefix("r-"), "limit": 10})
    assert bare.content.startswith(f"[{handle.removeprefix('r-')}: characters 0 to 10 of")
    assert "first line\n[... " in bare.content


async def test_searches_lines_with_their_offsets_within_the_limit() -> None:
    memory, handle = stored()
    reader = result_reader(memory, max_tokens=120)
    found = (await reader.invoke({"handle": handle, "search": "needle"})).content
    at = LONG_LINE.index("NEEDLE")
    clip = LONG_LINE[at - 120 : at + 6 + 120]
    assert f"\n{TEXT.index(LONG_LINE) + at - 120}: ...{clip}..." in found
    many = (await reader.invoke({"handle": handle, "search": "MATCH"})).content
    assert many.startswith(f"[{handle}: 400 of its 403 lines contain 'MATCH'; offset: line]\n")
    assert f"{TEXT.index('match 0')}: match 0\n" in many
    assert "more; search for something more specific, or read at an offset]" in many
    assert COUNTER.count(many) <= 120


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"handle": ""}, "no stored result has the handle ''"),
        ({"handle": "r-nope"}, "no stored result has the handle 'r-nope'"),
        ({"offset": -1}, "`offset` -1 is outside"),
        ({"limit": 0}, "`limit` must be at least 1 character"),
        ({"search": "  "}, "`search` is empty"),
    ],
)
async def test_mistakes_are_error_results_that_say_what_to_fix(
    arguments: dict[str, object], message: str
) -> None:
    memory, handle = stored()
    out = await result_reader(memory).invoke({"handle": handle, **arguments})
    assert out.is_error
    assert message in out.content


async def test_an_empty_text_reads_as_empty_and_the_limit_must_be_sane() -> None:
    memory, handle = stored("")
    out = await result_reader(memory).invoke({"handle": handle})
    assert out.content == f"[{handle}: characters 0 to 0 of 0]\n"
    with pytest.raises(ConfigError, match="max_tokens"):
        result_reader(memory, max_tokens=3)

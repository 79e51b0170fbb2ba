"""`LoomWindow`, the adapters' core: what it records of a conversation, and when."""

from __future__ import annotations

import pytest

from loomctx.errors import MessageFormatError, MissingExtraError
from loomctx.integrations import LoomWindow
from loomctx.integrations._framework import framework
from loomctx.messages import Message, ToolCall
from tests.integrations._conversation import memory


def _recorded(loom: LoomWindow) -> list[str]:
    return [str(t.parameters.get("content", t.action)) for t in loom.memory.recent_tasks(100)]


async def test_finished_turns_are_recorded_once_and_the_current_turn_when_it_ends() -> None:
    loom = LoomWindow(memory(), window=2000)
    first = [Message.user("u1"), Message.assistant("a1"), Message.user("u2")]
    window = await loom.build(first)
    assert _recorded(loom) == ["u1", "a1"]
    assert [m.content for m in window.messages][-1] == "u2"
    await loom.build(first)  # the same history again: nothing new
    assert _recorded(loom) == ["u1", "a1"]
    await loom.build([*first, Message.assistant("a2"), Message.user("u3")])
    assert _recorded(loom) == ["u1", "a1", "u2", "a2"]


async def test_a_reply_dropped_from_the_current_turn_is_never_recorded() -> None:
    loom = LoomWindow(memory(), window=2000)
    history = [Message.user("u1"), Message.assistant("a1"), Message.user("u2")]
    await loom.build([*history, Message.assistant("a2")])
    await loom.build(history)  # the reply popped, to be asked again
    await loom.build([*history, Message.assistant("a2 again"), Message.user("u3")])
    assert _recorded(loom) == ["u1", "a1", "u2", "a2 again"]


async def test_a_tool_call_without_its_result_is_refused_before_anything_is_recorded() -> None:
    loom = LoomWindow(memory(), window=2000)
    call = ToolCall(id="c1", name="lookup", arguments={})
    bad = [Message.user("u1"), Message.assistant("", tool_calls=[call]), Message.user("u2")]
    with pytest.raises(MessageFormatError):
        await loom.build(bad)
    assert _recorded(loom) == []


def test_a_missing_framework_names_the_extra_to_install() -> None:
    with pytest.raises(MissingExtraError, match=r"pip install 'loomctx\[agents\]'"):
        framework("loomctx_no_such_framework", feature="LoomSession", extra="agents")


def test_the_adapters_import_without_the_serve_extra() -> None:
    """The adapters run inside a framework, not `loomctx serve`: they must not import the
    server's web stack (the `serve` extra)."""
    import subprocess
    import sys

    code = (
        "import importlib.abc, sys\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.partition('.')[0] in {'starlette', 'uvicorn', 'mcp', 'anthropic'}:\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import loomctx.integrations.openai_agents, loomctx.integrations.pydantic_ai\n"
        "import loomctx.integrations.langgraph\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr

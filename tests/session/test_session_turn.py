"""`Session.turn` and `Session.reply`: a conversation's calls, recorded as an agent's run
records them (the window they build is the agent's and the proxy's:
`tests/server/test_window_recipe.py`)."""

from __future__ import annotations

import pytest

from loomctx.context.block import BuildContext
from loomctx.errors import ConfigError, MessageFormatError
from loomctx.memory.task import ASSISTANT_MESSAGE, USER_MESSAGE
from loomctx.messages import Message
from loomctx.session import topics
from loomctx.session.controller import ContextController
from tests.session._helpers import Recorder, said, text_of
from tests.session.test_session import PROMPT, env

__all__ = ["env"]  # the fixture, shared with the session's tests


async def test_a_turn_records_the_prompt_and_sends_it_once_as_the_user_turn(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, recorder = env
    session = await controller.create_session("s1", system_prompt=PROMPT)
    await session.add_task(said("u0", "my order is 1234"))
    window = await session.turn("where is my order?")
    asked = session.memory.get_l1_tasks()[-1]
    assert (asked.action, asked.parameters["content"]) == (USER_MESSAGE, "where is my order?")
    assert (asked.source_agent, asked.target_agent) == ("user", controller.layout.agent_id)
    assert asked.metadata["run_id"]
    assert window.messages[-1] == Message.user("where is my order?")
    assert text_of(window).count("where is my order?") == 1  # not in history nor the tail
    assert "1234" in text_of(window)
    added = await recorder.wait_for(topics.TASK_ADDED, 2)
    assert added[-1].payload["task_id"] == asked.task_id
    await recorder.wait_for(topics.CONTEXT_ASSEMBLED)

    answer = await session.reply("Order 1234 ships today.")
    assert answer.action == ASSISTANT_MESSAGE
    assert session.memory.get_l1_tasks()[-1].task_id == answer.task_id
    window = await session.turn("thanks, and when does it arrive?")
    assert [m.content for m in window.messages[-3:]] == [
        "where is my order?",
        "Order 1234 ships today.",
        "thanks, and when does it arrive?",
    ]
    assert [m.role for m in window.messages[-3:]] == ["user", "assistant", "user"]


async def test_a_turn_keeps_the_run_id_given(env: tuple[ContextController, Recorder]) -> None:
    controller, _ = env
    session = await controller.create_session("s1")
    ctx = BuildContext(metadata={"run_id": "r-7", "trace": "x"})
    window = await session.turn("hello there", ctx=ctx)
    assert session.memory.get_l1_tasks()[-1].metadata["run_id"] == "r-7"
    assert window.messages[-1] == Message.user("hello there")


async def test_a_paused_session_queues_the_turn_and_builds_as_it_was(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, _ = env
    session = await controller.create_session("s1")
    await session.add_task(said("u0", "order 1234"))
    await session.pause()
    window = await session.turn("status of order 5678?")
    assert [t.parameters["content"] for t in session.queued] == ["status of order 5678?"]
    assert [t.task_id for t in session.memory.get_l1_tasks()] == ["u0"]
    assert window.messages[-1] == Message.user("status of order 5678?")
    await session.resume()
    assert session.memory.get_l1_tasks()[-1].parameters["content"] == "status of order 5678?"


@pytest.mark.parametrize("prompt", ["", "   ", None, 3])
async def test_a_turn_needs_a_prompt(
    env: tuple[ContextController, Recorder], prompt: object
) -> None:
    controller, _ = env
    session = await controller.create_session("s1")
    with pytest.raises(ConfigError, match="`turn` takes the user's prompt"):
        await session.turn(prompt)  # type: ignore[arg-type]
    assert session.memory.get_l1_tasks() == []


async def test_turn_and_reply_refuse_invalid_text(env: tuple[ContextController, Recorder]) -> None:
    controller, _ = env
    session = await controller.create_session("s1")
    with pytest.raises(MessageFormatError, match="surrogate"):
        await session.turn("bad \ud800 text")
    with pytest.raises(MessageFormatError, match="surrogate"):
        await session.reply("bad \ud800 text")
    with pytest.raises(ConfigError, match="`reply` takes the model's answer"):
        await session.reply(None)  # type: ignore[arg-type]
    assert session.memory.get_l1_tasks() == []


@pytest.mark.parametrize("call", ["turn", "reply"])
async def test_an_ended_session_takes_no_turn(
    env: tuple[ContextController, Recorder], call: str
) -> None:
    controller, _ = env
    session = await controller.create_session("s1")
    await session.end()
    with pytest.raises(ConfigError, match="has ended and its content is archived"):
        await getattr(session, call)("hi")


async def test_a_view_is_the_recipe_s_window_and_leaves_the_session_s_own_unmoved(
    env: tuple[ContextController, Recorder],
) -> None:
    controller, _ = env
    short, long = (
        [said(f"u{i}", f"day {i}: my parcel {1000 + i} is late again") for i in range(n)]
        for n in (3, 80)
    )
    for tasks, overflows in ((short, False), (long, True)):
        viewed, plain = [
            await controller.create_session(
                f"{name}-{len(tasks)}", system_prompt=PROMPT, model_context_window=1200
            )
            for name in ("viewed", "plain")
        ]
        for session in (viewed, plain):
            session.memory.add_tasks(tasks)
        view = await viewed.view_context("which parcel is late?")
        built = await viewed.build_context("which parcel is late?")
        assert built.messages == (await plain.build_context("which parcel is late?")).messages
        summarized = [m for m in built.messages if m.content.startswith("Earlier conversation")]
        assert bool(summarized) is overflows
        if overflows:  # a view fills the room with whole units, not a summary
            assert not any(m.content.startswith("Earlier conversation") for m in view.messages)
        else:
            assert view.messages == built.messages

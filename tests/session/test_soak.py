"""Soak: 200 sessions talk at once for 50 turns each in one process, on one SQLite file.

Each turn records the user's message, builds the window and records the reply. Afterwards:
no window held another session's words, every event arrived exactly once, every Task is in
the store, and nothing is left running once the controller and bus are closed.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from pathlib import Path

import pytest

from loomctx.memory.settings import MemoryTiers
from loomctx.memory.task import ASSISTANT_MESSAGE, Task, TaskStatus
from loomctx.session import topics
from loomctx.session.bus import InProcessEventBus
from loomctx.session.controller import ContextController
from loomctx.stores.sqlite import SQLiteStore
from tests.session._helpers import Recorder, said

SESSIONS, TURNS = 200, 50
OWNER = re.compile(r"\bs(\d+)t\d+[ua]\b")


def reply(sid: str, turn: int) -> Task:
    return Task(
        task_id=f"{sid}-a{turn}",
        action=ASSISTANT_MESSAGE,
        parameters={"content": f"answer for {sid}: order {sid}t{turn}a is on its way"},
        status=TaskStatus.COMPLETED,
    )


@pytest.mark.slow
async def test_many_sessions_at_once_no_cross_talk_no_loss_no_leaks(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "soak.db")
    bus = InProcessEventBus()
    recorder = Recorder()
    bus.subscribe("*", recorder, name="recorder")
    cross_talk: list[tuple[str, set[str]]] = []

    async def converse(controller: ContextController, n: int) -> None:
        sid = f"s{n}"
        session = await controller.create_session(
            sid, model_context_window=2048, tiers=MemoryTiers(max_l1_size=10, max_l2_size=10)
        )
        for turn in range(TURNS):
            text = f"question {turn} from {sid}: where is my order {sid}t{turn}u"
            await session.add_task(said(f"{sid}-u{turn}", text))
            # The query shares no word with every session: see the note in the report about
            # lexical search over a store shared by many sessions.
            window = await session.build_context(f"status of {sid} item {turn}")
            owners = {m for msg in window.messages for m in OWNER.findall(msg.content)}
            if owners - {str(n)}:
                cross_talk.append((sid, owners))
            await session.add_task(reply(sid, turn))
        if n % 2:
            await session.end()

    # The timeout is a safety net for a hang, not a measure: generous, because `make test` runs
    # this beside other workers on a machine that may be shared.
    async with (
        asyncio.timeout(1200),
        ContextController(store, bus) as controller,
        asyncio.TaskGroup() as group,
    ):
        for n in range(SESSIONS):
            group.create_task(converse(controller, n))
    await bus.close()
    assert cross_talk == []

    counts = Counter(recorder.topics())
    assert counts[topics.TASK_ADDED] == SESSIONS * TURNS * 2
    assert counts[topics.CONTEXT_ASSEMBLED] == SESSIONS * TURNS
    assert counts[topics.SESSION_CREATED] == SESSIONS
    assert counts[topics.SESSION_ENDED] == SESSIONS // 2
    assert counts[topics.MEMORY_PERSISTED] == SESSIONS // 2
    assert len({e.id for e in recorder.events}) == len(recorder.events)
    stats = bus.stats()
    assert (stats.dropped, stats.failed) == (0, 0)
    assert stats.published == len(recorder.events)
    assert asyncio.all_tasks() == {asyncio.current_task()}

    # Every Task is stored in its own session; ended sessions are archived at the agent level.
    with SQLiteStore(store.path) as reopened:
        async with ContextController(reopened) as after:
            for n in range(SESSIONS):
                sid = f"s{n}"
                records = reopened.scan(after.layout.memory(sid), kind="task")
                assert len(records) == TURNS * 2
                assert {r.data["task_id"].split("-")[0] for r in records} == {sid}
            archived = reopened.scan(after.layout.agent, kind="task")
            assert len(archived) == SESSIONS // 2 * TURNS * 2
    store.close()

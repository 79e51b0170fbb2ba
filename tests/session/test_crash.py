"""A process distributing Tasks to sessions is killed with SIGKILL mid-burst: every Task whose
`distribute_task` had returned is, after reopening, in each session it was sent to.

The child prints ``<task id> <session ids>`` as each distribution is acknowledged, and pauses
and resumes sessions now and then, so some Tasks are acknowledged into a paused session's
queue. Repeated, since the kill lands differently each time.
"""

from __future__ import annotations

import asyncio
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from loomctx.session.controller import ContextController
from loomctx.session.session import SessionState
from loomctx.stores.sqlite import SQLiteStore

SESSIONS = [f"s{i}" for i in range(8)]

CHILD = textwrap.dedent(
    """
    import asyncio, random, sys
    from loomctx.memory.settings import MemoryTiers
    from loomctx.memory.task import Task, TaskStatus
    from loomctx.session.controller import ContextController
    from loomctx.stores.sqlite import SQLiteStore

    async def main(path, start, seed):
        rng = random.Random(seed)
        controller = ContextController(SQLiteStore(path))
        await controller.start()
        ids = [f"s{i}" for i in range(8)]
        known = set(controller.session_ids())
        for sid in ids:
            if sid not in known:
                tiers = MemoryTiers(max_l1_size=5, max_l2_size=3)
                await controller.create_session(sid, tiers=tiers)
        print("ready", flush=True)
        n = start
        while True:
            if n % 9 == 0:
                session = controller.get_session(rng.choice(ids))
                await (session.resume() if session.state.value == "paused" else session.pause())
            targets = rng.sample(ids, rng.randint(1, 4))
            task = Task(task_id=f"t{n}", action="note", status=TaskStatus.COMPLETED,
                        parameters={"text": f"crashmark{n} fact"},
                        metadata={"importance": 0.9 if n % 3 == 0 else 0.3})
            got = await controller.distribute_task(task, targets)
            print(f"t{n} {','.join(got)}", flush=True)
            n += 1

    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
    """
)


@pytest.mark.slow
def test_acknowledged_distributions_survive_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    rng = random.Random(20240611)
    acked: dict[str, list[str]] = {}
    for round_ in range(3):
        child = subprocess.Popen(
            [sys.executable, str(script), str(path), str(round_ * 100_000), str(round_)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        wanted = rng.randint(20, 150)
        deadline = time.monotonic() + 30  # a safety net, not a measure
        lines = 0
        while lines < wanted and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            task_id, targets = line.split()
            acked[task_id] = targets.split(",")
            lines += 1
        child.send_signal(signal.SIGKILL)
        for line in child.stdout:  # acknowledged before the kill, still in the pipe
            task_id, targets = line.split()
            acked[task_id] = targets.split(",")
        assert child.wait() == -signal.SIGKILL
        child.stdout.close()

        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.close()
        asyncio.run(check(path, acked))
    assert len(acked) >= 60


async def check(path: Path, acked: dict[str, list[str]]) -> None:
    """Every acknowledged Task is recorded in, or queued for, each of its sessions."""
    with SQLiteStore(path) as store:
        async with ContextController(store) as controller:
            assert controller.session_ids() == SESSIONS
            sessions = {sid: controller.get_session(sid) for sid in SESSIONS}
            for task_id, targets in acked.items():
                for sid in targets:
                    session = sessions[sid]
                    recorded = store.get(controller.layout.memory(sid), f"task:{task_id}")
                    queued = any(t.task_id == task_id for t in session.queued)
                    assert recorded is not None or queued, (task_id, sid)
                    if queued:  # a queue exists only while its session is paused
                        assert session.state is SessionState.PAUSED
            last = max(acked, key=lambda t: int(t[1:]))
            for sid in acked[last]:
                if sessions[sid].state is SessionState.ACTIVE:
                    found = sessions[sid].memory.search_tasks(f"crashmark{last[1:]}", 1)
                    assert [t.task_id for t in found] == [last]

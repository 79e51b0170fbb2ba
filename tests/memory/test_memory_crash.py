"""A process recording Tasks into LoomMemory is killed with SIGKILL at random points: every
task whose `add_task` had returned is in memory afterwards, and the database is intact."""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from loomctx import LoomMemory, MemoryTiers, SQLiteStore

CHILD = textwrap.dedent(
    """
    import sys
    from loomctx import LoomMemory, MemoryTiers, SQLiteStore, Task, TaskStatus

    store = SQLiteStore(sys.argv[1])
    memory = LoomMemory("agent", tiers=MemoryTiers(max_l1_size=8, max_l2_size=4), store=store,
                        embedder=None)
    start = int(sys.argv[2])
    for n in range(start, start + 100_000):
        memory.add_task(Task(task_id=f"t{n}", action="note", status=TaskStatus.COMPLETED,
                             parameters={"text": f"crashmark{n} fact"},
                             metadata={"importance": 0.9 if n % 5 == 0 else 0.3}))
        print(f"t{n}", flush=True)
        if n % 7 == 0:
            memory.promote_tasks()
    """
)


def test_acknowledged_tasks_survive_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    acked: list[str] = []
    rng = random.Random(7)
    for round_ in range(4):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path), str(round_ * 100_000)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        wanted = rng.randint(20, 200)
        deadline = time.monotonic() + 30
        while len(acked) < wanted * (round_ + 1) and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            acked.append(line.strip())
        child.send_signal(signal.SIGKILL)
        acked += [line.strip() for line in child.stdout if line.strip()]
        assert child.wait() == -signal.SIGKILL
        child.stdout.close()

        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.close()
        with SQLiteStore(path) as store:
            memory = LoomMemory(
                "agent", tiers=MemoryTiers(max_l1_size=8, max_l2_size=4), store=store, embedder=None
            )
            assert len(memory.get_l1_tasks(limit=100)) == 8
            for task_id in acked[-30:] + rng.sample(acked, min(30, len(acked))):
                found = memory.search_tasks(f"crashmark{task_id[1:]}", limit=1)
                assert found, task_id
                assert found[0].task_id == task_id
    assert len(acked) >= 80

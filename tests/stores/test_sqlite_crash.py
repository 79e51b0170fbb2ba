"""DESIGN.md invariant 7: a write whose `batch` returned survives a SIGKILL of the process.

A child process writes records (single puts and small batches) and prints the keys of each
batch after it returns; the parent kills it with SIGKILL at a random point, reopens the file
and checks that every acknowledged key is there, the database is intact, and the last
acknowledged record is found by lexical search. Repeated, since the kill lands differently
each time.
"""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from loomctx.stores.sqlite import SQLiteStore

NS = ("crash", "agent")

CHILD = textwrap.dedent(
    """
    import random, sys
    import numpy as np
    from loomctx.stores.base import PutVectors, Record
    from loomctx.stores.sqlite import SQLiteStore

    path, start, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    store = SQLiteStore(path)
    store.search(("crash", "agent"), "warm")  # keep the lexical index live while writing
    i = start
    print("ready", flush=True)
    while True:
        size = rng.choice([1, 1, 1, 3, 8])
        records = [
            Record(namespace=("crash", "agent"), key=f"k{n}", kind="turn",
                   text=f"turn number marker{n} about the weather in Lisbon")
            for n in range(i, i + size)
        ]
        stored = store.put_many(records)
        if rng.random() < 0.3:
            items = [(r.namespace, r.key, r.seq) for r in stored]
            vectors = np.ones((len(items), 8), dtype=np.float32)
            store.batch([PutVectors(model="m", items=items, vectors=vectors)])
        print(" ".join(r.key for r in stored), flush=True)
        i += size
    """
)


@pytest.mark.slow
def test_acknowledged_writes_survive_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    rng = random.Random(20240607)
    acknowledged: list[str] = []
    for round_ in range(5):
        child = subprocess.Popen(
            [
                sys.executable,
                str(script),
                str(path),
                str(10**6 * round_),
                str(round_),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        for _ in range(rng.randint(1, 150)):
            line = child.stdout.readline()
            if not line:
                break
            acknowledged += line.split()
        child.send_signal(signal.SIGKILL)
        # Keys printed before the kill landed were acknowledged too: read them all.
        acknowledged += child.stdout.read().split()
        child.stdout.close()
        assert child.wait() == -signal.SIGKILL

        conn = sqlite3.connect(path)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            conn.close()
        with SQLiteStore(path) as store:
            present = {r.key for r in store.scan(NS)}
            assert set(acknowledged) <= present
            last = acknowledged[-1]
            hits = store.search(NS, f"marker{last[1:]}", limit=1)
            assert [h.record.key for h in hits] == [last]

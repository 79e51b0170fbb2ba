"""Four worker processes, one PostgreSQL store, one Redis bus, 200 sessions (issue 14).

Each worker is a real OS process (`tests/session/_mp_worker.py`) running a
`ContextController` on one shared `PostgresStore` and `RedisStreamsBus`; the test is the load
balancer. Turn t of session n goes to worker (n + t) % 4, so every session hops between
processes turn by turn, and many sessions talk at once. Mid-stream, one worker is SIGKILLed
inside its promotion trigger; the load balancer retries its unanswered turns on the next
worker, and the other workers claim the events it had taken (``XAUTOCLAIM``).

Afterwards: every Task is in the store exactly once, in one write order per session; no
window or L1 held another session's words, and each window held the session's earlier turns
whichever worker recorded them; every ``task.added`` event was handled by a promotion trigger
(the killed worker's unfinished ones by a survivor, none twice by the survivors) and every
important Task is in L2; an aggregate built in one process sees what the others promoted, and
its L3 is read by the others; every ended session is archived once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis

from loomctx.session import topics
from loomctx.session._layout import SessionLayout
from loomctx.session.bus import Event
from loomctx.session.bus.redis import RedisStreamsBus
from loomctx.stores import open_store
from loomctx.stores.base import Scan

SESSIONS, TURNS, WORKERS = 200, 3, 4
VICTIM = 3  # the worker that is SIGKILLed
SAFETY = 300  # seconds: a safety net for a hang, not a measure
ROOT = Path(__file__).resolve().parents[2]


class Died(Exception):
    """The worker died before it answered."""


class Handle:
    """The test's side of one worker process: requests out, answers and notes in."""

    def __init__(self, index: int, process: asyncio.subprocess.Process) -> None:
        self.index = index
        self.process = process
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.started: list[str] = []
        self.done: list[str] = []
        self.entered = asyncio.Event()  # set on each "start" note
        self.ready = asyncio.Event()
        self.next_id = 0
        self.alive = True
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            message = json.loads(line)
            if "id" in message:
                self.waiting.pop(message["id"]).set_result(message)
            elif message["note"] == "ready":
                self.ready.set()
            elif message["note"] == "start":
                self.started.append(message["event"])
                self.entered.set()
            else:
                self.done.append(message["event"])
        self.alive = False
        for future in self.waiting.values():
            future.set_exception(Died(f"worker {self.index} died"))
        self.waiting.clear()

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        if not self.alive:
            raise Died(f"worker {self.index} is dead")
        assert self.process.stdin is not None
        self.next_id += 1
        future = asyncio.get_running_loop().create_future()
        self.waiting[self.next_id] = future
        self.process.stdin.write(json.dumps({"op": op, "id": self.next_id, **args}).encode())
        self.process.stdin.write(b"\n")
        await self.process.stdin.drain()
        answer = await asyncio.wait_for(future, SAFETY)
        assert "error" not in answer, f"worker {self.index}: {answer['error']}"
        return answer


async def spawn(index: int, store_url: str, redis_url: str, prefix: str) -> Handle:
    delay = 0.3 if index == VICTIM else 0.0
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.session._mp_worker",
        store_url,
        redis_url,
        prefix,
        f"worker{index}",
        str(delay),
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    return Handle(index, process)


@pytest.mark.slow
async def test_four_worker_processes_serve_200_hopping_sessions(
    postgres_url: str, redis_url: str, redis_prefix: str
) -> None:
    added: list[str] = []
    persisted: list[Event] = []
    watcher = RedisStreamsBus(redis_url, prefix=redis_prefix, block=0.02)
    watcher.subscribe(topics.TASK_ADDED, lambda e: added.append(e.id))
    watcher.subscribe(topics.MEMORY_PERSISTED, persisted.append)
    # The first store creates the schema, so the workers do not race to (they may: the
    # migrations take an advisory lock; this keeps the test about serving, not migrating).
    store = open_store(postgres_url)
    workers: list[Handle] = []
    answers: dict[tuple[int, int], dict[str, Any]] = {}
    turns_done = 0
    retried: list[tuple[int, int]] = []
    try:
        async with watcher, asyncio.timeout(SAFETY * 3):
            workers = [
                await spawn(i, postgres_url, redis_url, redis_prefix) for i in range(WORKERS)
            ]
            for w in workers:
                await asyncio.wait_for(w.ready.wait(), SAFETY)

            async def turn(n: int, t: int) -> None:
                nonlocal turns_done
                for hop in range(WORKERS):
                    w = workers[(n + t + hop) % WORKERS]
                    try:
                        answers[n, t] = await w.call("turn", sid=f"s{n}", t=t)
                        break
                    except Died:
                        retried.append((n, t))  # the load balancer tries the next worker
                else:
                    raise AssertionError(f"no worker answered turn {t} of s{n}")
                turns_done += 1

            async def converse(n: int) -> None:
                for t in range(TURNS):
                    await turn(n, t)

            async def kill_mid_stream() -> None:
                victim = workers[VICTIM]
                while turns_done < SESSIONS:  # noqa: ASYNC110 - a third of the way; polled
                    await asyncio.sleep(0.05)
                victim.entered.clear()
                await victim.entered.wait()  # inside a promotion, its sleep
                victim.process.send_signal(signal.SIGKILL)
                await victim.process.wait()
                await victim.reader

            async with asyncio.TaskGroup() as group:
                group.create_task(kill_mid_stream())
                for n in range(SESSIONS):
                    group.create_task(converse(n))
            survivors = [w for w in workers if w.index != VICTIM]
            victim = workers[VICTIM]

            # Every Task.added event is handled by a promotion trigger; the events the
            # victim died holding, by the survivors (after `claim_idle`).
            expected_events = SESSIONS * TURNS * 2 + len(retried) * 2
            while len(added) < SESSIONS * TURNS * 2 or not set(added) <= {  # noqa: ASYNC110
                e for w in workers for e in w.done
            }:
                await asyncio.sleep(0.1)
            killed_in = [e for e in victim.started if e not in victim.done]
            assert killed_in, "the victim was killed outside a promotion"
            by_survivors = [e for w in survivors for e in w.done]
            assert set(killed_in) <= set(by_survivors)
            # Once per event among the survivors (the victim may have finished an event and
            # died before acknowledging it: that one may run again, at least once).
            assert [e for e, c in Counter(by_survivors).items() if c > 1] == []
            assert all(w.done for w in survivors)
            assert len(added) <= expected_events

            # No cross-talk, and one conversation across workers.
            for (n, t), answer in answers.items():
                assert set(answer["owners"]) <= {str(n)}, (n, t, answer["owners"])
                assert all(i.startswith(f"s{n}-") for i in answer["l1"]), (n, t, answer["l1"])
                assert f"s{n}t{t}u" in answer["seen"]
                earlier = {f"s{n}t{k}{r}" for k in range(t) for r in "ua"}
                assert earlier <= set(answer["seen"]), (n, t, answer["seen"])
                assert len(answer["l1"]) == 2 * (t + 1)

            # Every Task is stored exactly once, each session in one write order.
            layout = SessionLayout("default", "agent")
            for n in range(SESSIONS):
                records = store.batch(
                    [Scan(prefix=layout.memory(f"s{n}"), exact=True, kind="task")]
                )[0]
                assert sorted(r.key for r in records) == sorted(
                    f"task:s{n}-{r}{t}" for t in range(TURNS) for r in "ua"
                )
                assert sorted(r.data["order"] for r in records) == list(range(2 * TURNS))

            # Every important Task reached L2, whoever promoted it; any worker sees it.
            for n in range(0, SESSIONS, 17):
                w = survivors[n % len(survivors)]
                l2 = (await w.call("l2", sid=f"s{n}"))["l2"]
                assert sorted(l2) == sorted(f"s{n}-u{t}" for t in range(TURNS))

            # An aggregate built in worker 0 sees what the other processes recorded and
            # promoted; its L3 is then read by another process.
            sids = [f"s{n}" for n in range(1, 8)]
            aggregate = await survivors[0].call("aggregate", sids=sids, query="where is my order")
            for sid in sids:
                assert f"{sid}t{TURNS - 1}u" in aggregate["text"]
            important = {f"{sid}-u{t}" for sid in sids for t in range(TURNS)}
            assert important <= set(aggregate["l3"])
            assert important <= set((await survivors[1].call("l3"))["l3"])

            # L3 -> L4 once per ended session, whichever worker ends it or archives it.
            ended = list(range(100, 130))
            for n in ended:
                await survivors[n % len(survivors)].call("end", sid=f"s{n}")
            while len(persisted) < len(ended):  # noqa: ASYNC110 - other processes' work
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.5)  # a second run (a bug) would have published by now
            assert sorted(e.payload["session_id"] for e in persisted) == sorted(
                f"s{n}" for n in ended
            )
            archived = await survivors[2].call("archive", query=f"where is my order s{ended[0]}t1u")
            assert f"s{ended[0]}-u1" in archived["ids"]

            for w in survivors:
                await w.call("close")
                await w.process.wait()
    finally:
        for w in workers:
            if w.process.returncode is None:
                w.process.kill()
                await w.process.wait()
            with contextlib.suppress(Exception):
                await w.reader
        store.close()
    client = redis.Redis.from_url(redis_url)
    try:
        pending = client.xpending(
            f"{redis_prefix}:stream:{topics.TASK_ADDED}", "promote:default/agent"
        )
        assert pending["pending"] == 0
    finally:
        client.close()

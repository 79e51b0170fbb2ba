"""Several workers, one conversation: promotion and the L3/L4 flows run once per event.

Each "worker" is a `ContextController` with its own `RedisStreamsBus` (one Redis, one key
prefix) and its own store connection, to one shared SQLite file or one PostgreSQL database
(each test runs on both), as separate processes would have. The controllers' triggers
subscribe under the same group names in every worker, so each ``task.added`` /
``memory.persist`` event is handled by one of them. One test runs a real child process and
SIGKILLs it mid-stream: what it had taken and not acknowledged is claimed by the surviving
worker. (`test_many_workers.py` runs four processes on PostgreSQL.)
"""

from __future__ import annotations

import asyncio
import signal
import sys
import textwrap
from asyncio.subprocess import PIPE
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from loomctx.errors import ConfigError
from loomctx.memory.settings import MemoryTiers
from loomctx.session import topics
from loomctx.session.bus import Event
from loomctx.session.bus.redis import RedisStreamsBus
from loomctx.session.controller import ContextController
from loomctx.session.session import SessionState
from loomctx.stores import open_store
from tests.session._helpers import note, said

SAFETY = 30  # seconds: a safety net, not a measure


class CountingController(ContextController):
    """A worker that records the events its own triggers handled."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.promoted: list[str] = []
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    async def _promote(self, event: Event) -> None:
        await super()._promote(event)
        self.promoted.append(event.id)


async def until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(SAFETY):
        while not check():  # noqa: ASYNC110 - the state is in Redis and other processes
            await asyncio.sleep(0.02)


@pytest.fixture(params=["sqlite", "postgres"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the workers' store is: a SQLite file's path, or a PostgreSQL database's URL."""
    if request.param == "sqlite":
        return str(tmp_path / "shared.db")
    return str(request.getfixturevalue("postgres_url"))


def worker(store: str, url: str, prefix: str, **options: float) -> CountingController:
    bus = RedisStreamsBus(url, prefix=prefix, block=0.02, **options)
    return CountingController(open_store(store), bus)


async def test_two_workers_promote_and_persist_once_per_event(
    shared: str, redis_url: str, redis_prefix: str
) -> None:
    a = worker(shared, redis_url, redis_prefix)
    b = worker(shared, redis_url, redis_prefix)
    watcher = RedisStreamsBus(redis_url, prefix=redis_prefix, block=0.02)
    added: list[str] = []
    persisted: list[Event] = []  # the L4Persister publishes one per run
    watcher.subscribe(topics.TASK_ADDED, lambda e: added.append(e.id))
    watcher.subscribe(topics.MEMORY_PERSISTED, persisted.append)
    async with watcher:
        await a.start()
        await b.start()
        session = await a.create_session("conv", tiers=MemoryTiers(max_l1_size=20))
        # The session hops between workers turn by turn.
        for i in range(12):
            hop = (a if i % 2 == 0 else b).get_session("conv")
            task = said(f"u{i}", f"question {i}") if i % 3 == 0 else note(f"n{i}", f"fact {i}")
            await hop.add_task(task)
        await until(lambda: len(added) == 12 and len(a.promoted) + len(b.promoted) == 12)
        # Each task.added was handled by one worker's promotion trigger, none twice.
        assert sorted(a.promoted + b.promoted) == sorted(added)
        assert a.promoted
        assert b.promoted
        # The important Tasks are in L2 whichever worker promoted them, seen by both.
        important = {f"u{i}" for i in range(0, 12, 3)}
        for w in (a, b):
            l2 = {t.task_id for t in w.get_session("conv").memory.get_l2_tasks()}
            assert l2 == important
            assert len(w.get_session("conv").memory.get_l1_tasks(20)) == 12
        # L3 -> L4 once: the session ends on worker B, the archive is written once.
        await b.get_session("conv").end()
        await until(lambda: len(persisted) == 1)
        await asyncio.sleep(0.3)  # a second run (a bug) would have published by now
        assert [e.payload["session_id"] for e in persisted] == ["conv"]
        archive = a.memory.search_tasks("fact 7", limit=3)
        assert "n7" in [t.task_id for t in archive]
        # An aggregate built in worker A sees what worker B recorded (L2 -> agent L3).
        other = await b.create_session("other")
        await other.add_task(said("x1", "the deploy key rotates on Mondays"))
        await until(
            lambda: "x1" in {t.task_id for t in b.get_session("other").memory.get_l2_tasks()}
        )
        window = await a.aggregate_context(["other"], "deploy key", 2000)
        assert "rotates on Mondays" in "\n".join(m.content for m in window.messages)
        assert "x1" in {s.task_id for s in a.memory.get_l3_summaries()}
        assert session.id == "conv"
        await a.close()
        await b.close()
    for w in (a, b):
        await w.bus.close()
        w.store.close()
    pending = redis.Redis.from_url(redis_url).xpending(
        f"{redis_prefix}:stream:{topics.TASK_ADDED}", "promote:default/agent"
    )
    assert pending["pending"] == 0


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from loomctx.session.controller import ContextController
    from loomctx.session.bus.redis import RedisStreamsBus
    from loomctx.stores import open_store

    class Slow(ContextController):
        async def _promote(self, event):
            print("start", event.id, flush=True)
            await asyncio.Event().wait()  # killed in here: it never returns, however slow
            await super()._promote(event)  # the parent is to kill it
            print("done", event.id, flush=True)

    async def main(path, url, prefix):
        bus = RedisStreamsBus(url, prefix=prefix, block=0.02, max_pending=1)
        controller = Slow(open_store(path), bus)
        await controller.start()
        print("ready", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main(*sys.argv[1:4]))
    """
)


async def test_a_killed_workers_pending_events_are_claimed_by_another(
    shared: str, redis_url: str, redis_prefix: str
) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, shared, redis_url, redis_prefix, stdout=PIPE
    )
    survivor = worker(shared, redis_url, redis_prefix, claim_idle=0.5)
    started: list[str] = []
    done: list[str] = []
    try:
        assert child.stdout is not None
        line = (await asyncio.wait_for(child.stdout.readline(), SAFETY)).decode()
        assert line.strip() == "ready"
        await survivor.start()
        session = await survivor.create_session("conv", tiers=MemoryTiers(max_l1_size=50))
        added: list[str] = []
        watcher = RedisStreamsBus(redis_url, prefix=redis_prefix, block=0.02)
        watcher.subscribe(topics.TASK_ADDED, lambda e: added.append(e.id))
        async with watcher:
            for i in range(20):
                await session.add_task(said(f"u{i}", f"important {i}"))
                await asyncio.sleep(0.01)
            # Wait until the child is inside a handler, then kill it there.
            line = (await asyncio.wait_for(child.stdout.readline(), SAFETY)).decode()
            kind, event_id = line.split()
            assert kind == "start"
            started.append(event_id)
            child.send_signal(signal.SIGKILL)
            await asyncio.wait_for(child.wait(), SAFETY)
            for rest in (await child.stdout.read()).decode().splitlines():
                kind, event_id = rest.split()
                (started if kind == "start" else done).append(event_id)
            await until(lambda: len(added) == 20)
            # Every event is handled by someone; the one the child died in, by the survivor.
            await until(lambda: set(added) <= set(done) | set(survivor.promoted))
        killed_in = [e for e in started if e not in done]
        assert killed_in
        assert set(killed_in) <= set(survivor.promoted)
        l2 = {t.task_id for t in survivor.get_session("conv").memory.get_l2_tasks()}
        assert l2 == {f"u{i}" for i in range(20)}
        pending = redis.Redis.from_url(redis_url).xpending(
            f"{redis_prefix}:stream:{topics.TASK_ADDED}", "promote:default/agent"
        )
        assert pending["pending"] == 0
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
        await survivor.close()
        await survivor.bus.close()
        survivor.store.close()


async def test_a_workers_session_follows_what_another_worker_did_to_it(shared: str) -> None:
    """State changes are stored; a worker that loaded the session earlier takes them up on
    its next `get_session` (same object), and the queue other workers filled while paused."""
    stores = [open_store(shared), open_store(shared)]
    try:
        async with ContextController(stores[0]) as a, ContextController(stores[1]) as b:
            await a.create_session("conv")
            loaded = b.get_session("conv")  # while it is active
            await a.get_session("conv").pause()
            assert b.get_session("conv").state is SessionState.PAUSED
            await b.get_session("conv").add_task(said("u1", "queued in worker b"))
            assert [t.task_id for t in a.get_session("conv").queued] == ["u1"]
            await a.get_session("conv").resume()  # records what b queued
            l1 = a.get_session("conv").memory.get_l1_tasks(10)
            assert [t.task_id for t in l1] == ["u1"]
            assert b.get_session("conv").state is SessionState.ACTIVE
            assert b.get_session("conv").queued == ()
            await a.get_session("conv").end()
            with pytest.raises(ConfigError, match="has ended"):
                await b.get_session("conv").add_task(said("u2", "too late"))
            assert b.get_session("conv") is loaded
            assert [t.task_id for t in loaded.memory.get_l1_tasks(10)] == ["u1"]
    finally:
        for store in stores:
            store.close()

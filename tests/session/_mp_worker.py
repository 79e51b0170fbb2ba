"""One worker process of `test_many_workers.py`: a `ContextController` on the shared
`PostgresStore` and `RedisStreamsBus`, as a stateless worker behind a load balancer would run.

Run as ``python -m tests.session._mp_worker STORE_URL REDIS_URL PREFIX NAME DELAY``. It reads
one JSON request per line on stdin and answers each on stdout with the request's ``id``;
requests run concurrently, as a server's would. It also writes a ``note`` line when its
promotion trigger starts and finishes an event, so the test can SIGKILL it inside one
(`DELAY` seconds of sleep in the trigger widen that moment; 0 for the others).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from typing import Any

from loomctx.errors import ConfigError
from loomctx.memory.settings import MemoryTiers
from loomctx.memory.task import ASSISTANT_MESSAGE, Task, TaskStatus
from loomctx.session.bus import Event
from loomctx.session.bus.redis import RedisStreamsBus
from loomctx.session.controller import ContextController
from loomctx.stores import open_store
from tests.session._helpers import said, text_of

OWNER = re.compile(r"\bs(\d+)t\d+[ua]\b")
"""The private tokens: ``s{n}t{turn}u`` (user) and ``s{n}t{turn}a`` (reply) of session n."""


def emit(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


class Worker(ContextController):
    """A controller whose promotion trigger reports each event it handles."""

    def __init__(self, *args: Any, delay: float, **kwargs: Any) -> None:
        self.delay = delay
        super().__init__(*args, **kwargs)

    async def _promote(self, event: Event) -> None:
        emit({"note": "start", "event": event.id})
        if self.delay:
            await asyncio.sleep(self.delay)  # killed in here
        await super()._promote(event)
        emit({"note": "done", "event": event.id})


def reply(sid: str, turn: int) -> Task:
    return Task(
        task_id=f"{sid}-a{turn}",
        action=ASSISTANT_MESSAGE,
        parameters={"content": f"answer for {sid}: order {sid}t{turn}a is on its way"},
        status=TaskStatus.COMPLETED,
        metadata={"importance": 0.3},
    )


async def turn(controller: Worker, sid: str, t: int) -> dict[str, Any]:
    """One turn of session `sid`: record the user's message, build the window, record the
    reply; answer with what the window and L1 held of other sessions, and of this one."""
    if t == 0:
        try:
            session = await controller.create_session(sid, tiers=MemoryTiers(max_l1_size=20))
        except ConfigError:
            # A retry of a turn whose first worker died after it stored the session.
            session = controller.get_session(sid)
    else:
        session = controller.get_session(sid)
    text = f"question {t} from {sid}: where is my order {sid}t{t}u"
    await session.add_task(said(f"{sid}-u{t}", text))
    window = await session.build_context(f"status of {sid} item {t}")
    tokens = set(OWNER.findall(text_of(window)))
    await session.add_task(reply(sid, t))
    l1 = [task.task_id for task in session.memory.get_l1_tasks(100)]
    seen = sorted(set(re.findall(rf"\b{sid}t\d+[ua]\b", text_of(window))))
    return {"owners": sorted(tokens), "l1": l1, "seen": seen}


async def handle(controller: Worker, request: dict[str, Any]) -> dict[str, Any]:
    op = request["op"]
    if op == "turn":
        return await turn(controller, request["sid"], request["t"])
    if op == "end":
        await controller.end_session(request["sid"])
        return {}
    if op == "aggregate":
        window = await controller.aggregate_context(request["sids"], request["query"], 4000)
        l3 = [s.task_id for s in controller.memory.get_l3_summaries()]
        return {"text": text_of(window), "l3": l3}
    if op == "l3":
        return {"l3": [s.task_id for s in controller.memory.get_l3_summaries()]}
    if op == "l2":
        session = controller.get_session(request["sid"])
        return {"l2": [task.task_id for task in session.memory.get_l2_tasks()]}
    if op == "archive":
        found = controller.memory.search_tasks(request["query"], limit=5)
        return {"ids": [task.task_id for task in found]}
    raise ValueError(f"unknown op {op!r}")


async def main(store_url: str, redis_url: str, prefix: str, name: str, delay: float) -> None:
    store = open_store(store_url)
    # claim_idle: above the slowest handler on a busy machine, low enough to take over soon.
    bus = RedisStreamsBus(redis_url, prefix=prefix, block=0.02, claim_idle=10.0, consumer=name)
    controller = Worker(store, bus, delay=delay)
    await controller.start()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    emit({"note": "ready"})

    async def serve(request: dict[str, Any]) -> None:
        try:
            answer = await handle(controller, request)
        except Exception as error:  # reported to the test, which fails on it
            answer = {"error": f"{type(error).__name__}: {error}"}
        emit({"id": request["id"], **answer})

    async with asyncio.TaskGroup() as group:
        while line := await reader.readline():
            request = json.loads(line)
            if request["op"] == "close":
                break
            group.create_task(serve(request))
    await controller.close()
    await bus.close()
    store.close()
    emit({"id": request["id"]})


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5], float(sys.argv[5])))

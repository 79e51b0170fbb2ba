"""One layout of a session's memory for the controller, the server and the command line,
and the layouts of earlier versions moved to it when a session is opened: history intact,
moved once, every session still apart from every other."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from loomctx.cli._workspace import open_memory
from loomctx.errors import ConfigError
from loomctx.memory.core import LoomMemory
from loomctx.server import LoomService
from loomctx.server._config import serve_config_from
from loomctx.session.controller import ContextController
from loomctx.stores import open_store
from loomctx.stores.base import (
    BaseStore,
    Delete,
    Namespace,
    Op,
    Put,
    Scan,
    StoreContext,
    Version,
)
from loomctx.stores.sqlite import SQLiteStore
from tests.session._helpers import note, said


def _service(db: Path, *tenants: str) -> LoomService:
    config = serve_config_from(
        {"tenants": {t: {} for t in tenants}}, store=str(db), embedder="none"
    )
    return LoomService(config)


def _write_old(store: BaseStore, namespace: Namespace, node: str, marker: str) -> list[str]:
    """What an earlier version wrote for a session: its memory at `namespace`, four tasks
    (one important, so promoted to L2); returns their ids in order."""
    memory = LoomMemory(node, store=store, namespace=namespace, embedder=None)
    tasks = [
        said(f"{marker}-0", f"{marker} my plan is the blue tier", importance=0.9),
        note(f"{marker}-1", f"{marker} looked up the invoice"),
        note(f"{marker}-2", f"{marker} refund issued"),
        note(f"{marker}-3", f"{marker} ticket closed"),
    ]
    memory.add_tasks(tasks)
    memory.promote_tasks()
    memory.close()
    return [t.task_id for t in tasks]


def _records(store: BaseStore, namespace: Namespace) -> list[str]:
    return [r.key for r in store.batch([Scan(prefix=namespace, exact=True)])[0]]


def test_the_server_the_command_line_and_the_controller_share_one_layout(
    tmp_path: Path,
) -> None:
    db = tmp_path / "loom.db"
    service = _service(db, "default")
    served = service.memory("default", "s1").namespace
    service.close()
    store = SQLiteStore(db)
    cli = open_memory(store, "s1", None)
    controller = ContextController(store)
    assert served == cli.namespace == controller.layout.memory("s1")
    assert served == ("default", "agent", "session", "s1")
    cli.close()
    store.close()


async def test_a_controller_session_is_the_command_lines_session(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "loom.db")
    async with ContextController(store) as controller:
        session = await controller.create_session("s1")
        await session.add_task(said("c-0", "the port is 8443"))
    cli = open_memory(store, "s1", None)
    assert [t.task_id for t in cli.get_l1_tasks(10)] == ["c-0"]
    cli.close()
    store.close()


def test_a_servers_old_session_memory_moves_on_open_with_its_history(tmp_path: Path) -> None:
    db = tmp_path / "loom.db"
    store = SQLiteStore(db)
    old = ("acme", "memory", "s1")
    ids = _write_old(store, old, "s1", "a")
    store.close()

    service = _service(db, "acme")
    memory = service.memory("acme", "s1")
    assert memory.namespace == ("acme", "agent", "session", "s1")
    assert [t.task_id for t in memory.get_l1_tasks(10)] == ids  # in order
    assert [t.task_id for t in memory.get_l2_tasks()] == ["a-0"]
    assert [t.task_id for t in memory.search_tasks("refund issued", 1)] == ["a-2"]
    assert _records(service.store, old) == []
    version = service.store.batch([Version(namespace=memory.namespace)])[0]
    service.close()

    again = _service(db, "acme")  # a second open moves nothing
    reopened = again.memory("acme", "s1")
    assert again.store.batch([Version(namespace=reopened.namespace)])[0] == version
    assert [t.task_id for t in reopened.get_l1_tasks(10)] == ids
    again.close()


def test_the_command_lines_old_session_memory_moves_on_open(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "loom.db")
    ids = _write_old(store, ("default", "s1", "memory"), "s1", "c")  # LoomMemory's default
    assert LoomMemory("s1", store=store, embedder=None).namespace == ("default", "s1", "memory")
    memory = open_memory(store, "s1", None)
    assert [t.task_id for t in memory.get_l1_tasks(10)] == ids
    assert [t.task_id for t in memory.get_l2_tasks()] == ["c-0"]
    assert _records(store, ("default", "s1", "memory")) == []
    keys = _records(store, memory.namespace)
    memory.close()
    again = open_memory(store, "s1", None)
    assert _records(store, again.namespace) == keys
    assert [t.task_id for t in again.get_l1_tasks(10)] == ids
    again.close()
    store.close()


def test_moved_sessions_stay_apart_across_tenants_and_ids(tmp_path: Path) -> None:
    db = tmp_path / "loom.db"
    store = SQLiteStore(db)
    acme = _write_old(store, ("acme", "memory", "s1"), "s1", "acme")
    beta = _write_old(store, ("beta", "memory", "s1"), "s1", "beta")  # the same session id
    other = _write_old(store, ("acme", "memory", "s2"), "s2", "two")
    store.close()
    service = _service(db, "acme", "beta")
    for tenant, session, ids in (("acme", "s1", acme), ("beta", "s1", beta), ("acme", "s2", other)):
        memory = service.memory(tenant, session)
        assert [t.task_id for t in memory.get_l1_tasks(10)] == ids
        marker = ids[0].partition("-")[0]
        found = memory.search_tasks("refund issued ticket closed invoice plan", 20)
        assert {t.task_id.partition("-")[0] for t in found} == {marker}
    service.close()


def test_a_session_stored_in_both_layouts_is_refused_naming_both(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "loom.db")
    _write_old(store, ("default", "s1", "memory"), "s1", "old")
    _write_old(store, ("default", "agent", "session", "s1"), "s1", "new")
    with pytest.raises(ConfigError) as refused:
        open_memory(store, "s1", None)
    message = str(refused.value)
    assert "('default', 's1', 'memory')" in message
    assert "('default', 'agent', 'session', 's1')" in message
    assert "delete every record of the other" in message
    assert len(_records(store, ("default", "s1", "memory"))) > 0  # nothing was moved
    store.close()


def test_a_session_moves_on_postgresql_too(postgres_url: str) -> None:
    store = open_store(postgres_url)
    ids = _write_old(store, ("default", "s1", "memory"), "s1", "pg")
    memory = open_memory(store, "s1", None)
    assert [t.task_id for t in memory.get_l1_tasks(10)] == ids
    assert [t.task_id for t in memory.get_l2_tasks()] == ["pg-0"]
    assert _records(store, ("default", "s1", "memory")) == []
    memory.close()
    store.close()


def test_racing_opens_move_a_session_once(tmp_path: Path) -> None:
    """Processes opening the same old session at once: one moves it, the others find it
    moved (a batch guarded by both namespaces' versions), and every one reads it whole."""
    db = tmp_path / "loom.db"
    with SQLiteStore(db) as store:
        ids = _write_old(store, ("default", "s1", "memory"), "s1", "r")
    stores = [SQLiteStore(db) for _ in range(4)]  # one connection each, as processes have
    start = threading.Barrier(len(stores))

    def open_one(store: SQLiteStore) -> list[str]:
        start.wait()
        memory = open_memory(store, "s1", None)
        try:
            return [t.task_id for t in memory.get_l1_tasks(10)]
        finally:
            memory.close()

    with ThreadPoolExecutor(len(stores)) as pool:
        seen = list(pool.map(open_one, stores))
    assert seen == [ids] * len(stores)
    new = ("default", "agent", "session", "s1")
    records = stores[0].batch([Scan(prefix=new, exact=True)])[0]
    assert len(records) == len({r.key for r in records})
    assert _records(stores[0], ("default", "s1", "memory")) == []
    for store in stores:
        store.close()


class _Interleaved(SQLiteStore):
    """A real store on which another process acts between this one's reads and its first
    write, exactly once."""

    def __init__(self, path: Path, meanwhile: Callable[[], None]) -> None:
        super().__init__(path)
        self._meanwhile: Callable[[], None] | None = meanwhile

    def batch(self, ops: Sequence[Op], *, ctx: StoreContext | None = None) -> list[Any]:
        if self._meanwhile is not None and any(isinstance(op, Put | Delete) for op in ops):
            meanwhile, self._meanwhile = self._meanwhile, None
            meanwhile()
        return super().batch(ops, ctx=ctx)


def test_a_move_computed_from_a_stale_read_writes_nothing(tmp_path: Path) -> None:
    """Another process moves the session and forgets a task between this one's read of the
    old namespace and its move: the move's guard fails, and the retry finds nothing left to
    move, so the forgotten task is not brought back from the stale read."""
    db = tmp_path / "loom.db"
    with SQLiteStore(db) as store:
        ids = _write_old(store, ("default", "s1", "memory"), "s1", "g")
    new = ("default", "agent", "session", "s1")

    def another_process() -> None:
        with SQLiteStore(db) as other:
            memory = open_memory(other, "s1", None)
            memory.close()
            assert other.batch([Delete(namespace=new, key="task:g-1")]) == [True]

    store = _Interleaved(db, another_process)
    memory = open_memory(store, "s1", None)
    assert [t.task_id for t in memory.get_l1_tasks(10)] == [i for i in ids if i != "g-1"]
    assert "task:g-1" not in _records(store, new)
    memory.close()
    store.close()

"""Fixtures for the server's tests: a real uvicorn server running Loom's app, in front of a
local upstream speaking the OpenAI and Anthropic wire protocols (`tests.agent._servers`).

Loom's server runs in a thread of the test process (so its code is measured by coverage) on a
free port of 127.0.0.1, with its own SQLite file; clients are the official `openai` and `mcp`
SDKs over real HTTP. Two tenants, `acme` and `globex`, each with an API key.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import openai
import pytest
import uvicorn

from loomctx.agent.llm import allow_model_requests
from loomctx.server import LoomService, create_app, hash_key
from loomctx.server._config import serve_config_from
from tests.agent._servers import WireServer

ACME_KEY = "sk-acme-0123456789abcdef"
GLOBEX_KEY = "sk-globex-fedcba9876543210"
UPSTREAM_KEY = "sk-upstream-secret-never-shown"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Loom:
    """A running Loom server. `service` is its state, read once every session's reply is
    recorded (the server records a reply after the client has it)."""

    url: str
    _service: LoomService
    wire: WireServer
    store: Path
    clients: list[openai.OpenAI] = field(default_factory=list)

    @property
    def service(self) -> LoomService:
        deadline = time.monotonic() + 10
        while any(lock.locked() for lock in list(self._service._locks.values())):
            assert time.monotonic() < deadline, "a session stayed locked"
            time.sleep(0.01)
        return self._service

    @property
    def v1(self) -> str:
        return f"{self.url}/v1"

    def openai(self, key: str) -> openai.OpenAI:
        """The official client, pointed at this server (closed after the test)."""
        client = openai.OpenAI(base_url=self.v1, api_key=key, max_retries=0)
        self.clients.append(client)
        return client


def serve_table(
    wire: WireServer,
    *,
    window: int = 2000,
    passthrough: bool = True,
    tenants: dict[str, dict] | None = None,
    claude: dict | None = None,
) -> dict:
    """The `[serve]` table of the tests: two models, tenants `acme` and `globex`, and
    `tenants` added (or replacing one of those); `claude` adds settings to `claude-test`."""
    table = {
        "passthrough": passthrough,
        "max_body_bytes": 2_000_000,
        "models": {
            "gpt-test": {
                "provider": "openai",
                "base_url": wire.openai_url,
                "api_key_env": "LOOM_TEST_UPSTREAM_KEY",
                "upstream": "gpt-upstream",
                "window": window,
                "output_reserve": 0.2,
            },
            "claude-test": {
                "provider": "anthropic",
                "base_url": wire.url,
                "api_key_env": "LOOM_TEST_UPSTREAM_KEY",
                "upstream": "claude-upstream",
                "window": window,
                **(claude or {}),
            },
        },
        "tenants": {
            "acme": {
                "keys": [hash_key(ACME_KEY)],
                "knowledge": ["handbook"],
                "instructions": "You work for ACME.",
            },
            # A knowledge base of the same name as acme's: a tenant's own, not acme's.
            "globex": {"keys": [hash_key(GLOBEX_KEY)], "knowledge": ["handbook"]},
        },
    }
    table["tenants"].update(tenants or {})  # type: ignore[attr-defined]
    return table


@pytest.fixture
def wire() -> Iterator[WireServer]:
    server = WireServer().start()
    yield server
    server.stop()


def start_loom(service: LoomService) -> tuple[uvicorn.Server, threading.Thread, str]:
    port = free_port()
    config = uvicorn.Config(
        create_app(service), host="127.0.0.1", port=port, log_level="warning", lifespan="on"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the Loom server did not start")
        time.sleep(0.02)
    return server, thread, f"http://127.0.0.1:{port}"


@pytest.fixture
def loom_factory(
    wire: WireServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[object]:
    monkeypatch.setenv("LOOM_TEST_UPSTREAM_KEY", UPSTREAM_KEY)
    running: list[tuple[uvicorn.Server, threading.Thread]] = []
    made: list[Loom] = []

    def make(**options: object) -> Loom:
        store = tmp_path / f"loom{len(running)}.db"
        config = serve_config_from(serve_table(wire, **options), store=str(store), embedder="none")  # type: ignore[arg-type]
        service = LoomService(config)
        server, thread, url = start_loom(service)
        running.append((server, thread))
        made.append(Loom(url=url, _service=service, wire=wire, store=store))
        return made[-1]

    with allow_model_requests():
        yield make
    for loom in made:
        for client in loom.clients:
            client.close()
    for server, thread in running:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def loom(loom_factory) -> Loom:  # type: ignore[no-untyped-def]
    return loom_factory()  # type: ignore[no-any-return]


NODE = Path(__file__).parent / "node"


def node_with_openai() -> str:
    """The `node` executable, with tests/server/node's packages installed (`npm ci`, once,
    under a file lock: parallel test workers would otherwise install over each other). Not
    there: a skip, or in CI a failure."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        if os.environ.get("CI") == "true":
            pytest.fail("Node.js and npm are needed for the Node client tests")
        pytest.skip("Node.js is not installed")
    with (NODE / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (NODE / "node_modules" / "openai").is_dir():
            subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund"],
                cwd=NODE,
                check=True,
                capture_output=True,
                timeout=600,
            )
    return node

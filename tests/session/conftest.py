"""Buses for the session tests: every bus test runs on each backend that passes it.

`make_bus` is parametrized over ``memory`` (`InProcessEventBus`) and ``redis``
(`RedisStreamsBus` on a real server). Redis is ``$LOOM_TEST_REDIS_URL`` or the loopback one
(started with the machine's command if it is not running). Each test gets its own key prefix
and its keys are deleted afterwards, so tests may run in parallel processes. Without a
reachable Redis the Redis cases are skipped locally and FAIL in CI (``CI=true``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from loomctx.session.bus import EventBus, InProcessEventBus

REDIS_URL = os.environ.get("LOOM_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
# The machine's own command (see the environment notes), used only for the default URL.
_START = [
    "redis-server",
    "--daemonize",
    "yes",
    "--bind",
    "127.0.0.1",
    "--port",
    "6379",
    "--save",
    "",
    "--appendonly",
    "no",
]

MakeBus = Callable[..., Any]
"""Makes a bus of the test's backend (typed loosely: tests read backend counters too)."""


def _ping(url: str) -> bool:
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=1)
    try:
        return bool(client.ping())
    except redis.exceptions.ConnectionError:
        return False
    finally:
        client.close()


def _redis_ready() -> str | None:
    """Why Redis cannot be used, or None when it answers."""
    try:
        import redis  # noqa: F401
    except ImportError:
        return "the `redis` package is not installed (pip install 'loomctx[redis]')"
    if _ping(REDIS_URL):
        return None
    if "LOOM_TEST_REDIS_URL" not in os.environ and shutil.which("redis-server"):
        subprocess.run(_START, check=False, capture_output=True)
        for _ in range(50):
            if _ping(REDIS_URL):
                return None
            time.sleep(0.1)
    return f"no Redis answers at {REDIS_URL}"


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The Redis the tests use; a failure in CI when there is none, a skip elsewhere."""
    problem = _redis_ready()
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs Redis for the Redis bus tests: {problem}")
        pytest.skip(problem)
    return REDIS_URL


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own; every key under it is deleted afterwards."""
    import redis

    prefix = f"loomtest:{uuid.uuid4().hex[:12]}"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture(params=["memory", "redis"])
def backend(request: pytest.FixtureRequest) -> str:
    """The name of the bus backend a parametrized test runs on."""
    return str(request.param)


@pytest.fixture
def make_bus(backend: str, request: pytest.FixtureRequest) -> MakeBus:
    """Makes a bus of `backend` taking `max_pending` and `failures_kept` (and, for Redis,
    any `RedisStreamsBus` option)."""
    if backend == "memory":

        def memory(**options: Any) -> EventBus:
            return InProcessEventBus(**options)

        return memory
    url = request.getfixturevalue("redis_url")
    prefix = request.getfixturevalue("redis_prefix")
    from loomctx.session.bus.redis import RedisStreamsBus

    def redis_bus(**options: Any) -> EventBus:
        options.setdefault("prefix", prefix)
        options.setdefault("block", 0.05)
        return RedisStreamsBus(url, **options)

    return redis_bus

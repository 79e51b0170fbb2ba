"""Shared test configuration: hypothesis profiles, and no real model requests.

`ci` (set by `make test`, which CI runs) runs every property test with at least 500
examples; `dev` is the faster default for local runs. Deadlines are off: these machines are
shared and noisy, and speed is measured in `bench/`, never asserted in tests.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

import loomctx.agent.llm

# Tests never call a real model: providers raise unless a test allows requests explicitly
# (the provider tests do, against a local server speaking the wire protocol).
loomctx.agent.llm.ALLOW_MODEL_REQUESTS = False

settings.register_profile(
    "ci",
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile(
    "dev", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


# --- PostgreSQL (tests/_postgres.py): one server per run, one database per test -------------


@pytest.fixture(scope="session")
def postgres_admin_url() -> str:
    """A PostgreSQL server with pgvector the tests may create databases on."""
    from tests import _postgres

    return _postgres.server()


@pytest.fixture
def postgres_url(postgres_admin_url: str) -> Iterator[str]:
    """The URL of a fresh, empty database of its own, dropped after the test."""
    from tests import _postgres

    yield from _postgres.fresh_database(postgres_admin_url)

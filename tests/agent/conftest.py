"""Fixtures for the agent runtime's tests.

Real model requests are refused in every test here (`ALLOW_MODEL_REQUESTS` is False); the
provider tests re-allow them only for the scripted local server, which `wire` starts.
Credentials and base URLs from the developer's environment are removed, so that no test can
reach a real provider or depend on the machine it runs on.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from loomctx.agent import llm as llm_module
from loomctx.agent.llm import allow_model_requests
from loomctx.agent.providers import _base
from tests.agent._servers import WireServer

_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_ADMIN_KEY",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_PROFILE",
    "ANTHROPIC_CONFIG_DIR",
    "ANTHROPIC_IDENTITY_TOKEN",
    "ANTHROPIC_IDENTITY_TOKEN_FILE",
)


@pytest.fixture(autouse=True)
def _no_model_requests(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    # The Anthropic SDK also looks for credential profiles under the home folder.
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))
    # Stream-level retries wait milliseconds, not seconds.
    monkeypatch.setattr(_base, "INITIAL_BACKOFF", 0.001)
    with allow_model_requests(False):
        yield


@pytest.fixture
def wire() -> Iterator[WireServer]:
    """A scripted OpenAI/Anthropic wire server; the test fails if a reply is left unused or a
    request found none."""
    server = WireServer().start()
    try:
        with allow_model_requests():
            yield server
    finally:
        server.stop()
    assert server.unexpected == 0, "a request arrived with no scripted reply left"
    assert server.remaining == 0, f"{server.remaining} scripted replies were never requested"
    assert llm_module.ALLOW_MODEL_REQUESTS is False

"""`llm_from_env`: `LOOM_MODEL` picks the provider; the SDKs' variables configure it.

Building a provider sends no request; where a test must show that a key or a base URL really
reached the SDK, the provider talks to the scripted local server (`wire`).
"""

from __future__ import annotations

import sys

import pytest

from loomctx.agent.llm import complete
from loomctx.agent.providers import AnthropicLLM, OpenAIChatLLM, llm_from_env
from loomctx.errors import ConfigError, MissingExtraError
from loomctx.messages import Message
from tests.agent._servers import WireServer, anthropic_text, openai_text

FORMS = '"openai/<model>"'


@pytest.mark.parametrize("environ", [{}, {"LOOM_MODEL": ""}, {"LOOM_MODEL": "  "}])
def test_unset_or_empty_means_offline(environ: dict[str, str]) -> None:
    assert llm_from_env({**environ, "OPENAI_API_KEY": "sk-test"}) is None


def test_the_process_environment_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOM_MODEL", raising=False)
    assert llm_from_env() is None
    monkeypatch.setenv("LOOM_MODEL", "openai/gpt-4o-mini")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    llm = llm_from_env()
    assert isinstance(llm, OpenAIChatLLM)
    assert llm.name == "openai:gpt-4o-mini"


@pytest.mark.parametrize("value", ["openai/gpt-4o-mini", "gpt-4o-mini", " gpt-4o-mini\n"])
def test_openai_prefixed_or_bare(value: str) -> None:
    llm = llm_from_env({"LOOM_MODEL": value, "OPENAI_API_KEY": "sk-test"})
    assert isinstance(llm, OpenAIChatLLM)
    assert llm.model == "gpt-4o-mini"
    assert llm.base_url.startswith("https://api.openai.com/v1")


async def test_a_bare_name_goes_to_the_compatible_server_with_the_key(wire: WireServer) -> None:
    wire.script(openai_text("hi"))
    environ = {
        "LOOM_MODEL": "qwen2.5",
        "OPENAI_BASE_URL": wire.openai_url,
        "OPENAI_API_KEY": "sk-local",
    }
    llm = llm_from_env(environ)
    assert isinstance(llm, OpenAIChatLLM)
    async with llm:
        reply = await complete(llm, [Message.user("hello")])
    assert reply.message.content == "hi"
    (request,) = wire.requests
    assert request.body["model"] == "qwen2.5"
    assert request.headers["authorization"] == "Bearer sk-local"


def test_a_local_server_needs_no_key_and_accepts_hub_names() -> None:
    environ = {"LOOM_MODEL": "Qwen/Qwen2.5-7B-Instruct", "OPENAI_BASE_URL": "http://gpu:8000/v1"}
    llm = llm_from_env(environ)
    assert isinstance(llm, OpenAIChatLLM)
    assert llm.model == "Qwen/Qwen2.5-7B-Instruct"
    assert llm.base_url.startswith("http://gpu:8000/v1")


def test_openai_prefix_keeps_the_rest_of_the_name_whole() -> None:
    environ = {"LOOM_MODEL": "openai/meta-llama/Llama-3.1-8B", "OPENAI_BASE_URL": "http://h/v1"}
    llm = llm_from_env(environ)
    assert isinstance(llm, OpenAIChatLLM)
    assert llm.model == "meta-llama/Llama-3.1-8B"


def test_the_mapping_decides_not_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-process")
    with pytest.raises(ConfigError, match="`OPENAI_API_KEY` is not set"):
        llm_from_env({"LOOM_MODEL": "gpt-4o-mini"})


def test_openai_without_a_key_names_the_variables() -> None:
    with pytest.raises(ConfigError) as caught:
        llm_from_env({"LOOM_MODEL": "openai/gpt-4o-mini"})
    message = str(caught.value)
    assert "`LOOM_MODEL` is 'openai/gpt-4o-mini'" in message
    assert "`OPENAI_API_KEY` is not set" in message
    assert "`OPENAI_BASE_URL`" in message


async def test_anthropic_with_its_key_and_base_url(wire: WireServer) -> None:
    wire.script(anthropic_text("hello"))
    environ = {
        "LOOM_MODEL": "anthropic/claude-haiku-4-5",
        "ANTHROPIC_API_KEY": "sk-ant-test",
        "ANTHROPIC_BASE_URL": wire.url,
    }
    llm = llm_from_env(environ)
    assert isinstance(llm, AnthropicLLM)
    assert llm.name == "anthropic:claude-haiku-4-5"
    async with llm:
        reply = await complete(llm, [Message.user("hi")])
    assert reply.message.content == "hello"
    (request,) = wire.requests
    assert request.body["model"] == "claude-haiku-4-5"
    sent = request.headers.get("x-api-key") or request.headers["authorization"]
    assert sent.removeprefix("Bearer ") == "sk-ant-test"
    # Claude is counted with o200k, an estimate: `loomctx chat`'s provider keeps a margin and
    # learnt from this call's reported usage.
    assert llm.calibration is not None
    assert llm.calibration.samples("claude-haiku-4-5") == 1


def test_anthropic_at_the_official_host() -> None:
    llm = llm_from_env({"LOOM_MODEL": "anthropic/claude-haiku-4-5", "ANTHROPIC_API_KEY": "k"})
    assert isinstance(llm, AnthropicLLM)
    assert llm.base_url.startswith("https://api.anthropic.com")


def test_anthropic_gateway_needs_no_key() -> None:
    environ = {"LOOM_MODEL": "anthropic/claude-x", "ANTHROPIC_BASE_URL": "http://gateway:4000"}
    llm = llm_from_env(environ)
    assert isinstance(llm, AnthropicLLM)
    assert llm.base_url.startswith("http://gateway:4000")


@pytest.mark.parametrize("base", [{}, {"ANTHROPIC_BASE_URL": "https://api.anthropic.com"}])
def test_anthropic_without_credentials_names_the_key(base: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="`ANTHROPIC_API_KEY`"):
        llm_from_env({"LOOM_MODEL": "anthropic/claude-haiku-4-5", **base})


def test_anthropic_auth_token_is_the_sdks_other_credential(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "token")
    environ = {
        "LOOM_MODEL": "anthropic/claude-haiku-4-5",
        "ANTHROPIC_BASE_URL": "https://api.anthropic.com",
        "ANTHROPIC_AUTH_TOKEN": "token",
    }
    assert isinstance(llm_from_env(environ), AnthropicLLM)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("openai/", "names no model"),
        ("anthropic/", "names no model"),
        ("/gpt-4o", "names no model"),
        ("gpt-4o/", "names no model"),
        ("openai//gpt-4o", "names no model"),
        ("gpt 4o", "contains whitespace"),
        ("antropic/claude-haiku-4-5", "is no OpenAI model name"),
    ],
)
def test_malformed_values_name_the_variable_and_the_forms(value: str, why: str) -> None:
    with pytest.raises(ConfigError) as caught:
        llm_from_env({"LOOM_MODEL": value, "OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"})
    message = str(caught.value)
    assert message.startswith(f"`LOOM_MODEL` is {value!r}, which {why}")
    assert FORMS in message
    assert '"anthropic/<model>"' in message


@pytest.mark.parametrize(
    ("module", "value"), [("openai", "gpt-4o-mini"), ("anthropic", "anthropic/claude-x")]
)
def test_a_missing_sdk_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, value: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # `import <module>` now fails
    environ = {"LOOM_MODEL": value, "OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"}
    with pytest.raises(MissingExtraError) as caught:
        llm_from_env(environ)
    assert caught.value.extra == module

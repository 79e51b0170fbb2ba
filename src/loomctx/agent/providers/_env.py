"""`llm_from_env`: the model an example or a script should use, chosen by `LOOM_MODEL`.

Examples and the CLI run offline unless the user names a model, so the choice lives in one
variable instead of a flag per program. The providers' own variables (`OPENAI_API_KEY`,
`OPENAI_BASE_URL`, `ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`) are read from the same mapping.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit

from loomctx.agent.llm import LLM
from loomctx.agent.providers.anthropic import AnthropicLLM
from loomctx.agent.providers.openai import NO_KEY, OpenAIChatLLM
from loomctx.errors import ConfigError

__all__ = ["MODEL_ENV", "llm_from_env"]

MODEL_ENV = "LOOM_MODEL"
"""The variable that names the model (see `llm_from_env`)."""

OPENAI_URL = "https://api.openai.com/v1"
ANTHROPIC_HOST = "api.anthropic.com"

_FORMS = (
    '"openai/<model>" (e.g. "openai/gpt-4o-mini"), "anthropic/<model>" (e.g. '
    '"anthropic/claude-haiku-4-5"), or a bare model name for an OpenAI-compatible server '
    '(e.g. "gpt-4o-mini", or "qwen2.5" with `OPENAI_BASE_URL` set)'
)


def _bad(value: str, why: str) -> ConfigError:
    return ConfigError(
        f"`{MODEL_ENV}` is {value!r}, which {why}; set it to {_FORMS}, or unset it to run offline"
    )


def _host(url: str) -> str:
    return urlsplit(url).hostname or ""


def llm_from_env(environ: Mapping[str, str] = os.environ) -> LLM | None:
    """The provider `LOOM_MODEL` names, or None when it is unset or empty (run offline).

    - ``openai/<model>`` or a bare ``<model>``: `OpenAIChatLLM` with `OPENAI_API_KEY` and
      `OPENAI_BASE_URL`. A local server needs no key; a name with a ``/`` (such as
      ``Qwen/Qwen2.5-7B-Instruct`` on vLLM) is a bare name only when a base URL is set.
    - ``anthropic/<model>``: `AnthropicLLM` with `ANTHROPIC_API_KEY` and `ANTHROPIC_BASE_URL`;
      without a key, the SDK looks for its other credentials (`ANTHROPIC_AUTH_TOKEN`, a
      profile) in the process environment, as it always does.

    Raises `ConfigError` naming the variable for a malformed value or a missing key, and
    `MissingExtraError` when the provider's SDK is not installed. Building a provider sends
    no request.
    """
    value = environ.get(MODEL_ENV, "").strip()
    if not value:
        return None
    if any(c.isspace() for c in value):
        raise _bad(value, "contains whitespace")
    provider, slash, model = value.partition("/")
    if not (slash and provider in ("openai", "anthropic")):
        provider, model = "openai", value
    if not model or model.startswith("/") or model.endswith("/"):
        raise _bad(value, "names no model")
    if provider == "anthropic":
        return _anthropic(model, environ)
    base_url = environ.get("OPENAI_BASE_URL") or OPENAI_URL
    official = _host(base_url) == _host(OPENAI_URL)
    if official and "/" in model:
        raise _bad(value, "is no OpenAI model name (the prefix is not `openai/` or `anthropic/`)")
    key = environ.get("OPENAI_API_KEY") or (None if official else NO_KEY)
    if key is None:
        raise ConfigError(
            f"`{MODEL_ENV}` is {value!r}, an OpenAI model, but `OPENAI_API_KEY` is not set; "
            "set it, or set `OPENAI_BASE_URL` to a local OpenAI-compatible server (vLLM, "
            "Ollama, llama.cpp) that needs none"
        )
    return OpenAIChatLLM(model, base_url=base_url, api_key=key)


def _anthropic(model: str, environ: Mapping[str, str]) -> AnthropicLLM:
    base_url = environ.get("ANTHROPIC_BASE_URL") or None
    key = environ.get("ANTHROPIC_API_KEY") or None
    if key is None and base_url is not None:
        if _host(base_url) != ANTHROPIC_HOST:
            key = NO_KEY  # a local gateway or test server that checks none
        elif not environ.get("ANTHROPIC_AUTH_TOKEN"):
            raise ConfigError(
                f"`{MODEL_ENV}` names an Anthropic model, but `ANTHROPIC_API_KEY` is not set; "
                "set it (or `ANTHROPIC_AUTH_TOKEN`), or point `ANTHROPIC_BASE_URL` at a "
                "server that needs none"
            )
    return AnthropicLLM(model, base_url=base_url, api_key=key)

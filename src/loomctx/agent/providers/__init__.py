"""LLM providers over the official SDKs: `OpenAIChatLLM` (OpenAI and every OpenAI-compatible
server) and `AnthropicLLM`. Each SDK is an optional extra (`openai`, `anthropic`), imported
only when a provider is built; a missing one raises `MissingExtraError` naming the extra.
`llm_from_env()` builds the one `LOOM_MODEL` names, or returns None to run offline.
"""

from __future__ import annotations

# Exported from `loomctx` itself; importable here too, for the modules that name the package.
from loomctx.agent.providers._env import llm_from_env as llm_from_env
from loomctx.agent.providers.anthropic import AnthropicLLM as AnthropicLLM
from loomctx.agent.providers.openai import OpenAIChatLLM as OpenAIChatLLM

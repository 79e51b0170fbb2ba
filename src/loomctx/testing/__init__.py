"""Public test doubles and conformance suites.

- `ScriptedLLM` (strict: fails on an unexpected call; `assert_complete()`) and `FunctionLLM`,
  which record every call's messages in `.calls`;
- `OpenAIWireServer`: any `LLM` (a `ScriptedLLM`) behind a local HTTP server speaking OpenAI's
  chat-completions wire protocol, for code that calls a model over HTTP (`loomctx serve`);
- `HashingEmbedder`, a model-free lexical stand-in for an embedder, and `check_embedder`;
- `loomctx.testing.store_conformance.MemoryStoreConformance`, the suite every store must pass
  (imported on its own: it needs pytest).
"""

from loomctx.testing.embedders import HashingEmbedder, check_embedder
from loomctx.testing.llm import FunctionLLM, LLMCall, ScriptedLLM, ScriptExhausted
from loomctx.testing.wire import OpenAIWireServer

__all__ = [
    "FunctionLLM",
    "HashingEmbedder",
    "LLMCall",
    "OpenAIWireServer",
    "ScriptExhausted",
    "ScriptedLLM",
    "check_embedder",
]

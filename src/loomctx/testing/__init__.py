"""Public test doubles and conformance suites.

- `ScriptedLLM` (strict: fails on an unexpected call; `assert_complete()`) and `FunctionLLM`,
  which record every call's messages in `.calls`;
- `HashingEmbedder`, a model-free lexical stand-in for an embedder, and `check_embedder`;
- `loomctx.testing.store_conformance.MemoryStoreConformance`, the suite every store must pass
  (imported on its own: it needs pytest).
"""

from loomctx.testing.embedders import HashingEmbedder, check_embedder
from loomctx.testing.llm import FunctionLLM, LLMCall, ScriptedLLM, ScriptExhausted

__all__ = [
    "FunctionLLM",
    "HashingEmbedder",
    "LLMCall",
    "ScriptExhausted",
    "ScriptedLLM",
    "check_embedder",
]

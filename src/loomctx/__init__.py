"""Loom: the best context window that fits an exact token budget, before every LLM call.

The top level holds what a user starts from: the agent and its tools, the LLM clients, the
message model, memory, knowledge bases, sessions, the orchestrator and its report, the
settings values, the store, and the errors worth catching. Everything else has one home in a
sub-namespace, each with its own ``__all__`` (see docs/api.md):

| namespace | what lives there |
|---|---|
| `loomctx.agent` | the LLM stream's chunks, tool runs, the per-turn retrievers |
| `loomctx.context` | budgets, blocks, collecting and compacting, the report's parts, billing |
| `loomctx.context.sources` | the built-in context sources |
| `loomctx.memory` | memory's parts: hits, tiers, summaries, the background embedder |
| `loomctx.knowledge` | knowledge-base values, chunking, loaders |
| `loomctx.retrieval` | query rewriting, recall, reranking and its signals |
| `loomctx.session` / `loomctx.session.bus` | session state, saved windows / the event bus |
| `loomctx.stores` | the storage contract |
| `loomctx.embeddings`, `loomctx.tokens` | embedders, token counters |
| `loomctx.messages`, `loomctx.errors` | the whole message model, the whole error tree |
| `loomctx.testing` | strict fakes for tests |
"""

from loomctx.agent.events import AgentEvent, AgentEventType
from loomctx.agent.executor import Agent
from loomctx.agent.llm import LLM, LLMOptions
from loomctx.agent.providers import AnthropicLLM, OpenAIChatLLM, llm_from_env
from loomctx.agent.settings import AgentLoop, AgentSources, AgentWindow
from loomctx.agent.tools import Tool, ToolContext, ToolResult, tool
from loomctx.context.orchestrator import ContextOrchestrator, ContextWindow
from loomctx.context.report import ContextReport
from loomctx.embeddings import Embedder, default_embedder
from loomctx.errors import (
    BudgetExceededError,
    ConfigError,
    LoomError,
    MessageFormatError,
    MissingExtraError,
    ProviderError,
    StoreError,
    ToolError,
)
from loomctx.knowledge import KnowledgeBase
from loomctx.memory.core import LoomMemory
from loomctx.memory.plain import Recall
from loomctx.memory.settings import MemoryEmbedding, MemoryRanking, MemoryTiers
from loomctx.memory.task import Task, TaskStatus
from loomctx.messages import Message, ToolCall, from_anthropic, from_openai, to_anthropic, to_openai
from loomctx.retrieval.settings import RetrievalSettings
from loomctx.session.controller import ContextController
from loomctx.session.options import SessionOptions
from loomctx.session.session import Session
from loomctx.stores import open_store
from loomctx.stores.sqlite import SQLiteStore
from loomctx.tokens import TiktokenCounter, TokenCounter, counter_for_model

__all__ = [
    "LLM",
    "Agent",
    "AgentEvent",
    "AgentEventType",
    "AgentLoop",
    "AgentSources",
    "AgentWindow",
    "AnthropicLLM",
    "BudgetExceededError",
    "ConfigError",
    "ContextController",
    "ContextOrchestrator",
    "ContextReport",
    "ContextWindow",
    "Embedder",
    "KnowledgeBase",
    "LLMOptions",
    "LoomError",
    "LoomMemory",
    "MemoryEmbedding",
    "MemoryRanking",
    "MemoryTiers",
    "Message",
    "MessageFormatError",
    "MissingExtraError",
    "OpenAIChatLLM",
    "ProviderError",
    "Recall",
    "RetrievalSettings",
    "SQLiteStore",
    "Session",
    "SessionOptions",
    "StoreError",
    "Task",
    "TaskStatus",
    "TiktokenCounter",
    "TokenCounter",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "counter_for_model",
    "default_embedder",
    "from_anthropic",
    "from_openai",
    "llm_from_env",
    "open_store",
    "to_anthropic",
    "to_openai",
    "tool",
]

"""The public API: the names `loomctx` exports are pinned, documented and importable (ruff's
RUF022 keeps `__all__` sorted)."""

from __future__ import annotations

import inspect

import loomctx

EXPECTED = [
    "LLM",
    "AdaptiveBudgetManager",
    "Agent",
    "AgentEvent",
    "AgentEventType",
    "AgentOutputSource",
    "AnthropicLLM",
    "BackgroundEmbedder",
    "BaseContextRetriever",
    "BlockReport",
    "BudgetExceededError",
    "BudgetManager",
    "BuildContext",
    "BusClosedError",
    "BusLoopError",
    "CachePolicy",
    "CallableCounter",
    "CompactionNote",
    "Completed",
    "ComponentPriority",
    "ConfigError",
    "ConflictError",
    "ContentLengthSignal",
    "ContextAssembler",
    "ContextBlock",
    "ContextBuilder",
    "ContextCollector",
    "ContextCompactor",
    "ContextComponent",
    "ContextController",
    "ContextOrchestrator",
    "ContextReport",
    "ContextRetriever",
    "ContextSource",
    "ContextWindow",
    "Document",
    "Embedder",
    "EmbeddingError",
    "Event",
    "EventBus",
    "ExecutionContext",
    "ExtractiveSummarizer",
    "HeuristicCounter",
    "HistorySource",
    "HuggingFaceCounter",
    "InProcessEventBus",
    "IngestLimitError",
    "IngestProgress",
    "IngestSummary",
    "InheritedSource",
    "KnowledgeBase",
    "KnowledgeBaseProvider",
    "KnowledgeDocument",
    "KnowledgeHit",
    "KnowledgeRetriever",
    "L1RecentSource",
    "L2ImportantSource",
    "L4Persister",
    "L4SemanticSource",
    "LLMChunk",
    "LLMOptions",
    "LLMResponse",
    "LLMSummarizer",
    "LayoutState",
    "LoomError",
    "LoomMemory",
    "MemoryHit",
    "MemoryRetriever",
    "MemoryStore",
    "MemoryTier",
    "Message",
    "MessageFormatError",
    "MessageUnit",
    "MissingExtraError",
    "MultilingualE5Embedder",
    "OpenAIChatLLM",
    "OpenAIEmbedder",
    "OriginDiversitySignal",
    "PromptSource",
    "ProviderError",
    "QuarantinedRecord",
    "QueryOverlapSignal",
    "QueryRewriter",
    "Record",
    "Reranker",
    "RetrievalInjector",
    "SQLiteStore",
    "SentenceTransformerEmbedder",
    "Session",
    "SessionOptions",
    "SessionState",
    "SharedPoolSource",
    "Signal",
    "Skill",
    "SkillSource",
    "SkippedFile",
    "SourceReport",
    "StoreError",
    "Summarizer",
    "Task",
    "TaskStatus",
    "TaskSummary",
    "TextDelta",
    "TiktokenCounter",
    "TokenBudget",
    "TokenCounter",
    "TokenizerError",
    "Tool",
    "ToolCall",
    "ToolCallDelta",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "ToolSource",
    "UnifiedRetrievalSource",
    "UnifiedRetriever",
    "Usage",
    "UserInputSource",
    "VectorScoreSignal",
    "complete",
    "counter_for_model",
    "default_embedder",
    "encoding_for_model",
    "flatten_units",
    "from_anthropic",
    "from_openai",
    "llm_from_env",
    "load_skills",
    "open_bus",
    "result_reader",
    "run_tool_calls",
    "split_units",
    "tasks_from_messages",
    "to_anthropic",
    "to_openai",
    "tool",
]


def test_all_is_pinned() -> None:
    assert loomctx.__all__ == EXPECTED


def test_every_public_name_exists_and_is_documented() -> None:
    for name in loomctx.__all__:
        obj = getattr(loomctx, name)
        assert inspect.getdoc(obj), f"`loomctx.{name}` has no docstring"


def test_nothing_public_is_left_unexported() -> None:
    public = {n for n in vars(loomctx) if not n.startswith("_") and n[0].isupper()}
    assert public <= set(loomctx.__all__)


def test_the_package_ships_its_types() -> None:
    """`py.typed` (PEP 561): users' type checkers read Loom's annotations."""
    from importlib.resources import files

    assert files("loomctx").joinpath("py.typed").is_file()

"""The public API: the names `loom` exports are pinned, documented and importable (ruff's
RUF022 keeps `__all__` sorted)."""

from __future__ import annotations

import inspect

import loom

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
    "CallableCounter",
    "Completed",
    "ComponentPriority",
    "ConfigError",
    "ContextAssembler",
    "ContextBlock",
    "ContextBuilder",
    "ContextCollector",
    "ContextCompactor",
    "ContextComponent",
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
    "InheritedSource",
    "L1RecentSource",
    "L2ImportantSource",
    "L4SemanticSource",
    "LLMChunk",
    "LLMOptions",
    "LLMResponse",
    "LLMSummarizer",
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
    "PromptSource",
    "ProviderError",
    "Record",
    "SQLiteStore",
    "SentenceTransformerEmbedder",
    "SharedPoolSource",
    "Skill",
    "SkillSource",
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
    "Usage",
    "UserInputSource",
    "complete",
    "counter_for_model",
    "default_embedder",
    "encoding_for_model",
    "flatten_units",
    "from_anthropic",
    "from_openai",
    "load_skills",
    "run_tool_calls",
    "split_units",
    "tasks_from_messages",
    "to_anthropic",
    "to_openai",
    "tool",
]


def test_all_is_pinned() -> None:
    assert loom.__all__ == EXPECTED


def test_every_public_name_exists_and_is_documented() -> None:
    for name in loom.__all__:
        obj = getattr(loom, name)
        assert inspect.getdoc(obj), f"`loom.{name}` has no docstring"


def test_nothing_public_is_left_unexported() -> None:
    public = {n for n in vars(loom) if not n.startswith("_") and n[0].isupper()}
    assert public <= set(loom.__all__)

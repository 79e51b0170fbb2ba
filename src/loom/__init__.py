"""Loom: the best context window that fits an exact token budget, before every LLM call."""

from loom.context.assembler import ComponentPriority, ContextAssembler, ContextComponent
from loom.context.block import BuildContext, ContextBlock, ContextSource, TokenBudget
from loom.context.budget import AdaptiveBudgetManager, BudgetManager
from loom.context.collector import ContextCollector
from loom.context.compactor import ContextCompactor
from loom.context.orchestrator import ContextOrchestrator, ContextWindow
from loom.context.report import BlockReport, ContextReport, SourceReport
from loom.context.sources import (
    AgentOutputSource,
    HistorySource,
    InheritedSource,
    L1RecentSource,
    L2ImportantSource,
    L4SemanticSource,
    PromptSource,
    SharedPoolSource,
    Skill,
    SkillSource,
    ToolSource,
    UserInputSource,
    load_skills,
)
from loom.errors import (
    BudgetExceededError,
    ConfigError,
    LoomError,
    MessageFormatError,
    MissingExtraError,
    ProviderError,
    StoreError,
    TokenizerError,
    ToolError,
)
from loom.memory.context_builder import ContextBuilder, ExecutionContext
from loom.memory.core import LoomMemory, MemoryHit
from loom.memory.summarizers import ExtractiveSummarizer, LLMSummarizer, Summarizer
from loom.memory.task import MemoryTier, Task, TaskStatus, TaskSummary, tasks_from_messages
from loom.messages import (
    Message,
    MessageUnit,
    ToolCall,
    flatten_units,
    from_anthropic,
    from_openai,
    split_units,
    to_anthropic,
    to_openai,
)
from loom.stores.base import MemoryStore, Record
from loom.stores.sqlite import SQLiteStore
from loom.tokens import (
    CallableCounter,
    HeuristicCounter,
    HuggingFaceCounter,
    TiktokenCounter,
    TokenCounter,
    counter_for_model,
    encoding_for_model,
)

__all__ = [
    "AdaptiveBudgetManager",
    "AgentOutputSource",
    "BlockReport",
    "BudgetExceededError",
    "BudgetManager",
    "BuildContext",
    "CallableCounter",
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
    "ContextSource",
    "ContextWindow",
    "ExecutionContext",
    "ExtractiveSummarizer",
    "HeuristicCounter",
    "HistorySource",
    "HuggingFaceCounter",
    "InheritedSource",
    "L1RecentSource",
    "L2ImportantSource",
    "L4SemanticSource",
    "LLMSummarizer",
    "LoomError",
    "LoomMemory",
    "MemoryHit",
    "MemoryStore",
    "MemoryTier",
    "Message",
    "MessageFormatError",
    "MessageUnit",
    "MissingExtraError",
    "PromptSource",
    "ProviderError",
    "Record",
    "SQLiteStore",
    "SharedPoolSource",
    "Skill",
    "SkillSource",
    "SourceReport",
    "StoreError",
    "Summarizer",
    "Task",
    "TaskStatus",
    "TaskSummary",
    "TiktokenCounter",
    "TokenBudget",
    "TokenCounter",
    "TokenizerError",
    "ToolCall",
    "ToolError",
    "ToolSource",
    "UserInputSource",
    "counter_for_model",
    "encoding_for_model",
    "flatten_units",
    "from_anthropic",
    "from_openai",
    "load_skills",
    "split_units",
    "tasks_from_messages",
    "to_anthropic",
    "to_openai",
]

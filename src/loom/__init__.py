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
    PromptSource,
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
from loom.memory.summarizers import ExtractiveSummarizer, LLMSummarizer, Summarizer
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
    "ContextCollector",
    "ContextCompactor",
    "ContextComponent",
    "ContextOrchestrator",
    "ContextReport",
    "ContextSource",
    "ContextWindow",
    "ExtractiveSummarizer",
    "HeuristicCounter",
    "HistorySource",
    "HuggingFaceCounter",
    "LLMSummarizer",
    "LoomError",
    "Message",
    "MessageFormatError",
    "MessageUnit",
    "MissingExtraError",
    "PromptSource",
    "ProviderError",
    "Skill",
    "SkillSource",
    "SourceReport",
    "StoreError",
    "Summarizer",
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
    "to_anthropic",
    "to_openai",
]

"""The public API: a curated top level, every other name in one sub-namespace, all of it pinned,
documented and importable from where docs/api.md says (ruff's RUF022 keeps each `__all__`
sorted).

One home per name: the root (`loomctx`) holds what a user starts from; every other public name
is exported by exactly one sub-package's `__init__`. The one exception is deliberate: the
error tree (`loomctx.errors`) and the message model (`loomctx.messages`) are modules that list
everything they define, and the root re-exports the few a user starts from (the errors worth
catching, `Message`, `ToolCall` and the wire converters). A name may still be importable from
elsewhere for compatibility; it is exported (in an `__all__`, and in the docs) once.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from itertools import combinations
from pathlib import Path

import loomctx
from loomctx.errors import LoomError

API_DOC = Path(__file__).parents[1] / "docs" / "api.md"
MODULE_NAMESPACES = ("loomctx.errors", "loomctx.messages")

ROOT = [
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

NAMESPACES = {
    "loomctx.agent": [
        "BaseContextRetriever",
        "Completed",
        "ContextRetriever",
        "Document",
        "KnowledgeRetriever",
        "LLMChunk",
        "LLMResponse",
        "MemoryRetriever",
        "TextDelta",
        "ToolCallDelta",
        "UnifiedRetriever",
        "Usage",
        "complete",
        "result_reader",
        "run_tool_calls",
    ],
    "loomctx.cli": [
        "app",
        "main",
    ],
    "loomctx.context": [
        "AdaptiveBudgetManager",
        "BlockReport",
        "BudgetManager",
        "BuildContext",
        "CachePolicy",
        "CachePrediction",
        "CachePricing",
        "CompactionNote",
        "ComponentPriority",
        "ContextAssembler",
        "ContextBlock",
        "ContextCollector",
        "ContextCompactor",
        "ContextComponent",
        "ContextSource",
        "LayoutState",
        "ReportedUsage",
        "SourceReport",
        "TokenBudget",
        "pricing_for",
    ],
    "loomctx.context.sources": [
        "AgentOutputSource",
        "HistorySource",
        "InheritedSource",
        "L1RecentSource",
        "L2ImportantSource",
        "L4SemanticSource",
        "PromptSource",
        "RetrievalInjector",
        "SharedPoolSource",
        "Skill",
        "SkillSource",
        "ToolSource",
        "TurnSource",
        "UnifiedRetrievalSource",
        "UserInputSource",
        "load_skills",
    ],
    "loomctx.embeddings": [
        "OPENAI_DIMENSIONS",
        "BaseEmbedder",
        "CacheInfo",
        "EmbedKind",
        "Lazy",
        "MultilingualE5Embedder",
        "OpenAIEmbedder",
        "SentenceTransformerEmbedder",
        "StaticEmbedder",
        "default_static_embedder",
    ],
    "loomctx.errors": [
        "BudgetExceededError",
        "BusClosedError",
        "BusLoopError",
        "ConfigError",
        "ConflictError",
        "EmbeddingError",
        "IngestLimitError",
        "LoomError",
        "MessageFormatError",
        "MissingExtraError",
        "Oversize",
        "ProviderError",
        "StoreClosedError",
        "StoreError",
        "TokenizerError",
        "ToolError",
    ],
    "loomctx.evaluation.perf": [
        "FULL_SIZES",
        "QUICK_SIZES",
        "run_perf",
    ],
    "loomctx.integrations": [
        "DEFAULT_WINDOW",
        "LoomWindow",
        "Marks",
    ],
    "loomctx.knowledge": [
        "DEFAULT_MAX_FILES",
        "DEFAULT_MAX_FILE_BYTES",
        "DEFAULT_MAX_TOTAL_BYTES",
        "Chunk",
        "IngestProgress",
        "IngestProgressKind",
        "IngestStatus",
        "IngestSummary",
        "KnowledgeBaseProvider",
        "KnowledgeDocument",
        "KnowledgeHit",
        "Loader",
        "SkipKind",
        "SkippedFile",
        "chunk_text",
        "read_text",
    ],
    "loomctx.memory": [
        "BackgroundEmbedder",
        "ContextBuilder",
        "ExecutionContext",
        "ExtractiveSummarizer",
        "LLMSummarizer",
        "MemoryHit",
        "MemoryTier",
        "QuarantinedRecord",
        "Recalled",
        "Summarizer",
        "TaskSummary",
        "tasks_from_messages",
    ],
    "loomctx.messages": [
        "CACHE_CONTROL",
        "MAX_ARGUMENT_DEPTH",
        "AudioPart",
        "CacheMarks",
        "FilePart",
        "ImagePart",
        "Message",
        "MessageUnit",
        "Part",
        "Role",
        "TextPart",
        "ToolCall",
        "flatten_units",
        "from_anthropic",
        "from_openai",
        "mark_anthropic_cache",
        "parse_arguments",
        "responses_input_to_openai",
        "split_units",
        "to_anthropic",
        "to_anthropic_tools",
        "to_openai",
        "to_openai_tools",
        "tool_parts_note",
        "tool_spec",
        "valid_text",
    ],
    "loomctx.retrieval": [
        "MEMORY_ORIGIN",
        "ContentLengthSignal",
        "Evidence",
        "OriginDiversitySignal",
        "QueryOverlapSignal",
        "QueryRewriter",
        "RelevanceSignal",
        "Reranker",
        "RoleSignal",
        "SessionSignal",
        "Signal",
        "SpeakerSignal",
        "TimeSignal",
        "dedupe",
        "default_signals",
        "fingerprint",
        "recall",
        "recall_knowledge",
        "recall_memory",
        "retrieve",
        "spread_sessions",
    ],
    "loomctx.search": [
        "Ranking",
        "best_first",
        "first_hits",
        "first_scores",
        "min_max",
        "neighbour_boost",
        "ranking",
        "relative",
        "weighted",
    ],
    "loomctx.server": [
        "REPORT_HEADER",
        "SESSION_HEADER",
        "ChatProxy",
        "LoomService",
        "ModelConfig",
        "RequestError",
        "ServeConfig",
        "TenantConfig",
        "create_app",
        "fixed_resolver",
        "hash_key",
        "load_serve_config",
        "make_mcp_server",
    ],
    "loomctx.session": [
        "L4Persister",
        "SavedWindow",
        "SessionState",
        "WindowLog",
    ],
    "loomctx.session.bus": [
        "HANDLER_FAILED",
        "BusStats",
        "Event",
        "EventBus",
        "Handler",
        "HandlerFailure",
        "InProcessEventBus",
        "InProcessSubscription",
        "Subscription",
        "SubscriptionStats",
        "open_bus",
    ],
    "loomctx.stores": [
        "STORE_SCHEMES",
        "MemoryStore",
        "Record",
        "redact_url",
    ],
    "loomctx.testing": [
        "FunctionLLM",
        "HashingEmbedder",
        "LLMCall",
        "OpenAIWireServer",
        "ScriptExhausted",
        "ScriptedLLM",
        "check_embedder",
    ],
    "loomctx.tokens": [
        "BaseTokenCounter",
        "CallableCounter",
        "HeuristicCounter",
        "HuggingFaceCounter",
        "UsageCalibration",
        "encoding_for_model",
        "render_tool_definitions",
    ],
}


def _package_namespaces() -> dict[str, list[str]]:
    """Every package of `loomctx` whose `__init__` has an `__all__`."""
    found: dict[str, list[str]] = {}
    for info in pkgutil.walk_packages(loomctx.__path__, "loomctx."):
        if info.ispkg:
            module = importlib.import_module(info.name)
            if hasattr(module, "__all__"):
                found[info.name] = list(module.__all__)
    return found


def test_the_top_level_is_pinned_and_curated() -> None:
    assert loomctx.__all__ == ROOT
    assert len(ROOT) <= 60, "the top level is for the names a user starts from"


def test_every_namespace_is_pinned() -> None:
    """A new namespace (a package with an `__all__`) is added here, and so decided on."""
    current = _package_namespaces()
    for name in MODULE_NAMESPACES:
        current[name] = list(importlib.import_module(name).__all__)
    assert sorted(current) == sorted(NAMESPACES)
    for name, exported in current.items():
        assert exported == NAMESPACES[name], name


def test_a_name_is_exported_from_one_place() -> None:
    packages = {name: set(NAMESPACES[name]) for name in NAMESPACES if name not in MODULE_NAMESPACES}
    spaces = {"loomctx": set(ROOT), **packages}
    for (a, names_a), (b, names_b) in combinations(spaces.items(), 2):
        assert not names_a & names_b, f"exported by both `{a}` and `{b}`: {names_a & names_b}"
    for module in MODULE_NAMESPACES:
        for name, names in packages.items():
            both = names & set(NAMESPACES[module])
            assert not both, f"`{name}` exports {both}, whose home is `{module}`"
    # The root's share of the module namespaces: re-exports of the same objects.
    for module_name in MODULE_NAMESPACES:
        module = importlib.import_module(module_name)
        for name in set(ROOT) & set(NAMESPACES[module_name]):
            assert getattr(loomctx, name) is getattr(module, name)
    # Every error at the root is one of the tree's.
    errors = {n for n in ROOT if isinstance(getattr(loomctx, n), type)}
    errors = {n for n in errors if issubclass(getattr(loomctx, n), LoomError)}
    assert errors <= set(NAMESPACES["loomctx.errors"])


def test_every_public_name_exists_and_is_documented() -> None:
    for space, names in [("loomctx", ROOT), *NAMESPACES.items()]:
        module = importlib.import_module(space)
        for name in names:
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                assert inspect.getdoc(obj), f"`{space}.{name}` has no docstring"


def test_nothing_public_is_left_unexported() -> None:
    public = {n for n in vars(loomctx) if not n.startswith("_") and n[0].isupper()}
    assert public <= set(loomctx.__all__)


def _documented() -> dict[str, list[str]]:
    """docs/api.md's names by the namespace whose section (a ``## `loomctx...` `` heading) lists
    them, one table row each: ``| `Name` | what it is |``."""
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in API_DOC.read_text(encoding="utf-8").splitlines():
        heading = re.fullmatch(r"## `(loomctx(?:\.\w+)*)`.*", line)
        if heading:
            current = heading.group(1)
            sections.setdefault(current, [])
        elif line.startswith("## "):
            current = None
        row = re.match(r"\| `(\w+)` \|", line)
        if row and current is not None:
            sections[current].append(row.group(1))
    return sections


def test_every_name_in_the_api_reference_imports_from_where_it_says() -> None:
    for space, names in _documented().items():
        module = importlib.import_module(space)
        for name in names:
            assert hasattr(module, name), f"docs/api.md: `{name}` is not in `{space}`"


def test_the_api_reference_lists_each_namespace_exactly() -> None:
    """Each namespace's section lists its `__all__`, each name once (the module namespaces:
    what the root does not re-export)."""
    documented = _documented()
    assert sorted(documented) == sorted(["loomctx", *NAMESPACES])
    for space, names in documented.items():
        assert len(names) == len(set(names)), f"a name twice under `{space}`"
        exported = set(ROOT) if space == "loomctx" else set(NAMESPACES[space])
        if space in MODULE_NAMESPACES:
            exported -= set(ROOT)
        assert sorted(names) == sorted(exported), space


def test_the_package_ships_its_types() -> None:
    """`py.typed` (PEP 561): users' type checkers read Loom's annotations."""
    from importlib.resources import files

    assert files("loomctx").joinpath("py.typed").is_file()

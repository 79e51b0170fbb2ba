"""The agent runtime: LLM providers, tools, events and the recursive turn loop.

`Agent` and its settings values (`AgentWindow`, `AgentSources`, `AgentLoop`), `tool`, the
LLM protocol and its providers are at the top level (`loomctx`); here are the parts a
provider or a custom loop works with: what an LLM stream yields (`LLMChunk`: `TextDelta`,
`ToolCallDelta`, `Usage`, `Completed`) and the whole reply (`LLMResponse`, `complete`),
running tool calls (`run_tool_calls`), the `read_result` tool (`result_reader`), and seed
001's per-turn retrievers (`ContextRetriever` and its implementations).
"""

from loomctx.agent.llm import (
    Completed,
    LLMChunk,
    LLMResponse,
    TextDelta,
    ToolCallDelta,
    Usage,
    complete,
)
from loomctx.agent.reader import result_reader
from loomctx.agent.retriever import (
    BaseContextRetriever,
    ContextRetriever,
    Document,
    KnowledgeRetriever,
    MemoryRetriever,
    UnifiedRetriever,
)
from loomctx.agent.tools import run_tool_calls

__all__ = [
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
]

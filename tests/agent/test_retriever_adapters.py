"""The `ContextRetriever` adapters over knowledge bases and unified retrieval, in the loop."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from loomctx import Agent, AgentSources, KnowledgeBase, LoomMemory, Task, ToolCall, tool
from loomctx.agent.retriever import KnowledgeRetriever, UnifiedRetriever
from loomctx.context.sources.retrieval import UnifiedRetrievalSource
from loomctx.errors import ConfigError
from loomctx.memory.task import USER_MESSAGE
from loomctx.testing import ScriptedLLM

HANDBOOK = {
    "deploy": "# Deploys\n\nProduction deploys run from the `release` branch every Tuesday.",
    "oncall": "# On-call\n\nThe on-call engineer rotates weekly; page them through Opsgenie.",
}
POLICY = {"refunds": "# Refunds\n\nRefunds above 500 EUR need a second approver."}


@pytest.fixture
def kbs() -> Iterator[tuple[KnowledgeBase, KnowledgeBase]]:
    handbook, policy = KnowledgeBase("handbook"), KnowledgeBase("policy")
    for doc_id, text in HANDBOOK.items():
        handbook.add_text(text, document_id=doc_id)
    for doc_id, text in POLICY.items():
        policy.add_text(text, document_id=doc_id)
    yield handbook, policy
    handbook.close()
    policy.close()


async def test_knowledge_retriever_merges_bases_by_score(
    kbs: tuple[KnowledgeBase, KnowledgeBase],
) -> None:
    retriever = KnowledgeRetriever(*kbs)
    docs = await retriever.retrieve_for_query("who approves refunds above 500 EUR?", top_k=2)
    assert docs[0].id == "policy:refunds#0"
    assert "second approver" in docs[0].content
    assert docs[0].metadata["document_id"] == "refunds"
    assert [d.score for d in docs] == sorted((d.score for d in docs), reverse=True)
    assert len(await retriever.retrieve_for_query("deploys on-call refunds", top_k=2)) == 2
    strict = KnowledgeRetriever(*kbs, min_relevance=0.99)
    assert await strict.retrieve_for_query("weather in Paris", top_k=3) == []
    with pytest.raises(ConfigError, match="at least one knowledge base"):
        KnowledgeRetriever()


async def test_unified_retriever_finds_memory_and_knowledge(
    kbs: tuple[KnowledgeBase, KnowledgeBase],
) -> None:
    memory = LoomMemory("u", embedder=None)
    memory.add_task(
        Task(action=USER_MESSAGE, parameters={"content": "Our release branch is frozen today"})
    )
    retriever = UnifiedRetriever(UnifiedRetrievalSource(memory, kbs))
    docs = await retriever.retrieve_for_query("when do release deploys run?", top_k=4)
    origins = {d.metadata["origin"] for d in docs}
    assert {"memory", "knowledge:handbook"} <= origins
    assert docs[0].score >= docs[-1].score
    assert "release" in retriever.format_documents(docs)
    memory.close()


async def test_the_loop_retrieves_what_a_tool_revealed_from_a_knowledge_base(
    kbs: tuple[KnowledgeBase, KnowledgeBase],
) -> None:
    @tool
    def current_incident() -> str:
        """The incident being handled."""
        return "A customer asks for a refund of 900 EUR."

    llm = ScriptedLLM([[ToolCall(id="c1", name="current_incident", arguments={})], "done"])
    agent = Agent(
        llm=llm,
        system_instructions="You help the support team.",
        tools=[current_incident],
        embedder=None,
        sources=AgentSources(retriever=KnowledgeRetriever(*kbs), top_k=1),
    )
    assert await agent.run("What should I do about the current incident?") == "done"
    first, second = ("\n".join(m.content for m in call.messages) for call in llm.calls)
    assert "second approver" not in first
    assert "second approver" in second  # the tool's words brought the policy in
    assert "You help the support team." in second

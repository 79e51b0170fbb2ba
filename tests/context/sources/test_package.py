"""`loomctx.context.sources`: the exported names, and every source implements `ContextSource`."""

from __future__ import annotations

import loomctx.context.sources as sources
from loomctx.context.block import ContextSource
from loomctx.context.sources import (
    AgentOutputSource,
    HistorySource,
    PromptSource,
    Skill,
    SkillSource,
    ToolSource,
    UserInputSource,
)


def test_exports_are_sorted_and_documented() -> None:
    assert sources.__all__ == sorted(sources.__all__)
    assert sources.__all__ == [
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
    ]
    for name in sources.__all__:
        assert getattr(sources, name).__doc__


def test_every_source_is_a_context_source_with_the_default_name_and_priority() -> None:
    skill = Skill(name="s", description="d", instructions="i")
    expected = [
        (PromptSource("x"), "system_prompt", 1.0),
        (UserInputSource(), "user_input", 1.0),
        (ToolSource([]), "tools", 0.9),
        (SkillSource([skill]), "skills", 0.7),
        (AgentOutputSource(), "agent_output", 0.5),
        (HistorySource(), "history", 0.8),
    ]
    for source, name, priority in expected:
        assert isinstance(source, ContextSource)
        assert (source.name, source.priority) == (name, priority)

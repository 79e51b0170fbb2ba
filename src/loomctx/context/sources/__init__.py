"""The built-in context sources: instructions, the user's turn, tools, skills, earlier agent
outputs, a plain history, the run's own exchange, and the memory tiers (L1 recent, L2
important, L4 semantic, a parent's inherited memory, a shared pool), and unified retrieval
over memory and knowledge bases.

Each implements `loomctx.context.block.ContextSource`: a `name`, a `priority` and
``async collect(query, budget, *, ctx)``, returning blocks in its order of preference with
token counts measured by ``ctx.counter``, never more than ``budget.ceiling`` tokens in all
(except the pinned blocks of `PromptSource` and `UserInputSource`, which the orchestrator must
place whole or report).
"""

from __future__ import annotations

from loomctx.context.sources.agent_output import AgentOutputSource
from loomctx.context.sources.history import HistorySource
from loomctx.context.sources.memory import (
    InheritedSource,
    L1RecentSource,
    L2ImportantSource,
    L4SemanticSource,
    SharedPoolSource,
)
from loomctx.context.sources.prompt import PromptSource, UserInputSource
from loomctx.context.sources.retrieval import RetrievalInjector, UnifiedRetrievalSource
from loomctx.context.sources.skills import Skill, SkillSource, load_skills
from loomctx.context.sources.tools import ToolSource
from loomctx.context.sources.turn import TurnSource

__all__ = [
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

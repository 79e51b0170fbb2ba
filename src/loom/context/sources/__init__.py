"""The context sources that need no memory tier: instructions, the user's turn, tools,
skills, earlier agent outputs and a plain history.

Each implements `loom.context.block.ContextSource`: a `name`, a `priority` and
``async collect(query, budget, *, ctx)``, returning blocks in its order of preference with
token counts measured by ``ctx.counter``, never more than ``budget.ceiling`` tokens in all
(except the pinned blocks of `PromptSource` and `UserInputSource`, which the orchestrator must
place whole or report).
"""

from __future__ import annotations

from loom.context.sources.agent_output import AgentOutputSource
from loom.context.sources.history import HistorySource
from loom.context.sources.prompt import PromptSource, UserInputSource
from loom.context.sources.skills import Skill, SkillSource, load_skills
from loom.context.sources.tools import ToolSource

__all__ = [
    "AgentOutputSource",
    "HistorySource",
    "PromptSource",
    "Skill",
    "SkillSource",
    "ToolSource",
    "UserInputSource",
    "load_skills",
]

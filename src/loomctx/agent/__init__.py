"""The agent runtime: LLM providers, tools, events and the recursive turn loop.

`Agent` is made from what it has (an LLM, instructions, tools, memory, knowledge bases) and
tuned with three settings values, importable from here: `AgentWindow`, `AgentSources` and
`AgentLoop` (`loomctx.agent.settings`)."""

from loomctx.agent.executor import Agent
from loomctx.agent.settings import AgentLoop, AgentSources, AgentWindow

__all__ = ["Agent", "AgentLoop", "AgentSources", "AgentWindow"]

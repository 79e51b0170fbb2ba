"""Loom as the memory inside agent frameworks, without a proxy: one small adapter each.

- `loomctx.integrations.openai_agents.LoomSession`: the OpenAI Agents SDK's `Session`
  (extra `agents`);
- `loomctx.integrations.pydantic_ai.LoomHistory`: a pydantic-ai history processor
  (extra `pydantic-ai`);
- `loomctx.integrations.langgraph.LoomPreModelHook`: LangGraph's `create_react_agent`
  pre-model hook (extra `langgraph`).

Each imports its framework when it is made, with `MissingExtraError` naming the extra when it
is not installed, and builds its windows with `LoomWindow`, by the one window recipe an
`Agent` and the proxy use.
"""

from loomctx.integrations._window import DEFAULT_WINDOW, LoomWindow, Marks

__all__ = ["DEFAULT_WINDOW", "LoomWindow", "Marks"]

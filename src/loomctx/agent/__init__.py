"""The agent runtime: LLM providers, tools, events and the recursive turn loop."""

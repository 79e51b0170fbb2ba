"""Sessions and what connects them: `Session` (one conversation's tasks, memory and window),
the `ContextController` over many sessions of one agent, the event bus that carries their
events between workers (in process or on Redis), and the saved windows of every model call.
"""

"""Sessions, the multi-session ContextController, and the EventBus (seed 003)."""

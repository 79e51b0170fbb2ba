"""Sessions and what connects them: `Session` (one conversation's tasks, memory and window),
the `ContextController` over many sessions of one agent, the event bus that carries their
events between workers (in process or on Redis: `loomctx.session.bus`), and the saved windows
of every model call.

`Session`, `SessionOptions` and `ContextController` are at the top level (`loomctx`).
"""

from loomctx.session.persist import L4Persister
from loomctx.session.session import SessionState
from loomctx.session.windows import SavedWindow, WindowLog

__all__ = ["L4Persister", "SavedWindow", "SessionState", "WindowLog"]

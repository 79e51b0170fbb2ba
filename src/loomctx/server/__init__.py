"""`loomctx serve`: Loom for any agent, in any language.

One ASGI application (`create_app`) with three faces over one `LoomService` (one store, the
tenants' sessions, memories and knowledge bases, one configuration):

- an OpenAI-compatible proxy (``POST /v1/chat/completions``, ``GET /v1/models``) that records
  each turn in the session's memory and sends the window Loom builds within the model's budget;
- a small REST API (sessions, memory, reports, knowledge bases; ``/openapi.json``);
- an MCP server (``/mcp/{session}`` over streamable HTTP, or stdio with `loomctx mcp`).

Needs the `serve` extra: ``pip install 'loomctx[serve]'``.
"""

from __future__ import annotations

from loomctx.server._app import REPORT_HEADER, SESSION_HEADER, create_app
from loomctx.server._config import (
    ModelConfig,
    ServeConfig,
    TenantConfig,
    hash_key,
    load_serve_config,
)
from loomctx.server._errors import RequestError
from loomctx.server._mcp import fixed_resolver, make_mcp_server
from loomctx.server._proxy import ChatProxy
from loomctx.server._service import LoomService

__all__ = [
    "REPORT_HEADER",
    "SESSION_HEADER",
    "ChatProxy",
    "LoomService",
    "ModelConfig",
    "RequestError",
    "ServeConfig",
    "TenantConfig",
    "create_app",
    "fixed_resolver",
    "hash_key",
    "load_serve_config",
    "make_mcp_server",
]

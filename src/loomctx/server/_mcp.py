"""The MCP face: Loom's memory and windows for any MCP client (the official `mcp` SDK).

Tools:

- `build_context(query, model, window)`: the window Loom would send for `query` now (the
  session's memory and the tenant's knowledge bases, within `window` tokens, or the model's
  configured window), as OpenAI messages, with its report and the report's id;
- `remember(content)`: record a fact in the session's memory;
- `recall(query, limit)`: what the session's memory holds about `query`, best first;
- `forget(task_id)`: delete one task of the session's memory.

Resources: ``loom://knowledge/{name}``, a knowledge base of the tenant (its documents); over
stdio each of the tenant's knowledge bases is also listed by ``resources/list``.

Over streamable HTTP the server is mounted at ``/mcp/{session}``: the session (the memory
namespace) is in the path, the tenant comes from the ``Authorization: Bearer`` key, as for the
proxy. The server is stateless (no MCP session, nothing to push): a ``GET`` (an event stream
for server messages) or ``DELETE`` (ending an MCP session) is answered 405, as the
specification allows, and only ``POST`` carries messages. Over stdio (`loomctx mcp`) both
are fixed when the server starts: a local process serves its own user, who needs no key.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from importlib.metadata import version
from typing import Any, ParamSpec

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError

from loomctx.errors import LoomError
from loomctx.server._config import TenantConfig
from loomctx.server._proxy import ChatProxy
from loomctx.server._service import check_session_id

__all__ = ["SESSION_SCOPE_KEY", "Resolver", "http_resolver", "make_mcp_server"]

P = ParamSpec("P")

SESSION_SCOPE_KEY = "loom.session"
"""Where the app puts the session it read from the path (``/mcp/{session}``) in the ASGI
scope it hands to the MCP transport (which serves one path, ``/``)."""


def _reported(
    kind: type[ToolError | ResourceError],
) -> Callable[[Callable[P, Awaitable[str]]], Callable[P, Awaitable[str]]]:
    """A Loom error inside a tool (or resource) as an MCP tool (resource) error, whose
    message the client sees: it says what was wrong."""

    def wrap(fn: Callable[P, Awaitable[str]]) -> Callable[P, Awaitable[str]]:
        @functools.wraps(fn)
        async def run(*args: P.args, **kwargs: P.kwargs) -> str:
            try:
                return await fn(*args, **kwargs)
            except LoomError as exc:
                raise kind(str(exc)) from None

        return run

    return wrap


Resolver = Callable[[Context[Any, Any]], tuple[TenantConfig, str]]
"""Who an MCP request is for: the tenant and the session."""


def http_resolver(proxy: ChatProxy) -> Resolver:
    """Tenant from the request's bearer key, session from its path (``/mcp/{session}``)."""

    def resolve(ctx: Context[Any, Any]) -> tuple[TenantConfig, str]:
        request = ctx.request_context.request
        headers = getattr(request, "headers", None) or {}
        tenant = proxy.service.authenticate(headers.get("authorization"))
        scope = getattr(request, "scope", None) or {}
        return tenant, check_session_id(scope.get(SESSION_SCOPE_KEY))

    return resolve


def fixed_resolver(tenant: TenantConfig, session: str) -> Resolver:
    """One tenant and session for every request (stdio)."""
    check_session_id(session)
    return lambda ctx: (tenant, session)


def make_mcp_server(
    proxy: ChatProxy, resolve: Resolver, *, static: TenantConfig | None = None
) -> MCPServer:
    """The MCP server over `proxy`'s service. With a `static` tenant (stdio), its knowledge
    bases are also listed as resources (``resources/list``); over HTTP, where the tenant is
    known per request only, they are read through the ``loom://knowledge/{name}`` template."""
    service = proxy.service
    server = MCPServer(
        "loom",
        version=version("loomctx"),  # the `serverInfo` a client reads
        # The SDK configures the root logger at this level (if nothing else did): INFO
        # would log every upstream HTTP request; the server logs its own requests itself.
        log_level="WARNING",
        instructions=(
            "Loom keeps this session's memory and builds context windows within a token "
            "budget. `remember` facts, `recall` them, `build_context` for a query."
        ),
    )

    @server.tool()
    @_reported(ToolError)
    async def build_context(
        query: str, ctx: Context[Any, Any], model: str = "", window: int = 0
    ) -> str:
        """The context window Loom builds for `query` from this session's memory and the
        knowledge bases (OpenAI messages), with its report. `model`: a configured model (its
        window is the budget); `window`: a budget in tokens instead (>= 256)."""
        tenant, session = resolve(ctx)
        built = await proxy.build_only(
            tenant, session, query, model=model or None, window=window or None
        )
        return json.dumps(built, ensure_ascii=False)

    @server.tool()
    @_reported(ToolError)
    async def remember(content: str, ctx: Context[Any, Any]) -> str:
        """Record `content` (a fact, a preference) in this session's memory; returns its id."""
        tenant, session = resolve(ctx)
        return json.dumps({"task_id": service.remember(tenant.name, session, content)})

    @server.tool()
    @_reported(ToolError)
    async def recall(query: str, ctx: Context[Any, Any], limit: int = 5) -> str:
        """What this session's memory holds about `query`, best first."""
        tenant, session = resolve(ctx)
        if not service.check_access(tenant.name, session):
            return "[]"
        return json.dumps(service.recall(tenant.name, session, query, limit), ensure_ascii=False)

    @server.tool()
    @_reported(ToolError)
    async def forget(task_id: str, ctx: Context[Any, Any]) -> str:
        """Delete one task (by the id `remember` or `recall` gave) from this session's memory."""
        tenant, session = resolve(ctx)
        if not service.check_access(tenant.name, session):
            return json.dumps({"forgotten": False})
        return json.dumps({"forgotten": service.forget(tenant.name, session, task_id)})

    def documents(tenant: TenantConfig, name: str) -> str:
        kb = service.knowledge(tenant, name)  # a tenant's configured bases only
        docs = [asdict(d) for d in kb.documents()]
        return json.dumps({"name": name, "documents": docs}, default=str)

    def reader(tenant: TenantConfig, name: str) -> Callable[[], str]:
        return lambda: documents(tenant, name)

    for kb_name in static.knowledge if static is not None else ():
        assert static is not None
        read = reader(static, kb_name)

        server.resource(
            f"loom://knowledge/{kb_name}",
            name=kb_name,
            description=f"Knowledge base `{kb_name}`: its documents",
            mime_type="application/json",
        )(read)

    @server.resource("loom://knowledge/{name}", mime_type="application/json")
    @_reported(ResourceError)
    async def knowledge_base(name: str, ctx: Context[Any, Any]) -> str:
        """One knowledge base of this tenant: its documents."""
        tenant, _ = resolve(ctx)
        return documents(tenant, name)

    return server

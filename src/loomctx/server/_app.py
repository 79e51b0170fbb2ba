"""The ASGI application `loomctx serve` runs: the proxy, the REST API and MCP, in one app.

Starlette, not FastAPI: the proxy reads raw bodies itself (a malformed body must be answered in
OpenAI's error shape with the right status, not with a framework's validation error), the
official `mcp` SDK is built on Starlette already (so the server adds no web framework of its
own), and a request goes through one thin layer, which is what the proxy's added latency
budget wants. The OpenAPI document (`/openapi.json`) is written out in `loomctx.server._openapi`.

Routes (every `/v1/...` route needs ``Authorization: Bearer <key>``; the key names the tenant):

- ``POST /v1/chat/completions``, ``GET /v1/models``: the OpenAI-compatible proxy;
- ``POST /v1/responses`` (OpenAI's Responses API, `loomctx.server._responses`) and
  ``POST /v1/messages`` (Anthropic's Messages API, `loomctx.server._messages_api`, errors in
  Anthropic's shape, the key also as ``x-api-key``): the same proxy in other wire formats;
- ``GET /v1/sessions``, ``GET /v1/sessions/{id}``: the tenant's sessions;
- ``GET /v1/sessions/{id}/memory?q=...``, ``POST /v1/sessions/{id}/memory`` (``{"content"}``),
  ``DELETE /v1/sessions/{id}/memory/{task_id}``: search, add to, forget from a memory;
- ``GET /v1/reports/{id}``: a window's report;
- ``POST /v1/knowledge/{name}/documents`` (``{"text", "id"?, "metadata"?}``),
  ``GET /v1/knowledge/{name}/search?q=...``: a tenant's knowledge bases;
- ``/mcp/{session}``: MCP over streamable HTTP;
- ``/inspect``: the web inspector (`loomctx.server._inspector`; the key in a cookie);
- ``GET /healthz`` (the process answers), ``GET /readyz`` (the store answers),
  ``GET /openapi.json``.

Every request is logged as one JSON line (logger ``loomctx.server``): method, path, status,
milliseconds, tenant, session, report id. Never a header's value, a body, or a key.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from loomctx.errors import ConfigError, LoomError
from loomctx.server._chat_request import ChatRequest, parse_chat_request
from loomctx.server._config import TenantConfig
from loomctx.server._errors import RequestError, error_body
from loomctx.server._exchange import REPORT_HEADER, SESSION_HEADER, Exchange
from loomctx.server._faces import ChatFace, Face
from loomctx.server._input import int_param, read_body, read_json
from loomctx.server._inspector import service_inspector
from loomctx.server._mcp import SESSION_SCOPE_KEY, http_resolver, make_mcp_server
from loomctx.server._messages_api import (
    MessagesFace,
    anthropic_error,
    chat_body_of_messages,
    client_marks,
)
from loomctx.server._openapi import OPENAPI
from loomctx.server._proxy import ChatProxy
from loomctx.server._responses import ResponsesFace, chat_body_of_responses, previous_response
from loomctx.server._service import LoomService, check_session_id
from loomctx.server._upstream import UpstreamError, preload_sdks
from loomctx.session.bus import open_bus
from loomctx.stores.base import Get

__all__ = ["REPORT_HEADER", "SESSION_HEADER", "create_app"]

log = logging.getLogger("loomctx.server")

Handler = Callable[[Request], Awaitable[Response]]


Shape = Callable[[int, dict[str, Any]], dict[str, Any]]


def _openai_shape(status: int, body: dict[str, Any]) -> dict[str, Any]:
    return body


def _error(exc: RequestError, shape: Shape = _openai_shape) -> JSONResponse:
    return JSONResponse(shape(exc.status, exc.body()), status_code=exc.status)


class _Server:
    """The handlers, over one service and proxy."""

    def __init__(self, service: LoomService) -> None:
        self.service = service
        self.proxy = ChatProxy(service)
        self.mcp = make_mcp_server(self.proxy, http_resolver(self.proxy))
        self.mcp_app = self.mcp.streamable_http_app(
            streamable_http_path="/", stateless_http=True, json_response=True
        )

    def handler(self, fn: Handler, shape: Shape = _openai_shape) -> Handler:
        """`fn` with typed errors answered in OpenAI's shape (or the one `shape` makes of
        it), and a log line."""

        async def run(request: Request) -> Response:
            start = time.perf_counter()
            request.state.log = {}
            try:
                response = await fn(request)
            except RequestError as exc:
                response = _error(exc, shape)
            except UpstreamError as exc:
                response = JSONResponse(shape(exc.status, exc.body), status_code=exc.status)
            except LoomError as exc:
                log.exception("request failed", extra={"error": f"{type(exc).__name__}: {exc}"})
                response = JSONResponse(
                    shape(500, error_body(f"{type(exc).__name__}: {exc}", type="server_error")),
                    status_code=500,
                )
            except Exception as exc:  # not Loom's own error: a bug; its text stays in the log
                log.exception("request failed", extra={"error": f"{type(exc).__name__}: {exc}"})
                response = JSONResponse(
                    shape(
                        500,
                        error_body(
                            f"Loom failed on this request ({type(exc).__name__}); the server's "
                            "log has the details",
                            type="server_error",
                        ),
                    ),
                    status_code=500,
                )
            fields = {
                "method": request.method,
                "path": request.url.path,
                "status": response.status_code,
                "ms": round((time.perf_counter() - start) * 1000, 2),
                **request.state.log,
            }
            log.info("request", extra={"loom": fields})
            return response

        return run

    def tenant(self, request: Request) -> str:
        return self.tenant_config(request).name

    def tenant_config(self, request: Request) -> TenantConfig:
        """The tenant the request's key names: ``Authorization: Bearer <key>``, or
        ``x-api-key: <key>`` as Anthropic's clients send it."""
        authorization = request.headers.get("authorization")
        api_key = request.headers.get("x-api-key")
        if authorization is None and api_key is not None:
            authorization = f"Bearer {api_key}"
        tenant = self.service.authenticate(authorization)
        request.state.log["tenant"] = tenant.name
        return tenant

    # --- proxy ------------------------------------------------------------------------------

    async def chat(self, request: Request) -> Response:
        tenant = self.tenant_config(request)
        body = await read_json(request, self.service.config.max_body_bytes, deep=("messages",))
        chat = self._chat_request(request, body, request.headers.get(SESSION_HEADER))
        return await self._proxied(request, tenant, chat, ChatFace())

    async def responses(self, request: Request) -> Response:
        tenant = self.tenant_config(request)
        body = await read_json(request, self.service.config.max_body_bytes, deep=("input",))
        session, history, chain = request.headers.get(SESSION_HEADER), [], []
        previous = body.get("previous_response_id") if isinstance(body, dict) else None
        if previous is not None:
            store = self.service.store
            kept = await asyncio.to_thread(previous_response, store, tenant.name, previous)
            if session is not None and session != kept["session"]:
                raise RequestError(
                    f"`previous_response_id` belongs to session {kept['session']!r}, not to "
                    f"the session {session!r} that `{SESSION_HEADER}` names; send one of them",
                    param="previous_response_id",
                )
            session, history, chain = kept["session"], kept["messages"], kept["chain"]
        converted, added = chat_body_of_responses(body, history)
        chat = self._chat_request(request, converted, session)
        face = ResponsesFace(
            body,
            added=added,
            chain=chain,
            store=self.service.store,
            tenant=tenant.name,
            session=chat.session,
        )
        try:
            return await self._proxied(request, tenant, chat, face)
        except RequestError as exc:
            if exc.param == "messages":  # the chat messages `input` became
                exc.param = "input"
            raise

    async def messages(self, request: Request) -> Response:
        tenant = self.tenant_config(request)
        body = await read_json(request, self.service.config.max_body_bytes, deep=("messages",))
        chat = self._chat_request(
            request, chat_body_of_messages(body), request.headers.get(SESSION_HEADER)
        )
        chat = replace(chat, cache_marks=client_marks(body))
        return await self._proxied(request, tenant, chat, MessagesFace(chat.model.name))

    def _chat_request(self, request: Request, body: Any, session: str | None) -> ChatRequest:
        chat = parse_chat_request(
            body,
            models=self.service.config.models,
            session=session,
            idempotency_key=request.headers.get("idempotency-key"),
        )
        request.state.log["session"] = chat.session
        return chat

    async def _proxied(
        self, request: Request, tenant: TenantConfig, chat: ChatRequest, face: Face
    ) -> Response:
        """`chat` through the proxy, answered in `face`'s wire format."""
        return await Exchange(self.proxy, request, tenant, chat, face).respond()

    async def models(self, request: Request) -> Response:
        self.tenant(request)
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": m.provider}
            for name, m in sorted(self.service.config.models.items())
        ]
        return JSONResponse({"object": "list", "data": data})

    # --- REST -------------------------------------------------------------------------------

    async def sessions(self, request: Request) -> Response:
        tenant = self.tenant(request)
        return JSONResponse({"object": "list", "data": self.service.sessions(tenant)})

    async def session(self, request: Request) -> Response:
        tenant = self.tenant(request)
        session = check_session_id(request.path_params["session"])
        async with self.service.lock(tenant, session):  # after the session's reply is in
            return JSONResponse(self.service.session_info(tenant, session))

    async def search_memory(self, request: Request) -> Response:
        tenant = self.tenant(request)
        session = check_session_id(request.path_params["session"])
        query = request.query_params.get("q", "")
        if not query.strip():
            raise RequestError("`q` is required: the text to search the memory for", param="q")
        limit = _limit(request.query_params.get("limit", "5"))
        self.service.require_session(tenant, session)
        async with self.service.lock(tenant, session):
            hits = self.service.recall(tenant, session, query, limit)
        return JSONResponse({"object": "list", "data": hits})

    async def remember(self, request: Request) -> Response:
        tenant = self.tenant(request)
        session = check_session_id(request.path_params["session"])
        body = await read_json(request, self.service.config.max_body_bytes)
        content = body.get("content") if isinstance(body, dict) else None
        if not isinstance(content, str):
            raise RequestError(
                'the body must be {"content": "<text to remember>"}', param="content"
            )
        task_id = self.service.remember(tenant, session, content)
        return JSONResponse({"task_id": task_id}, status_code=201)

    async def forget(self, request: Request) -> Response:
        tenant = self.tenant(request)
        session = check_session_id(request.path_params["session"])
        if not self.service.check_access(tenant, session) or not self.service.forget(
            tenant, session, request.path_params["task_id"]
        ):
            raise RequestError(
                "no such task in this session's memory", status=404, code="task_not_found"
            )
        return JSONResponse({"forgotten": True})

    async def report(self, request: Request) -> Response:
        tenant = self.tenant(request)
        return JSONResponse(self.service.report(tenant, request.path_params["report_id"]))

    async def ingest(self, request: Request) -> Response:
        tenant = self.tenant_config(request)
        name = request.path_params["name"]
        kb = self.service.knowledge(tenant, _kb_name(name))  # before the body is read
        body = await read_json(request, self.service.config.max_body_bytes)
        if not isinstance(body, dict) or not isinstance(body.get("text"), str):
            raise RequestError(
                'the body must be {"text": "...", "id"?: "...", "metadata"?: {}}', param="text"
            )
        try:
            doc = kb.add_text(
                body["text"], document_id=body.get("id"), metadata=body.get("metadata")
            )
        except ConfigError as exc:
            if isinstance(exc, RequestError):
                raise
            raise RequestError(str(exc), param="text") from None
        return JSONResponse({"document_id": doc, "knowledge_base": name}, status_code=201)

    async def search_knowledge(self, request: Request) -> Response:
        tenant = self.tenant_config(request)
        kb = self.service.knowledge(tenant, _kb_name(request.path_params["name"]))
        query = request.query_params.get("q", "")
        if not query.strip():
            raise RequestError("`q` is required: the text to search for", param="q")
        hits = kb.search_sync(query, limit=_limit(request.query_params.get("limit", "5")))
        data = [
            {"text": h.text, "score": h.score, "document_id": h.document_id, "chunk_id": h.chunk_id}
            for h in hits
        ]
        return JSONResponse({"object": "list", "data": data})

    # --- operations -------------------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        try:
            self.service.store.batch([Get(namespace=("_loom", "ready"), key="probe")])
        except LoomError as exc:
            return JSONResponse(
                {"status": "unavailable", "store": type(exc).__name__}, status_code=503
            )
        return JSONResponse({"status": "ready"})

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(OPENAPI)

    async def mcp_endpoint(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            self.service.authenticate(request.headers.get("authorization"))
            parts = [p for p in scope["path"].split("/") if p]
            if len(parts) < 2:
                raise RequestError(
                    "the MCP endpoint is /mcp/{session}: name the session", status=404
                )
            session = check_session_id(parts[1])
            if request.method in ("GET", "DELETE"):  # stateless: no stream, no MCP session
                raise RequestError(
                    f"this MCP server is stateless: it has no event stream to `GET` and no "
                    f"session to `DELETE`; send JSON-RPC messages with `POST /mcp/{session}`",
                    status=405,
                    code="method_not_allowed",
                )
            if request.method == "POST":  # JSON-RPC messages: read whole, within the limit
                body = await read_body(request, self.service.config.max_body_bytes)
                receive = _replay(body, receive)
        except RequestError as exc:
            response = _error(exc)
            if exc.status == 405:
                response.headers["Allow"] = "POST"
            await response(scope, receive, send)
            return
        inner = dict(scope)
        inner[SESSION_SCOPE_KEY] = session
        inner["path"] = "/"
        inner["raw_path"] = b"/"
        await self.mcp_app(inner, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives `body` (already read) first, then what `receive` gives (the
    client's disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _limit(raw: str) -> int:
    return int_param(raw, name="limit", low=1, high=100)


def _kb_name(name: str) -> str:
    from loomctx.server._config import _NAME

    if not _NAME.match(name):
        raise RequestError(
            f"knowledge base name {name!r} is not valid: use letters, digits, `_`, `.` or `-`",
            param="name",
        )
    return name


class _App:
    """Starlette for the routes, and `/mcp/...` straight to the MCP transport."""

    def __init__(self, server: _Server, app: Starlette) -> None:
        self.server = server
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and (path == "/mcp" or path.startswith("/mcp/")):
            await self.server.mcp_endpoint(scope, receive, send)
            return
        await self.app(scope, receive, send)


def create_app(service: LoomService) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The ASGI app over `service` (closed when the app shuts down)."""
    server = _Server(service)
    h = server.handler

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # The `bus` setting's bus is opened here, on the server's event loop (a bus belongs
        # to one loop), and closed with the app; a bus the caller gave is the caller's.
        opened = service.bus is None and service.config.bus is not None
        if opened:
            service.bus = open_bus(service.config.bus)
        # The SDKs of the configured providers are imported now, beside the server starting,
        # not by the first request (`anthropic` takes 1-2 s to import: the first client
        # waited for it); a request that comes sooner waits for the import to end.
        threading.Thread(
            target=preload_sdks, args=(list(service.config.models.values()),), daemon=True
        ).start()
        async with server.mcp.session_manager.run():
            try:
                yield
            finally:
                await server.proxy.aclose()
                if opened and service.bus is not None:
                    await service.bus.close()
                    service.bus = None
                service.close()

    routes = [
        Route("/v1/chat/completions", h(server.chat), methods=["POST"]),
        Route("/v1/responses", h(server.responses), methods=["POST"]),
        Route("/v1/messages", h(server.messages, anthropic_error), methods=["POST"]),
        Route("/v1/models", h(server.models), methods=["GET"]),
        Route("/v1/sessions", h(server.sessions), methods=["GET"]),
        Route("/v1/sessions/{session}", h(server.session), methods=["GET"]),
        Route("/v1/sessions/{session}/memory", h(server.search_memory), methods=["GET"]),
        Route("/v1/sessions/{session}/memory", h(server.remember), methods=["POST"]),
        Route("/v1/sessions/{session}/memory/{task_id}", h(server.forget), methods=["DELETE"]),
        Route("/v1/reports/{report_id}", h(server.report), methods=["GET"]),
        Route("/v1/knowledge/{name}/documents", h(server.ingest), methods=["POST"]),
        Route("/v1/knowledge/{name}/search", h(server.search_knowledge), methods=["GET"]),
        Route("/healthz", server.healthz, methods=["GET"]),
        Route("/readyz", server.readyz, methods=["GET"]),
        Route("/openapi.json", server.openapi, methods=["GET"]),
        *service_inspector(service).routes(),  # the web inspector, /inspect
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.service = service
    return _App(server, app)

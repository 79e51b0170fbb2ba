"""The web inspector's routes, under `/inspect`: served by `loomctx serve` (the windows of the
tenant whose API key the browser holds) and by `loomctx inspect --web` (a local store's
`loomctx chat` windows, behind a one-time token).

- ``GET /inspect``: the sessions, with turns, calls, tokens and cost so far (``?q=`` filters);
- ``GET /inspect/s/{session}``: the session's timeline, one bar per model call, live;
- ``GET /inspect/s/{session}/w/{turn}/{call}``: one window, its text, what was left out and
  why, and the diff against the previous call;
- ``GET /inspect/search?q=``: which calls contained a text, and when it left the window;
- ``GET /inspect/s/{session}/events``: server-sent events, one ``window`` event per new call.
  It polls the store (one small read a second), so it sees calls that any instance serving
  the same store saved; ``/rows?after=<seq>&scale=<tokens>`` is the timeline's rows saved
  after the store's write `seq`, what the page fetches and appends on an event.

Keys: a browser cannot send an ``Authorization`` header on a link, so the key goes once to
``POST /inspect/login`` (a form) or ``GET /inspect/login?key=`` (what `--web` opens), and
comes back as an HttpOnly, SameSite=Strict cookie scoped to `/inspect`, then the key is
out of the address bar. Every read goes through the key's tenant's `WindowLog` scope, so
another tenant's session is a 404 like one that does not exist.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from loomctx.errors import ConfigError
from loomctx.evaluation.cost import PRICES
from loomctx.server._errors import RequestError
from loomctx.server._input import int_param
from loomctx.server._inspect_data import Pricing, diff_windows, search_text, timeline
from loomctx.server._inspect_html import (
    csp,
    escape,
    page,
    search_page,
    sessions_page,
    timeline_page,
    timeline_rows,
    window_page,
)
from loomctx.server._service import LoomService, check_session_id
from loomctx.session.windows import WindowLog
from loomctx.stores.base import MemoryStore

__all__ = ["COOKIE", "Inspector", "inspector_app", "local_inspector", "service_inspector"]

COOKIE = "loom_inspect"
BASE = "/inspect"
MAX_KEY = 512
MAX_SEARCH_SESSIONS = 500


@dataclass(frozen=True, slots=True, kw_only=True)
class Inspector:
    """The inspector over a store: `tenant_for` maps a key to the scope it may read (None:
    refused), `pricing_for` a model name to its pricing."""

    store: MemoryStore
    tenant_for: Callable[[str], str | None]
    pricing_for: Callable[[str], Pricing]
    scope_of: Callable[[str], tuple[str, ...]] = lambda tenant: (tenant,)
    poll_seconds: float = 1.0
    stream_seconds: float = 300.0
    show_tenant: bool = True

    def routes(self) -> list[Route]:
        """The inspector's routes, to add to an app."""
        h = self._handler
        return [
            Route(BASE, h(self.sessions), methods=["GET"]),
            Route(BASE + "/", h(self.sessions), methods=["GET"]),
            Route(BASE + "/login", self.login_form, methods=["GET"]),
            Route(BASE + "/login", self.login, methods=["POST"]),
            Route(BASE + "/logout", self.logout, methods=["POST", "GET"]),
            Route(BASE + "/search", h(self.search), methods=["GET"]),
            Route(BASE + "/s/{session}", h(self.timeline), methods=["GET"]),
            Route(BASE + "/s/{session}/rows", h(self.rows), methods=["GET"]),
            Route(BASE + "/s/{session}/events", h(self.events), methods=["GET"]),
            Route(BASE + "/s/{session}/w/{turn:int}/{call:int}", h(self.window), methods=["GET"]),
        ]

    # --- plumbing ---------------------------------------------------------------------------

    def _handler(
        self, fn: Callable[[Request, str], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            key = request.cookies.get(COOKIE, "")
            tenant = self.tenant_for(key) if key else None
            if tenant is None:
                return self._login(request, status=401, message="")
            try:
                return await fn(request, tenant)
            except (RequestError, ConfigError) as exc:
                status = exc.status if isinstance(exc, RequestError) else 400
                return self._html(
                    "Not found" if status == 404 else "Cannot show that",
                    f"<h1>{'Not found' if status == 404 else 'Cannot show that'}</h1>"
                    f"<p>{escape(exc)}</p>",
                    status=status,
                )

        return run

    def _html(self, title: str, body: str, *, status: int = 200) -> HTMLResponse:
        nonce = secrets.token_urlsafe(16)
        return self._respond(page(title, body, base=BASE, nonce=nonce), nonce, status)

    @staticmethod
    def _respond(text: str, nonce: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse(
            text,
            status_code=status,
            headers={
                "Content-Security-Policy": csp(nonce),
                "X-Content-Type-Options": "nosniff",
                "Referrer-Policy": "no-referrer",
                "Cache-Control": "no-store",
            },
        )

    def _log(self, tenant: str) -> WindowLog:
        return WindowLog(self.store, self.scope_of(tenant))

    def _pricing(self, model: object) -> Pricing:
        return self.pricing_for(str(model or ""))

    # --- keys -------------------------------------------------------------------------------

    def _login(self, request: Request, *, status: int, message: str) -> HTMLResponse:
        note = f'<p role="alert">{escape(message)}</p>' if message else ""
        body = (
            "<h1>Sign in to the inspector</h1>"
            "<p>Give the API key of your tenant (the one your agent sends to Loom). It is "
            "kept in a cookie for this site only.</p>"
            f'{note}<form class="inline" method="post" action="{BASE}/login">'
            '<label for="key">API key</label>'
            '<input type="password" id="key" name="key" autocomplete="current-password" required>'
            '<button type="submit">Sign in</button></form>'
        )
        return self._html("Sign in", body, status=status)

    def _signed_in(self, request: Request, key: str) -> Response:
        response = RedirectResponse(BASE, status_code=303)
        response.set_cookie(
            COOKIE,
            key,
            httponly=True,
            samesite="strict",
            path=BASE,
            max_age=8 * 3600,
            secure=request.url.scheme == "https",  # behind TLS, never sent without it
        )
        return response

    async def login_form(self, request: Request) -> Response:
        key = request.query_params.get("key", "")
        if key and len(key) <= MAX_KEY and self.tenant_for(key) is not None:
            return self._signed_in(request, key)
        return self._login(
            request, status=401 if key else 200, message="That key is not valid." if key else ""
        )

    async def login(self, request: Request) -> Response:
        raw = await request.body()
        if len(raw) > 4 * MAX_KEY:
            return self._login(request, status=413, message="That form is too large.")
        key = parse_qs(raw.decode("utf-8", "replace")).get("key", [""])[0].strip()
        if not key or self.tenant_for(key) is None:
            return self._login(request, status=401, message="That key is not valid for any tenant.")
        return self._signed_in(request, key)

    async def logout(self, request: Request) -> Response:
        response = RedirectResponse(BASE + "/login", status_code=303)
        response.delete_cookie(COOKIE, path=BASE)
        return response

    # --- pages ------------------------------------------------------------------------------

    async def sessions(self, request: Request, tenant: str) -> Response:
        sessions = self._log(tenant).sessions()
        models = {str(s.get("model") or "") for s in sessions}
        pricing = self._pricing(models.pop() if len(models) == 1 else "")
        nonce = secrets.token_urlsafe(16)
        page = sessions_page(
            sessions,
            base=BASE,
            nonce=nonce,
            query=request.query_params.get("q", "")[:200],
            pricing=pricing,
            tenant=tenant if self.show_tenant else None,
        )
        return self._respond(page, nonce)

    def _session(self, request: Request, tenant: str) -> tuple[str, dict[str, object]]:
        session = check_session_id(request.path_params["session"])
        found = self._log(tenant).session(session)
        if found is None:
            raise RequestError(
                f"no saved windows for session {session!r} under this key",
                status=404,
                code="session_not_found",
            )
        return session, found

    async def timeline(self, request: Request, tenant: str) -> Response:
        session, info = self._session(request, tenant)
        pricing = self._pricing(info.get("model"))
        rows = timeline(self._log(tenant), session, pricing)
        nonce = secrets.token_urlsafe(16)
        page = timeline_page(info, rows, base=BASE, nonce=nonce, pricing=pricing)
        return self._respond(page, nonce)

    async def rows(self, request: Request, tenant: str) -> Response:
        session, info = self._session(request, tenant)
        pricing = self._pricing(info.get("model"))
        after, scale = (_count(request, name) for name in ("after", "scale"))
        rows = timeline(self._log(tenant), session, pricing, after_seq=after)
        text = timeline_rows(rows, base=BASE, session=session, pricing=pricing, scale=scale)
        return self._respond(text, secrets.token_urlsafe(16))

    async def window(self, request: Request, tenant: str) -> Response:
        session, info = self._session(request, tenant)
        turn, call = int(request.path_params["turn"]), int(request.path_params["call"])
        log = self._log(tenant)
        records = log.records(session)
        at = next(
            (
                i
                for i, r in enumerate(records)
                if (int(r.data["turn"]), int(r.data["call"])) == (turn, call)
            ),
            None,
        )
        if at is None:
            shown = ", ".join(f"{r.data['turn']}.{r.data['call']}" for r in records[-12:])
            raise RequestError(
                f"session {session!r} has no call {turn}.{call}; saved calls: {shown}",
                status=404,
            )
        current = log.materialize(records[at])
        diff = diff_windows(log.materialize(records[at - 1]), current) if at else None

        def label(i: int) -> str | None:
            if 0 <= i < len(records):
                return f"{records[i].data['turn']}/{records[i].data['call']}"
            return None

        nonce = secrets.token_urlsafe(16)
        page = window_page(
            current,
            diff=diff,
            neighbours=(label(at - 1), label(at + 1)),
            base=BASE,
            nonce=nonce,
            pricing=self._pricing(current.model or info.get("model")),
        )
        return self._respond(page, nonce)

    async def search(self, request: Request, tenant: str) -> Response:
        query = request.query_params.get("q", "")[:500]
        log = self._log(tenant)
        hits = None
        if query.strip():
            names = [s["session"] for s in log.sessions()][-MAX_SEARCH_SESSIONS:]
            hits = search_text(log, query, names)
        nonce = secrets.token_urlsafe(16)
        return self._respond(search_page(query, hits, base=BASE, nonce=nonce), nonce)

    async def events(self, request: Request, tenant: str) -> Response:
        session, info = self._session(request, tenant)
        log = self._log(tenant)
        seen = int(str(info.get("windows", 0)))

        async def stream() -> AsyncIterator[bytes]:
            nonlocal seen
            yield b"retry: 2000\n\n"
            deadline = time.monotonic() + self.stream_seconds
            beat = time.monotonic()
            while time.monotonic() < deadline:
                await asyncio.sleep(self.poll_seconds)
                if await request.is_disconnected():
                    return
                now = log.session(session) or {}
                count = int(str(now.get("windows", 0)))
                if count != seen:
                    seen = count
                    data = json.dumps({"windows": count, "last_at": now.get("last_at")})
                    yield f"event: window\ndata: {data}\n\n".encode()
                elif time.monotonic() - beat > 15:
                    yield b": still here\n\n"
                    beat = time.monotonic()

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )


def _count(request: Request, name: str) -> int:
    return int_param(request.query_params.get(name, "0"), name=name)


def service_inspector(service: LoomService) -> Inspector:
    """The inspector of a served store: a tenant's API key shows that tenant's windows, each
    session's cost under its model's provider's pricing."""

    def tenant_for(key: str) -> str | None:
        if not key or len(key) > MAX_KEY:
            return None
        tenant = service.config.tenant_for_key(key)
        return None if tenant is None else tenant.name

    def pricing_for(model: str) -> Pricing:
        config = service.config.models.get(model)
        provider = config.provider if config is not None else "openai"
        return Pricing.named(provider if provider in PRICES else "openai")

    return Inspector(store=service.store, tenant_for=tenant_for, pricing_for=pricing_for)


def local_inspector(
    store: MemoryStore, *, token: str, pricing: Pricing, poll_seconds: float = 1.0
) -> Inspector:
    """The inspector of a local store's `loomctx chat` windows, for whoever holds `token`."""

    def tenant_for(key: str) -> str | None:
        return "local" if hmac.compare_digest(key.encode(), token.encode()) else None

    return Inspector(
        store=store,
        tenant_for=tenant_for,
        pricing_for=lambda model: pricing,
        scope_of=lambda tenant: ("cli",),
        poll_seconds=poll_seconds,
        show_tenant=False,
    )


def inspector_app(inspector: Inspector) -> Starlette:
    """A Starlette app serving only the inspector (what `loomctx inspect --web` runs)."""

    async def home(request: Request) -> Response:
        return RedirectResponse(BASE, status_code=307)

    return Starlette(routes=[Route("/", home), *inspector.routes()])

"""The web inspector's routes, under `/inspect`: served by `loomctx serve` (the windows of the
tenant whose API key the browser holds) and by `loomctx inspect --web` (a local store's
`loomctx chat` windows, behind a one-time token).

- ``GET /inspect``: the sessions, with turns, calls, tokens and cost so far (``?q=`` filters);
- ``GET /inspect/s/{session}``: the session's timeline, one bar per model call, live;
- ``GET /inspect/s/{session}/w/{turn}/{call}``: one window, its text, what was left out and
  why, and the diff against the previous call;
- ``GET /inspect/search?q=``: which calls contained a text, and when it left the window;
- ``GET /inspect/s/{session}/events?seen=<calls>``: server-sent events, one ``window`` event
  per new call, counted from the calls the page was rendered with.
  It polls the store (one small read a second), so it sees calls that any instance serving
  the same store saved; ``/rows?after=<seq>&scale=<tokens>`` is the timeline's rows saved
  after the store's write `seq`, what the page fetches and appends on an event.

Keys: a browser cannot send an ``Authorization`` header on a link, so the key is typed once
into the form of ``/inspect/login`` (a POST from this server's own page, with a CSRF token),
and the browser then holds an opaque, revocable sign-in token in a cookie, never the key
(`loomctx.server._inspect_auth` says what the sign-in guarantees); ``POST /inspect/logout``
revokes it. `loomctx inspect --web` opens a one-time link (``/inspect/open?code=``) instead.
Every read goes through the signed-in tenant's `WindowLog` scope, so another tenant's
session is a 404 like one that does not exist.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import parse_qs, quote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from loomctx.context.billing import OPENAI
from loomctx.errors import ConfigError
from loomctx.server._config import hash_key
from loomctx.server._errors import RequestError
from loomctx.server._input import int_param
from loomctx.server._inspect_auth import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    SignIns,
    csrf_matches,
    csrf_token,
    same_origin,
    security_headers,
    set_cookie,
)
from loomctx.server._inspect_data import Pricing, diff_windows, search_text, timeline
from loomctx.server._inspect_html import (
    escape,
    page,
    search_page,
    sessions_page,
    timeline_page,
    timeline_rows,
)
from loomctx.server._inspect_window import window_page
from loomctx.server._service import LoomService, check_session_id
from loomctx.session.windows import WindowLog
from loomctx.stores.base import MemoryStore

__all__ = ["COOKIE", "Inspector", "inspector_app", "local_inspector", "service_inspector"]

COOKIE = SESSION_COOKIE
BASE = "/inspect"
MAX_KEY = 512
MAX_SEARCH_SESSIONS = 500


@dataclass(frozen=True, slots=True, kw_only=True)
class Inspector:
    """The inspector over a store: `tenant_of` maps an API key's digest (`hash_key`) to the
    tenant it signs into (None: refused), `pricing_for` a model name to its pricing.
    `links`: whether one-time links (`one_time_link`) may sign a browser in; the sign-ins
    are kept in `store` (see `loomctx.server._inspect_auth`)."""

    store: MemoryStore
    tenant_of: Callable[[str], str | None]
    pricing_for: Callable[[str], Pricing]
    scope_of: Callable[[str], tuple[str, ...]] = lambda tenant: (tenant,)
    poll_seconds: float = 1.0
    stream_seconds: float = 300.0
    show_tenant: bool = True
    links: bool = False

    def routes(self) -> list[Route]:
        """The inspector's routes, to add to an app."""
        h = self._handler
        return [
            Route(BASE, h(self.sessions), methods=["GET"]),
            Route(BASE + "/", h(self.sessions), methods=["GET"]),
            Route(BASE + "/login", self.login_form, methods=["GET"]),
            Route(BASE + "/login", self.login, methods=["POST"]),
            Route(BASE + "/logout", self.logout, methods=["POST"]),
            *([Route(BASE + "/open", self.open_link, methods=["GET"])] if self.links else []),
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
            tenant = await self._signed_in_tenant(request)
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

    def _html(
        self, title: str, body: str, *, status: int = 200, signed_in: bool = True
    ) -> HTMLResponse:
        nonce = secrets.token_urlsafe(16)
        text = page(title, body, base=BASE, nonce=nonce, signed_in=signed_in)
        return self._respond(text, nonce, status)

    @staticmethod
    def _respond(text: str, nonce: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse(text, status_code=status, headers=security_headers(nonce))

    def _log(self, tenant: str) -> WindowLog:
        return WindowLog(self.store, self.scope_of(tenant))

    def _pricing(self, model: object) -> Pricing:
        return self.pricing_for(str(model or ""))

    # --- sign-in ---------------------------------------------------------------------------

    @property
    def sign_ins(self) -> SignIns:
        """The store's sign-ins."""
        return SignIns(store=self.store)

    async def _signed_in_tenant(self, request: Request) -> str | None:
        """The tenant of the browser's live sign-in, if its key still belongs to it."""
        token = request.cookies.get(COOKIE, "")
        found = await self.sign_ins.find(token) if token else None
        if found is None:
            return None
        if self.tenant_of(found.grant) != found.tenant:  # the key was removed or moved
            await self.sign_ins.revoke(token)
            return None
        return found.tenant

    def _login(self, request: Request, *, status: int, message: str) -> HTMLResponse:
        note = f'<p role="alert">{escape(message)}</p>' if message else ""
        csrf = csrf_token(request)
        body = (
            "<h1>Sign in to the inspector</h1>"
            "<p>Give the API key of your tenant (the one your agent sends to Loom). The browser "
            "keeps a sign-in that ends after 8 hours or when you sign out, not the key.</p>"
            f'{note}<form class="inline" method="post" action="{BASE}/login">'
            f'<input type="hidden" name="csrf" value="{escape(csrf)}">'
            '<label for="key">API key</label>'
            '<input type="password" id="key" name="key" autocomplete="current-password" required>'
            '<button type="submit">Sign in</button></form>'
        )
        response = self._html("Sign in", body, status=status, signed_in=False)
        set_cookie(response, request, CSRF_COOKIE, csrf, path=BASE + "/login", seconds=3600)
        return response

    async def _signed_in(self, request: Request, tenant: str, grant: str) -> Response:
        response = RedirectResponse(BASE, status_code=303)
        held = request.cookies.get(COOKIE, "")
        if held:  # a sign-in over another one replaces it
            await self.sign_ins.revoke(held)
        token = await self.sign_ins.open(tenant, grant)
        seconds = int(self.sign_ins.seconds)
        set_cookie(response, request, COOKIE, token, path=BASE, seconds=seconds)
        response.delete_cookie(CSRF_COOKIE, path=BASE + "/login")
        return response

    async def login_form(self, request: Request) -> Response:
        if "key" in request.query_params:
            return self._login(
                request,
                status=400,
                message="A key in the address signs nobody in: it would stay in the browser's "
                "history and the server's logs. Type it into this form instead.",
            )
        return self._login(request, status=200, message="")

    async def login(self, request: Request) -> Response:
        if not same_origin(request):
            return self._login(
                request,
                status=403,
                message="That sign-in did not come from this server's own page; sign in here.",
            )
        raw = await request.body()
        if len(raw) > 4 * MAX_KEY:
            return self._login(request, status=413, message="That form is too large.")
        form = parse_qs(raw.decode("utf-8", "replace"))
        if not csrf_matches(request, form.get("csrf", [""])[0]):
            return self._login(
                request,
                status=403,
                message="That sign-in form has expired or came from elsewhere; sign in again.",
            )
        key = form.get("key", [""])[0].strip()
        tenant = self.tenant_of(hash_key(key)) if key and len(key) <= MAX_KEY else None
        if tenant is None:
            return self._login(request, status=401, message="That key is not valid for any tenant.")
        return await self._signed_in(request, tenant, hash_key(key))

    async def logout(self, request: Request) -> Response:
        if not same_origin(request):
            return self._html(
                "Cannot sign out",
                "<h1>Cannot sign out</h1><p>That sign-out did not come from this server's own "
                f'page; use the Sign out button of <a href="{BASE}">the inspector</a>.</p>',
                status=403,
            )
        token = request.cookies.get(COOKIE, "")
        if token:
            await self.sign_ins.revoke(token)
        response = RedirectResponse(BASE + "/login", status_code=303)
        response.delete_cookie(COOKIE, path=BASE)
        return response

    def one_time_link(self, key: str) -> str:
        """A path that signs a browser in once with `key`'s tenant, for a few minutes (for
        `loomctx inspect --web`, which opens it); a `ConfigError` when the key signs into no
        tenant or links are off."""
        grant = hash_key(key)
        tenant = self.tenant_of(grant)
        if not self.links or tenant is None:
            raise ConfigError("one-time links need `links=True` and a key of a tenant")
        return f"{BASE}/open?code={quote(self.sign_ins.link(tenant, grant))}"

    async def open_link(self, request: Request) -> Response:
        found = await self.sign_ins.use_link(request.query_params.get("code", ""))
        if found is None or self.tenant_of(found.grant) != found.tenant:
            return self._login(
                request,
                status=401,
                message="That link was used already or has expired; run `loomctx inspect --web` "
                "again for a new one.",
            )
        return await self._signed_in(request, found.tenant, found.grant)

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
        # The calls the page was rendered with: one made between the page and this stream
        # is sent at once, not lost because the stream began after it.
        known = "seen" in request.query_params
        seen = _count(request, "seen") if known else int(str(info.get("windows", 0)))

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

    def tenant_of(grant: str) -> str | None:
        tenants = service.config.tenants.values()
        return next((t.name for t in tenants if grant in t.keys), None)

    def pricing_for(model: str) -> Pricing:
        config = service.config.models.get(model)
        return Pricing(cache=config.pricing if config is not None else OPENAI)

    return Inspector(store=service.store, tenant_of=tenant_of, pricing_for=pricing_for)


def local_inspector(
    store: MemoryStore, *, token: str, pricing: Pricing, poll_seconds: float = 1.0
) -> Inspector:
    """The inspector of a local store's `loomctx chat` windows, for whoever holds `token` (or
    a one-time link minted with it)."""
    expected = hash_key(token)

    def tenant_of(grant: str) -> str | None:
        return "local" if hmac.compare_digest(grant.encode(), expected.encode()) else None

    return Inspector(
        store=store,
        tenant_of=tenant_of,
        links=True,
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

"""The web inspector's sign-in: an API key is typed once into a form, and the browser then
holds an opaque sign-in token, never the key.

- **Tokens are random and kept server-side, in the store** (``("_loom", "inspector")``, one
  ``inspector_sign_in`` record per sign-in, keyed by the token's SHA-256, so that reading the
  store yields no usable token). Server-side rather than signed: a sign-out then revokes the
  token for every instance serving the same store at once, and no signing secret has to be
  shared between instances or rotated. A token expires `SIGN_IN_SECONDS` after it was issued
  (an expired one is deleted when it is next shown, or by the next sign-in's sweep).
- **A sign-in stays tied to the key's digest**: every request checks that the digest still
  belongs to the same tenant, so removing or rotating a key in the config ends the browser
  sessions it opened.
- **The cookie** is HttpOnly, SameSite=Strict, scoped to `/inspect`, Secure when the request
  came over https, and lives no longer than the token.
- **Login CSRF**: signing in and out are POSTs only; each must come from a page of this
  server (its ``Origin``, or ``Referer`` when a browser sends no ``Origin``, names the host the
  request was sent to), and the login form carries a random CSRF token that must equal the
  one in its own cookie (double submit). A key in the address (``?key=``) signs nobody in.
- **One-time links** (`loomctx inspect --web` only): a code valid for `LINK_SECONDS`, used at
  most once (the store's delete says which request got it), then dropped from the address.
  A link is a credential only its holder knows, minted by the local process that prints it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

from loomctx.stores.base import Delete, Get, MemoryStore, Put, Record, Scan

__all__ = [
    "CSRF_COOKIE",
    "SESSION_COOKIE",
    "SIGN_INS",
    "SignIn",
    "SignIns",
    "csrf_matches",
    "csrf_token",
    "same_origin",
    "security_headers",
    "set_cookie",
]

SESSION_COOKIE: Final = "loom_inspect"
CSRF_COOKIE: Final = "loom_inspect_csrf"
SIGN_INS: Final = ("_loom", "inspector")
SIGN_IN_KIND: Final = "inspector_sign_in"
LINK_KIND: Final = "inspector_link"
SIGN_IN_SECONDS: Final = 8 * 3600
LINK_SECONDS: Final = 600
_TOKEN: Final = re.compile(r"[A-Za-z0-9_-]{20,100}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SignIn:
    """A live sign-in: the tenant it reads, the digest of the key it was opened with, and
    when it ends (seconds since the epoch)."""

    tenant: str
    grant: str
    expires_at: float


def _key(token: str) -> str | None:
    return hashlib.sha256(token.encode()).hexdigest() if _TOKEN.fullmatch(token) else None


def _sign_in(record: Record | None, kind: str, now: float) -> SignIn | None:
    if record is None or record.kind != kind:
        return None
    data: Mapping[str, object] = record.data
    expires = data.get("expires_at")
    tenant, grant = data.get("tenant"), data.get("grant")
    if not isinstance(expires, int | float) or expires <= now:
        return None
    if not isinstance(tenant, str) or not isinstance(grant, str):
        return None
    return SignIn(tenant=tenant, grant=grant, expires_at=float(expires))


@dataclass(frozen=True, slots=True, kw_only=True)
class SignIns:
    """The inspector's sign-ins and one-time links, in `store`."""

    store: MemoryStore
    seconds: float = SIGN_IN_SECONDS

    @staticmethod
    def _new(kind: str, tenant: str, grant: str, seconds: float) -> tuple[str, Put]:
        token = secrets.token_urlsafe(32)
        record = Record(
            namespace=SIGN_INS,
            key=hashlib.sha256(token.encode()).hexdigest(),
            kind=kind,
            data={"tenant": tenant, "grant": grant, "expires_at": time.time() + seconds},
        )
        return token, Put(record=record)

    async def _sweep(self, now: float) -> None:
        found: list[Record] = (await self.store.abatch([Scan(prefix=SIGN_INS, exact=True)]))[0]
        stale = [r for r in found if _sign_in(r, r.kind, now) is None]
        if stale:
            await self.store.abatch([Delete(namespace=SIGN_INS, key=r.key) for r in stale])

    async def open(self, tenant: str, grant: str) -> str:
        """A new sign-in token for `tenant`, opened with the key whose digest is `grant`."""
        await self._sweep(time.time())
        token, put = self._new(SIGN_IN_KIND, tenant, grant, self.seconds)
        await self.store.abatch([put])
        return token

    async def find(self, token: str) -> SignIn | None:
        """The live sign-in `token` names, or None (unknown, revoked or expired)."""
        key = _key(token)
        if key is None:
            return None
        record = (await self.store.abatch([Get(namespace=SIGN_INS, key=key)]))[0]
        found = _sign_in(record, SIGN_IN_KIND, time.time())
        if found is None and record is not None:
            await self.store.abatch([Delete(namespace=SIGN_INS, key=key)])
        return found

    async def revoke(self, token: str) -> None:
        """End the sign-in `token` names, for every instance serving the store."""
        key = _key(token)
        if key is not None:
            await self.store.abatch([Delete(namespace=SIGN_INS, key=key)])

    def link(self, tenant: str, grant: str) -> str:
        """A one-time link code for `tenant`, valid for `LINK_SECONDS` (minted before a server
        starts, so without an event loop)."""
        code, put = self._new(LINK_KIND, tenant, grant, LINK_SECONDS)
        self.store.batch([put])
        return code

    async def use_link(self, code: str) -> SignIn | None:
        """What the link `code` grants, once: the request whose delete removes it gets it."""
        key = _key(code)
        if key is None:
            return None
        record, deleted = await self.store.abatch(
            [Get(namespace=SIGN_INS, key=key), Delete(namespace=SIGN_INS, key=key)]
        )
        return _sign_in(record, LINK_KIND, time.time()) if deleted else None


def same_origin(request: Request) -> bool:
    """Whether a POST came from a page of this server: its ``Origin`` (or, without one, its
    ``Referer``) names the host the request was sent to (``Host``, or ``X-Forwarded-Host``
    from a proxy in front). A cross-site form cannot set either header, and a browser sends
    ``Origin: null`` from a sandboxed or opaque origin, which is refused."""
    source = request.headers.get("origin") or request.headers.get("referer") or ""
    if not source or source == "null":
        return False
    parts = urlsplit(source)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    hosts = {request.headers.get("host", "")}
    forwarded = request.headers.get("x-forwarded-host", "")
    if forwarded:
        hosts.add(forwarded.split(",")[0].strip())
    return parts.netloc.lower() in {h.lower() for h in hosts if h}


def csrf_token(request: Request) -> str:
    """The browser's CSRF token (its cookie's, when it holds a well-formed one), or a new one."""
    held = request.cookies.get(CSRF_COOKIE, "")
    return held if _TOKEN.fullmatch(held) else secrets.token_urlsafe(32)


def csrf_matches(request: Request, submitted: str) -> bool:
    """Whether the form's CSRF token is the one in the browser's cookie (double submit)."""
    held = request.cookies.get(CSRF_COOKIE, "")
    if not _TOKEN.fullmatch(held) or not _TOKEN.fullmatch(submitted):
        return False
    return hmac.compare_digest(held.encode(), submitted.encode())


def set_cookie(
    response: Response, request: Request, name: str, value: str, *, path: str, seconds: int
) -> None:
    """Set one of the inspector's cookies: HttpOnly, SameSite=Strict, Secure over https."""
    response.set_cookie(
        name,
        value,
        httponly=True,
        samesite="strict",
        path=path,
        max_age=seconds,
        secure=request.url.scheme == "https",  # behind TLS, never sent without it
    )


def security_headers(nonce: str) -> dict[str, str]:
    """What every page tells the browser: a Content Security Policy that runs only the page's
    own script (`nonce`) and sends nothing off the server; no sniffing, no caching; and a
    referrer for this server's own requests only, so that a form's POST carries its Origin
    (under ``no-referrer`` a browser sends ``Origin: null``, which sign-in refuses)."""
    policy = (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
        f"script-src 'nonce-{nonce}'; connect-src 'self'; form-action 'self'; "
        "base-uri 'none'; frame-ancestors 'none'"
    )
    return {
        "Content-Security-Policy": policy,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin",
        "Cache-Control": "no-store",
    }

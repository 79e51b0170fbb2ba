"""Plain HTTP calls to the server's REST routes, and a cookie-keeping `Browser` for the web
inspector's forms (the standard library's client: these tests check status codes, bodies and
cookies, not an SDK)."""

from __future__ import annotations

import http.cookiejar
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from email.message import Message
from typing import Any


def call(
    method: str,
    url: str,
    *,
    key: str | None = None,
    body: Any = None,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any, dict[str, str]]:
    """(status, parsed JSON body, headers)."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if key is not None:
        request.add_header("Authorization", f"Bearer {key}")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read()
            return response.status, json.loads(text) if text else None, dict(response.headers)
    except urllib.error.HTTPError as exc:
        text = exc.read()
        return exc.code, json.loads(text) if text else None, dict(exc.headers)


@dataclass
class Answer:
    status_code: int
    text: str
    headers: dict[str, str]


def _headers(message: Message) -> dict[str, str]:
    """The headers, by lower-case name; the cookies set, one a line."""
    out = {k.lower(): v for k, v in message.items()}
    out["set-cookie"] = "\n".join(message.get_all("Set-Cookie") or [])
    return out


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


class Browser:
    """A cookie-keeping HTTP client (the standard library's), following redirects or not."""

    def __init__(self, base: str, *, follow: bool = True) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        handlers: list[urllib.request.BaseHandler] = [urllib.request.HTTPCookieProcessor(self.jar)]
        if not follow:
            handlers.append(_NoRedirect())
        self.opener = urllib.request.build_opener(*handlers)

    def _open(self, request: urllib.request.Request) -> Answer:
        try:
            with self.opener.open(request, timeout=10) as r:
                return Answer(r.status, r.read().decode(), _headers(r.headers))
        except urllib.error.HTTPError as exc:
            return Answer(exc.code, exc.read().decode(), _headers(exc.headers))

    def get(self, path: str, params: dict[str, str] | None = None) -> Answer:
        query = "?" + urllib.parse.urlencode(params) if params else ""
        return self._open(urllib.request.Request(self.base + path + query))

    def post(self, path: str, data: dict[str, str], *, origin: str | None = "same") -> Answer:
        """A form's POST; `origin` "same" sends this server's as a browser does from its own
        page, None sends none (a client that is not a browser)."""
        body = urllib.parse.urlencode(data).encode()
        request = urllib.request.Request(self.base + path, data=body, method="POST")
        if origin is not None:
            request.add_header("Origin", self.base if origin == "same" else origin)
        return self._open(request)

    def cookie(self, name: str) -> str | None:
        return next((c.value for c in self.jar if c.name == name), None)

    def sign_in(self, key: str, *, origin: str | None = "same") -> Answer:
        """What a person does: open the sign-in page, type the key, press the button."""
        form = self.get("/inspect/login")
        found = re.search(r'name="csrf" value="([^"]+)"', form.text)
        data = {"key": key} if found is None else {"csrf": found.group(1), "key": key}
        return self.post("/inspect/login", data=data, origin=origin)


def signed_in(loom, key: str) -> Browser:  # type: ignore[no-untyped-def]
    """A `Browser` signed into the inspector of the server `loom` with `key`."""
    http = Browser(loom.url)
    page = http.sign_in(key)
    assert page.status_code == 200, page.text
    return http

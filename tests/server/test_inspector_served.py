"""The web inspector as `loomctx serve` serves it: the proxy saves each window it sends (the
exact messages, as the upstream received them) in the tenant's scope, a browser signs in with
the tenant's API key, and never sees another tenant's sessions. (The pages themselves are
tested in a real browser in tests/inspector.)"""

from __future__ import annotations

import http.cookiejar
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from loomctx.messages import to_openai
from loomctx.session.windows import WindowLog
from loomctx.stores.base import Get
from tests.agent._servers import openai_chunk, openai_sse, openai_text, openai_tool_delta
from tests.server.conftest import ACME_KEY, GLOBEX_KEY

CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The local time in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@dataclass
class Answer:
    status_code: int
    text: str
    headers: dict[str, str]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


class Browser:
    """A cookie-keeping HTTP client (the standard library's), following redirects or not."""

    def __init__(self, base: str, *, follow: bool = True) -> None:
        self.base = base
        handlers: list[urllib.request.BaseHandler] = [
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        ]
        if not follow:
            handlers.append(_NoRedirect())
        self.opener = urllib.request.build_opener(*handlers)

    def _open(self, request: urllib.request.Request) -> Answer:
        try:
            with self.opener.open(request, timeout=10) as r:
                return Answer(
                    r.status, r.read().decode(), {k.lower(): v for k, v in r.headers.items()}
                )
        except urllib.error.HTTPError as exc:
            headers = {k.lower(): v for k, v in exc.headers.items()}
            return Answer(exc.code, exc.read().decode(), headers)

    def get(self, path: str, params: dict[str, str] | None = None) -> Answer:
        query = "?" + urllib.parse.urlencode(params) if params else ""
        return self._open(urllib.request.Request(self.base + path + query))

    def post(self, path: str, data: dict[str, str]) -> Answer:
        body = urllib.parse.urlencode(data).encode()
        return self._open(urllib.request.Request(self.base + path, data=body, method="POST"))


def _signed_in(loom, key: str) -> Browser:  # type: ignore[no-untyped-def]
    http = Browser(loom.url)
    page = http.post("/inspect/login", data={"key": key})
    assert page.status_code == 200, page.text
    return http


def test_the_proxy_saves_each_window_and_its_tenant_alone_sees_it(loom) -> None:
    loom.wire.script(
        openai_sse(
            [
                openai_chunk(openai_tool_delta(0, id="c1", name="get_time")),
                openai_chunk(openai_tool_delta(0, arguments='{"city": "Oslo"}')),
                openai_chunk({}, finish_reason="tool_calls"),
            ]
        ),
        openai_text("It is noon in Oslo."),
        openai_text("Bye <b>now</b>"),
    )
    acme = loom.openai(ACME_KEY)
    first = [{"role": "user", "content": "What time is it in Oslo?"}]
    headers = {"X-Loom-Session": "oslo"}
    reply = acme.chat.completions.create(
        model="gpt-test", messages=first, tools=[CLOCK], extra_headers=headers
    )
    call = reply.choices[0].message.tool_calls[0]
    second = [
        *first,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "12:00"},
    ]
    acme.chat.completions.create(
        model="gpt-test", messages=second, tools=[CLOCK], extra_headers=headers
    )
    third = [*second, {"role": "assistant", "content": "It is noon in Oslo."},
             {"role": "user", "content": "Thanks <script>x()</script>"}]  # fmt: skip
    acme.chat.completions.create(
        model="gpt-test", messages=third, tools=[CLOCK], extra_headers=headers
    )

    log = WindowLog(loom.service.store, ("acme",))
    records = log.records("oslo")
    # Turn 1 made two calls (the tool call, then the answer); turn 2 one.
    assert [(r.data["turn"], r.data["call"]) for r in records] == [(1, 1), (1, 2), (2, 1)]
    for record, sent in zip(records, loom.wire.requests, strict=True):
        saved = log.materialize(record)
        assert to_openai(saved.messages) == sent.body["messages"]
        assert saved.model == "gpt-test"
        assert saved.report_id.startswith("rep_")
    # History repeats in every window; the proxy writes a message once (its state knows
    # what the previous window held), so the first message is as the first request wrote it.
    first_key = records[0].data["messages"][-1]
    stored = loom.service.store.batch([Get(namespace=log.namespace("oslo"), key=first_key)])[0]
    assert stored is not None
    assert stored.seq < records[0].seq
    totals = log.session("oslo")
    assert totals is not None
    assert (totals["turns"], totals["windows"]) == (2, 3)
    assert WindowLog(loom.service.store, ("globex",)).records("oslo") == []

    http = _signed_in(loom, ACME_KEY)
    sessions = http.get("/inspect")
    assert "oslo" in sessions.text
    assert sessions.headers["content-security-policy"].startswith("default-src 'none'")
    window = http.get("/inspect/s/oslo/w/2/1")
    assert window.status_code == 200
    assert "Thanks &lt;script&gt;x()&lt;/script&gt;" in window.text
    assert "<script>x()" not in window.text
    assert http.get("/inspect/s/oslo/w/9/1").status_code == 404
    # What the live page fetches: the rows saved after a write, none after the last one.
    assert http.get("/inspect/s/oslo/rows?after=x").status_code == 400
    assert http.get(f"/inspect/s/oslo/rows?after={records[0].seq}").text.count("call-row") == 2
    assert "call-row" not in http.get(f"/inspect/s/oslo/rows?after={records[-1].seq}").text

    other = _signed_in(loom, GLOBEX_KEY)
    assert "oslo" not in other.get("/inspect").text
    assert other.get("/inspect/s/oslo").status_code == 404
    assert other.get("/inspect/s/oslo/w/1/1").status_code == 404
    assert "No saved call's window contained" in other.get("/inspect/search?q=Oslo").text
    assert "In 3 of 3 calls" in http.get("/inspect/search?q=Oslo").text


def test_the_inspector_asks_for_a_key_and_refuses_a_wrong_one(loom) -> None:
    http = Browser(loom.url, follow=False)
    page = http.get("/inspect")
    assert page.status_code == 401
    assert 'name="key"' in page.text
    assert http.post("/inspect/login", data={"key": "sk-wrong"}).status_code == 401
    assert http.get("/inspect/login", params={"key": "sk-wrong"}).status_code == 401
    assert http.get("/inspect/s/anything").status_code == 401
    # A key in the address is taken once and turned into a cookie, then dropped from it.
    signed = http.get("/inspect/login", params={"key": ACME_KEY})
    assert signed.status_code == 303
    assert signed.headers["location"] == "/inspect"
    cookie = signed.headers["set-cookie"].lower()
    assert "httponly" in cookie
    assert "samesite=strict" in cookie
    assert "path=/inspect" in cookie
    assert http.get("/inspect").status_code == 200
    assert http.get("/inspect/s/bad%20id").status_code == 400

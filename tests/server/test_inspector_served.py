"""The web inspector as `loomctx serve` serves it: the proxy saves each window it sends (the
exact messages, as the upstream received them) in the tenant's scope, a browser signs in with
the tenant's API key through a form from the server's own page, holds an opaque and revocable
sign-in (never the key), and never sees another tenant's sessions. Cross-site and GET sign-ins
are plain HTTP requests here, with the headers a browser would send. (The pages themselves,
and signing in and out, are tested in a real browser in tests/inspector.)"""

from __future__ import annotations

import hashlib
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import replace

from loomctx.messages import to_openai
from loomctx.server._service import LoomService
from loomctx.session.windows import WindowLog
from loomctx.stores.base import Get, Put, Record
from tests.agent._servers import openai_chunk, openai_sse, openai_text, openai_tool_delta
from tests.server._http import Browser, signed_in
from tests.server.conftest import ACME_KEY, GLOBEX_KEY, start_loom

SIGN_INS = ("_loom", "inspector")  # where the inspector's sign-ins are kept

CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The local time in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


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

    http = signed_in(loom, ACME_KEY)
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

    other = signed_in(loom, GLOBEX_KEY)
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
    assert http.sign_in("sk-wrong").status_code == 401
    assert http.get("/inspect/s/anything").status_code == 401
    signed = http.sign_in(ACME_KEY)
    assert signed.status_code == 303
    assert signed.headers["location"] == "/inspect"
    cookie = next(
        c
        for c in signed.headers["set-cookie"].lower().splitlines()
        if c.startswith("loom_inspect=")
    )
    assert "httponly" in cookie
    assert "samesite=strict" in cookie
    assert "path=/inspect" in cookie
    assert "max-age=28800" in cookie
    assert http.get("/inspect").status_code == 200
    assert http.get("/inspect/s/bad%20id").status_code == 400


def test_a_key_in_the_address_signs_nobody_in(loom) -> None:
    http = Browser(loom.url, follow=False)
    page = http.get("/inspect/login", params={"key": ACME_KEY})
    assert page.status_code == 400
    assert "A key in the address signs nobody in" in page.text
    assert ACME_KEY not in page.text
    assert http.cookie("loom_inspect") is None
    assert http.get("/inspect").status_code == 401


def test_the_browser_holds_an_opaque_sign_in_that_signing_out_revokes(loom) -> None:
    http = signed_in(loom, ACME_KEY)
    token = http.cookie("loom_inspect")
    assert token is not None
    assert ACME_KEY not in token
    assert len(token) >= 40
    # The store keeps the token's digest, never the token or the key.
    digest = hashlib.sha256(token.encode()).hexdigest()
    stored = loom.service.store.batch([Get(namespace=SIGN_INS, key=digest)])[0]
    assert stored is not None
    assert stored.data["tenant"] == "acme"
    assert token not in str(stored.data)
    assert ACME_KEY not in str(stored.data)
    # Another browser holding a copy of the cookie reads as the first one does...
    thief = Browser(loom.url, follow=False)
    thief.opener.addheaders = [("Cookie", f"loom_inspect={token}")]
    assert thief.get("/inspect").status_code == 200
    # ...until the first signs out: the token is revoked in the store, not just forgotten.
    out = http.post("/inspect/logout", data={})
    assert out.status_code == 200
    assert 'name="key"' in out.text
    assert loom.service.store.batch([Get(namespace=SIGN_INS, key=digest)])[0] is None
    assert http.get("/inspect").status_code == 401
    again = thief.get("/inspect")
    assert again.status_code == 401
    assert 'name="key"' in again.text


def test_an_expired_sign_in_gets_the_sign_in_page(loom) -> None:
    http = signed_in(loom, GLOBEX_KEY)
    token = http.cookie("loom_inspect")
    assert token is not None
    digest = hashlib.sha256(token.encode()).hexdigest()
    store = loom.service.store
    record = store.batch([Get(namespace=SIGN_INS, key=digest)])[0]
    assert http.get("/inspect").status_code == 200
    expired = Record(
        namespace=SIGN_INS,
        key=digest,
        kind=record.kind,
        data={**record.data, "expires_at": time.time() - 1},
    )
    store.batch([Put(record=expired)])
    page = http.get("/inspect")
    assert page.status_code == 401
    assert 'name="key"' in page.text
    assert store.batch([Get(namespace=SIGN_INS, key=digest)])[0] is None


def test_sign_in_and_out_refuse_requests_from_other_sites(loom) -> None:
    http = Browser(loom.url, follow=False)
    # A page of another site posting a valid key (its own tenant's: login CSRF) is refused,
    # whether it sends its Origin, hides it (`null`), or sends neither Origin nor Referer.
    for origin in ("https://evil.example", "null", None, f"{loom.url}.evil.example"):
        refused = http.sign_in(ACME_KEY, origin=origin)
        assert refused.status_code == 403, origin
        assert "did not come from this server" in refused.text
        assert http.cookie("loom_inspect") is None
    # A Referer from this server's page stands for a missing Origin; another site's does not.
    form = http.get("/inspect/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)  # type: ignore[union-attr]
    body = urllib.parse.urlencode({"csrf": csrf, "key": ACME_KEY}).encode()
    for referer, status in (("https://evil.example/x", 403), (f"{loom.url}/inspect/login", 303)):
        request = urllib.request.Request(loom.url + "/inspect/login", data=body, method="POST")
        request.add_header("Referer", referer)
        assert http._open(request).status_code == status, referer
    # The form's CSRF token must match its cookie: none, or a forged one, is refused.
    fresh = Browser(loom.url, follow=False)
    fresh.get("/inspect/login")
    for data in ({"key": ACME_KEY}, {"key": ACME_KEY, "csrf": "A" * 43}):
        refused = fresh.post("/inspect/login", data=data)
        assert refused.status_code == 403
        assert "expired or came from elsewhere" in refused.text
    assert fresh.cookie("loom_inspect") is None
    # No GET signs in or out.
    assert fresh.get("/inspect/logout").status_code == 405
    # Signing out is refused from another site; the sign-in stays.
    assert http.get("/inspect").status_code == 200
    assert http.post("/inspect/logout", data={}, origin="https://evil.example").status_code == 403
    assert http.get("/inspect").status_code == 200


def test_removing_a_key_from_the_config_ends_its_sign_ins(loom) -> None:
    http = signed_in(loom, ACME_KEY)
    assert http.get("/inspect").status_code == 200
    service = loom.service
    tenant = service.config.tenants["acme"]
    config = service.config
    tenants = {**config.tenants, "acme": replace(tenant, keys=())}
    service.config = replace(config, tenants=tenants)
    try:
        assert http.get("/inspect").status_code == 401
    finally:
        service.config = config


def test_a_sign_in_holds_on_every_instance_serving_the_store_and_ends_on_all(loom) -> None:
    other = LoomService(loom.service.config)  # a second `loomctx serve` on the same store
    server, thread, url = start_loom(other)
    try:
        here = signed_in(loom, ACME_KEY)
        token = here.cookie("loom_inspect")
        there = Browser(url, follow=False)
        there.opener.addheaders = [("Cookie", f"loom_inspect={token}")]
        assert there.get("/inspect").status_code == 200
        here.post("/inspect/logout", data={})
        assert there.get("/inspect").status_code == 401
    finally:
        server.should_exit = True
        thread.join(timeout=10)

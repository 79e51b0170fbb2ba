"""Bad requests: each a clear HTTP error in OpenAI's shape, and nothing stored."""

from __future__ import annotations

import json

import openai
import pytest

from loomctx.stores.base import Scan
from tests.agent._servers import openai_text
from tests.server._http import call
from tests.server.conftest import ACME_KEY, GLOBEX_KEY

HELLO = [{"role": "user", "content": "hello"}]


def _records(loom) -> int:
    """What requests stored (not the tenants the server recorded when it started)."""
    found = loom.service.store.batch([Scan(prefix=())])[0]
    return len([r for r in found if r.namespace != ("_loom", "tenants")])


def _is_openai_error(body: dict, code: str | None = None) -> None:
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code


def test_malformed_json(loom) -> None:
    status, body, _ = call("POST", f"{loom.v1}/chat/completions", key=ACME_KEY, raw=b"{not json")
    assert status == 400
    _is_openai_error(body, "invalid_json")
    assert "not valid JSON" in body["error"]["message"]
    assert _records(loom) == 0


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        ([1, 2], "JSON object"),
        ({"messages": HELLO}, "`model` is required"),
        ({"model": "gpt-test"}, "`messages`"),
        ({"model": "gpt-test", "messages": []}, "`messages`"),
        ({"model": "gpt-test", "messages": ["hi"]}, "`messages[0]`"),
        ({"model": "gpt-test", "messages": HELLO, "stream": "yes"}, "`stream`"),
        ({"model": "gpt-test", "messages": HELLO, "tools": {"a": 1}}, "`tools`"),
        (
            {
                "model": "gpt-test",
                "messages": [{"role": "user", "content": [{"type": "image_url"}]}],
            },
            "image_url",
        ),
        (
            {
                "model": "gpt-test",
                "messages": [*HELLO, {"role": "tool", "tool_call_id": "x", "content": "orphan"}],
            },
            "messages",
        ),
    ],
)
def test_invalid_requests(loom, payload: object, needle: str) -> None:
    status, body, _ = call(
        "POST",
        f"{loom.v1}/chat/completions",
        key=ACME_KEY,
        body=payload,
        headers={"X-Loom-Session": "bad"},
    )
    assert status == 400, body
    _is_openai_error(body)
    assert needle in body["error"]["message"]
    assert _records(loom) == 0
    assert loom.wire.requests == []


def test_unknown_model(loom) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        loom.openai(ACME_KEY).chat.completions.create(model="gpt-nope", messages=HELLO)
    assert err.value.status_code == 404
    assert "gpt-nope" in err.value.message
    assert "gpt-test" in err.value.message  # it says which models exist
    assert _records(loom) == 0


def test_oversized_body(loom) -> None:
    big = [{"role": "user", "content": "x" * 2_100_000}]
    with pytest.raises(openai.APIStatusError) as err:
        loom.openai(ACME_KEY).chat.completions.create(model="gpt-test", messages=big)
    assert err.value.status_code == 413
    assert "max_body_bytes" in err.value.message

    # Without a Content-Length (chunked), the limit holds while reading.
    def chunks():
        yield b'{"model": "gpt-test", "messages": [{"role": "user", "content": "'
        for _ in range(30):
            yield b"y" * 100_000
        yield b'"}]}'

    import urllib.request

    request = urllib.request.Request(
        f"{loom.v1}/chat/completions",
        data=chunks(),
        method="POST",
        headers={
            "Authorization": f"Bearer {ACME_KEY}",
            "Content-Type": "application/json",
            "Transfer-Encoding": "chunked",
        },
    )
    with pytest.raises(urllib.error.HTTPError) as http:
        urllib.request.urlopen(request, timeout=30)
    assert http.value.code == 413
    _is_openai_error(json.loads(http.value.read()), "request_too_large")
    assert _records(loom) == 0


@pytest.mark.parametrize("key", ["sk-wrong", "", None])
def test_wrong_key(loom, key: str | None) -> None:
    status, body, _ = call(
        "POST",
        f"{loom.v1}/chat/completions",
        key=key,
        body={"model": "gpt-test", "messages": HELLO},
    )
    assert status == 401
    _is_openai_error(body, "invalid_api_key")
    with pytest.raises(openai.AuthenticationError):
        loom.openai("sk-wrong").models.list()
    assert _records(loom) == 0


def test_another_tenants_session_id_is_a_session_of_ones_own(loom) -> None:
    """A session is (tenant, id): another tenant's id names a new session of one's own,
    which holds nothing of theirs and changes nothing of theirs."""
    from tests.agent._servers import openai_text

    loom.wire.script(openai_text("hi acme"), openai_text("hi globex"))
    acme = loom.openai(ACME_KEY)
    acme.chat.completions.create(model="gpt-test", messages=HELLO, user="acme-private")
    before = loom.service.session_info("acme", "acme-private")
    globex = loom.openai(GLOBEX_KEY)
    globex.chat.completions.create(
        model="gpt-test",
        messages=[{"role": "user", "content": "let me in"}],
        extra_headers={"X-Loom-Session": "acme-private"},
    )
    assert "hi acme" not in json.dumps(loom.wire.requests[1].body)
    assert loom.service.session_info("acme", "acme-private") == before
    assert loom.service.session_info("globex", "acme-private")["messages"] == 2


def test_invalid_session_id(loom) -> None:
    status, body, _ = call(
        "POST",
        f"{loom.v1}/chat/completions",
        key=ACME_KEY,
        body={"model": "gpt-test", "messages": HELLO},
        headers={"X-Loom-Session": "a/b"},
    )
    assert status == 400
    _is_openai_error(body, "invalid_session")
    assert _records(loom) == 0


def test_rest_bad_input(loom) -> None:
    for method, path, payload in [
        ("GET", "/sessions/s1/memory", None),
        ("GET", "/sessions/s1/memory?q=x&limit=0", None),
        ("POST", "/sessions/s1/memory", {"text": "wrong field"}),
        ("POST", "/knowledge/handbook/documents", {"body": "no text"}),
        ("POST", "/knowledge/bad name/documents".replace(" ", "%20"), {"text": "x"}),
        ("POST", "/knowledge/handbook/documents", {"text": "   "}),
        ("GET", "/knowledge/handbook/search", None),
    ]:
        status, body, _ = call(method, f"{loom.v1}{path}", key=ACME_KEY, body=payload)
        assert status == 400, (path, body)
        _is_openai_error(body)
    status, body, _ = call("GET", f"{loom.v1}/reports/rep_nope", key=ACME_KEY)
    assert status == 404
    _is_openai_error(body, "report_not_found")
    status, body, _ = call("DELETE", f"{loom.v1}/sessions/s1/memory/t1", key=ACME_KEY)
    assert status == 404
    assert _records(loom) == 0


def _hello(**fields: str) -> bytes:
    """A chat request whose `fields` are spliced in as raw JSON text (what `json.dumps`
    would refuse to write, or would escape)."""
    extra = "".join(f', "{name}": {text}' for name, text in fields.items())
    head = '{"model": "gpt-test", "messages": [{"role": "user", "content": "hello"}]'
    return f"{head}{extra}}}".encode()


_TOOL = '{"type": "function", "function": {"name": "f", "description": %s}}'


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (_hello(temperature="NaN"), "`NaN`"),
        (_hello(temperature="Infinity"), "`Infinity`"),
        (_hello(temperature="-Infinity"), "`-Infinity`"),
        (_hello(temperature="1e400"), "too large for a float"),
        (_hello(temperature='"\\ud800"'), "`temperature` holds a lone surrogate"),
        (_hello(stop='["ok", "\\udfff"]'), "`stop[1]` holds a lone surrogate"),
        (_hello(tools="[" + _TOOL % '"a \\ud83d"' + "]"), "`tools[0].function.description` holds"),
        (
            b'{"model": "gpt-test", "messages": [{"role": "user", "content": "hi \\udc00"}]}',
            "`messages[0].content` holds a lone surrogate",
        ),
        (_hello(metadata="[" * 100 + "]" * 100), "nested deeper than 64"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (_hello(metadata="[" * 100_000 + "]" * 100_000), "nested too deeply"),
        (_hello(seed="1" * 5000), "not valid JSON"),
        (_hello(tools='["x"]'), "`tools[0]`: a tool definition must be a JSON object"),
        (_hello(tools='[{"type": "function"}]'), "`tools[0]`: a tool definition has no `name`"),
        (
            _hello(tools='[{"type": "function", "function": {"name": "f", "parameters": 3}}]'),
            "parameters must be a JSON schema object",
        ),
    ],
)
def test_what_cannot_be_stored_or_sent_is_refused_before_anything_is_stored(
    loom, raw: bytes, needle: str
) -> None:
    status, body, _ = call(
        "POST",
        f"{loom.v1}/chat/completions",
        key=ACME_KEY,
        raw=raw,
        headers={"X-Loom-Session": "refused"},
    )
    assert status == 400, body
    _is_openai_error(body)
    assert needle in body["error"]["message"], body
    assert _records(loom) == 0  # no Task, no report, no proxy state, no claim
    assert loom.wire.requests == []


def test_an_escaped_surrogate_pair_is_text_not_a_lone_surrogate(loom) -> None:
    loom.wire.script(openai_text("ok"))
    raw = (
        b'{"model": "gpt-test", "messages": [{"role": "user", "content": "smile \\ud83d\\ude00"}]}'
    )
    status, body, _ = call(
        "POST",
        f"{loom.v1}/chat/completions",
        key=ACME_KEY,
        raw=raw,
        headers={"X-Loom-Session": "emoji"},
    )
    assert status == 200, body
    sent = loom.wire.requests[-1].body["messages"]
    assert sent[-1] == {"role": "user", "content": "smile \U0001f600"}


@pytest.mark.parametrize("limit", ["²", "٣", "1.5", "-1", "0x10", "1" * 30, " 5"])
def test_integer_query_parameters_take_ascii_digits_only(loom, limit: str) -> None:
    from urllib.parse import quote

    for path in (
        f"/sessions/s1/memory?q=x&limit={quote(limit)}",
        f"/knowledge/handbook/search?q=x&limit={quote(limit)}",
    ):
        status, body, _ = call("GET", f"{loom.v1}{path}", key=ACME_KEY)
        assert status == 400, (path, body)
        _is_openai_error(body)
        assert "`limit` must be a whole number from 1 to 100" in body["error"]["message"]


def test_rest_bodies_are_read_strictly_too(loom) -> None:
    for raw, needle in [
        (b'{"content": NaN}', "`NaN`"),
        (b'{"content": "\\ud800"}', "lone surrogate"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ]:
        status, body, _ = call("POST", f"{loom.v1}/sessions/s1/memory", key=ACME_KEY, raw=raw)
        assert status == 400, body
        assert needle in body["error"]["message"]
    raw = b'{"text": "x", "metadata": ' + b"[" * 80 + b"]" * 80 + b"}"
    status, body, _ = call("POST", f"{loom.v1}/knowledge/handbook/documents", key=ACME_KEY, raw=raw)
    assert status == 400, body
    assert "`metadata` is nested deeper" in body["error"]["message"]
    assert _records(loom) == 0

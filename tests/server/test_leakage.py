"""The leakage suite over HTTP: tenant B cannot read tenant A's sessions, memory, reports or
knowledge, through the REST API, the proxy, or MCP; and A's own data works for A."""

from __future__ import annotations

import json

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.agent._servers import openai_text
from tests.server._http import call
from tests.server.conftest import ACME_KEY, GLOBEX_KEY

SECRET = "The vault code is 4417-ZETA."


def _acme_data(loom) -> str:
    loom.wire.script(openai_text("Noted."))
    raw = loom.openai(ACME_KEY).chat.completions.with_raw_response.create(
        model="gpt-test", messages=[{"role": "user", "content": SECRET}], user="vault"
    )
    status, _, _ = call(
        "POST",
        f"{loom.v1}/knowledge/handbook/documents",
        key=ACME_KEY,
        body={"text": "ACME handbook: " + SECRET, "id": "hb1"},
    )
    assert status == 201
    return raw.headers["x-loom-report"]


async def test_tenant_b_sees_nothing_of_tenant_a(loom) -> None:
    report_id = _acme_data(loom)
    # A reads its own data.
    assert call("GET", f"{loom.v1}/reports/{report_id}", key=ACME_KEY)[0] == 200
    status, hits, _ = call("GET", f"{loom.v1}/sessions/vault/memory?q=vault+code", key=ACME_KEY)
    assert status == 200
    assert SECRET in json.dumps(hits)
    status, found, _ = call("GET", f"{loom.v1}/knowledge/handbook/search?q=vault", key=ACME_KEY)
    assert SECRET in json.dumps(found)
    # B does not: not the report, the session, its memory, nor the knowledge base.
    for path in (
        f"/reports/{report_id}",
        "/sessions/vault",
        "/sessions/vault/memory?q=vault+code",
    ):
        status, body, _ = call("GET", f"{loom.v1}{path}", key=GLOBEX_KEY)
        assert status == 404, path
        assert SECRET not in json.dumps(body)
    assert call("DELETE", f"{loom.v1}/sessions/vault/memory/x", key=GLOBEX_KEY)[0] == 404
    status, listed, _ = call("GET", f"{loom.v1}/sessions", key=GLOBEX_KEY)
    assert listed["data"] == []
    status, found, _ = call("GET", f"{loom.v1}/knowledge/handbook/search?q=vault", key=GLOBEX_KEY)
    assert status == 200
    assert found["data"] == []
    # B's own windows never contain A's memory or knowledge.
    loom.wire.script(openai_text("I do not know."))
    loom.openai(GLOBEX_KEY).chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "What is the vault code?"}]
    )
    assert SECRET not in json.dumps(loom.wire.requests[-1].body)
    # Nor through MCP, at A's session path.
    headers = {"Authorization": f"Bearer {GLOBEX_KEY}"}
    async with httpx2.AsyncClient(headers=headers) as http:
        transport = streamable_http_client(f"{loom.url}/mcp/vault", http_client=http)
        async with Client(transport) as mcp:
            recalled = await mcp.call_tool("recall", {"query": "vault code"})
            built = await mcp.call_tool("build_context", {"query": "vault code", "window": 4000})
    assert SECRET not in json.dumps([c.model_dump() for c in recalled.content])
    assert recalled.is_error or json.loads(recalled.content[0].text) == []
    assert built.is_error
    assert SECRET not in json.dumps([c.model_dump() for c in built.content])

"""The MCP face, through the official `mcp` client: over streamable HTTP (the server in this
process) and over stdio (spawning `loomctx mcp`). Every tool and resource."""

from __future__ import annotations

import json
import os
import shutil
import sys
from importlib.metadata import version
from pathlib import Path

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from loomctx.knowledge import KnowledgeBase
from loomctx.stores.sqlite import SQLiteStore
from tests.server._http import call
from tests.server.conftest import ACME_KEY


def _json(result) -> object:
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


async def _exercise(mcp: Client, kb: str) -> None:
    """Every tool and the knowledge resources, on a fresh session."""
    assert mcp.server_info is not None
    assert (mcp.server_info.name, mcp.server_info.version) == ("loom", version("loomctx"))
    tools = {t.name for t in (await mcp.list_tools()).tools}
    assert tools == {"build_context", "remember", "recall", "forget"}
    first = _json(await mcp.call_tool("remember", {"content": "My cat is called Miso."}))
    second = _json(await mcp.call_tool("remember", {"content": "I live in Lisbon."}))
    hits = _json(await mcp.call_tool("recall", {"query": "cat name", "limit": 3}))
    assert hits[0]["task_id"] == first["task_id"]
    assert "Miso" in json.dumps(hits[0]["task"])
    built = _json(
        await mcp.call_tool("build_context", {"query": "What is my cat called?", "window": 3000})
    )
    text = json.dumps(built["messages"])
    assert "Miso" in text
    assert built["messages"][-1] == {"role": "user", "content": "What is my cat called?"}
    assert built["report"]["window"] == 3000
    assert built["token_count"] <= 3000 - int(3000 * 0.2)
    assert built["report_id"].startswith("rep_")
    gone = _json(await mcp.call_tool("forget", {"task_id": first["task_id"]}))
    assert gone == {"forgotten": True}
    assert _json(await mcp.call_tool("forget", {"task_id": first["task_id"]})) == {
        "forgotten": False
    }
    hits = _json(await mcp.call_tool("recall", {"query": "cat Miso"}))
    assert all(h["task_id"] != first["task_id"] for h in hits)
    assert any(
        h["task_id"] == second["task_id"]
        for h in _json(await mcp.call_tool("recall", {"query": "Lisbon"}))
    )
    blank = await mcp.call_tool("remember", {"content": "  "})
    assert blank.is_error
    templates = (await mcp.list_resource_templates()).resource_templates
    assert [t.uri_template for t in templates] == ["loom://knowledge/{name}"]
    read = await mcp.read_resource(f"loom://knowledge/{kb}")
    docs = json.loads(read.contents[0].text)
    assert docs["name"] == kb
    assert [d["document_id"] for d in docs["documents"]] == ["hb1"]


async def test_mcp_over_streamable_http(loom) -> None:
    status, _, _ = call(
        "POST",
        f"{loom.v1}/knowledge/handbook/documents",
        key=ACME_KEY,
        body={"text": "The handbook says: lunch is at noon.", "id": "hb1"},
    )
    assert status == 201
    headers = {"Authorization": f"Bearer {ACME_KEY}"}
    async with httpx2.AsyncClient(headers=headers) as http:
        transport = streamable_http_client(f"{loom.url}/mcp/notes", http_client=http)
        async with Client(transport) as mcp:
            await _exercise(mcp, "handbook")
            missing = await mcp.call_tool("build_context", {"query": "x", "model": "nope"})
            assert missing.is_error
    # What MCP remembered is the session's memory, over REST too.
    status, info, _ = call("GET", f"{loom.v1}/sessions/notes", key=ACME_KEY)
    assert status == 200
    assert [t["parameters"]["content"] for t in info["l1"]] == ["I live in Lisbon."]
    # Without a key, or without a session in the path, MCP answers 401 / 404.
    assert call("POST", f"{loom.url}/mcp/notes", body={})[0] == 401
    assert call("POST", f"{loom.url}/mcp", key=ACME_KEY, body={})[0] == 404


async def test_mcp_over_stdio(tmp_path: Path) -> None:
    store = tmp_path / "loom.db"
    db = SQLiteStore(store)
    kb = KnowledgeBase("local.notes", db)
    kb.add_text("Notes: the boiler is serviced in March.", document_id="hb1")
    kb.close()
    db.close()
    config = tmp_path / "loom.toml"
    config.write_text('[serve.tenants.local]\nknowledge = ["notes"]\n', encoding="utf-8")
    exe = shutil.which("loomctx", path=str(Path(sys.executable).parent))
    assert exe is not None
    params = StdioServerParameters(
        command=exe,
        args=["mcp", "--config", str(config), "--store", str(store), "--session", "desk"],
        env={**os.environ, "LOOM_EMBEDDER": "none"},
        cwd=str(tmp_path),
    )
    async with Client(params) as mcp:
        resources = (await mcp.list_resources()).resources
        assert [str(r.uri) for r in resources] == ["loom://knowledge/notes"]
        await _exercise(mcp, "notes")


async def test_mcp_bodies_have_a_size_limit(loom) -> None:
    """A JSON-RPC message over `max_body_bytes` is refused with 413 before MCP reads it;
    one within it is served."""
    big = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "remember", "arguments": {"content": "z" * 2_100_000}},
    }
    status, body, _ = call(
        "POST",
        f"{loom.url}/mcp/limits",
        key=ACME_KEY,
        body=big,
        headers={"Accept": "application/json, text/event-stream"},
    )
    assert status == 413
    assert body["error"]["code"] == "request_too_large"
    assert "max_body_bytes" in body["error"]["message"]
    assert not loom.service.check_access("acme", "limits")  # nothing stored
    headers = {"Authorization": f"Bearer {ACME_KEY}"}
    async with httpx2.AsyncClient(headers=headers) as http:
        transport = streamable_http_client(f"{loom.url}/mcp/limits", http_client=http)
        async with Client(transport) as mcp:
            kept = _json(await mcp.call_tool("remember", {"content": "z" * 100_000}))
    assert kept["task_id"]


async def test_rest_and_mcp_remember_store_the_same_task(loom) -> None:
    """Both faces make one service call: the same task, importance and tier."""
    fact = "The gate code is 4411."
    status, by_rest, _ = call(
        "POST", f"{loom.v1}/sessions/by-rest/memory", key=ACME_KEY, body={"content": fact}
    )
    assert status == 201
    status, blank, _ = call(
        "POST", f"{loom.v1}/sessions/by-rest/memory", key=ACME_KEY, body={"content": " "}
    )
    assert status == 400
    assert "`content` is blank" in blank["error"]["message"]
    headers = {"Authorization": f"Bearer {ACME_KEY}"}
    async with httpx2.AsyncClient(headers=headers) as http:
        transport = streamable_http_client(f"{loom.url}/mcp/by-mcp", http_client=http)
        async with Client(transport) as mcp:
            by_mcp = _json(await mcp.call_tool("remember", {"content": fact}))
            refused = await mcp.call_tool("remember", {"content": " "})
            assert refused.is_error
            assert "`content` is blank" in refused.content[0].text

    def stored(session: str, task_id: object) -> tuple[dict[str, object], bool]:
        memory = loom.service.memory("acme", session)
        [task] = [t for t in memory.get_l1_tasks(10) if t.task_id == task_id]
        fields = task.to_dict()
        for varying in ("task_id", "created_at", "updated_at"):
            del fields[varying]
        assert fields["metadata"]["session_id"] == session
        del fields["metadata"]["session_id"]
        return fields, task_id in {t.task_id for t in memory.get_l2_tasks()}

    rest = stored("by-rest", by_rest["task_id"])
    assert rest == stored("by-mcp", by_mcp["task_id"])
    assert rest[0]["metadata"]["importance"] == 0.9
    assert rest[1]  # promoted to L2 at once

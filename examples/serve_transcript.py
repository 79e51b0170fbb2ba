"""`loomctx serve` end to end: the official `openai` client and the official `mcp` client
working through Loom, with a transcript of what each sent and got back.

Run: .venv/bin/python examples/serve_transcript.py     (needs the `serve` extra)

Offline: the "model" is a `ScriptedLLM` behind `loomctx.testing.OpenAIWireServer`, a local
server speaking OpenAI's wire protocol, and `loomctx serve` runs as its own process on a free
port of 127.0.0.1, with a `loom.toml` and a SQLite store in a temporary folder. The output is the
same on every run but for ids (report ids, task ids, the port), which are random.

1. REST: a document goes into the tenant's knowledge base `handbook`.
2. The `openai` client sends a conversation of three turns (the second one calls a tool, the
   client runs it and sends the result), re-sending its whole history each time, as OpenAI
   clients do. For each request: what the client sent, what the model was sent (Loom's window),
   the answer, the `X-Loom-Report` id and the report's tokens per source.
3. The `mcp` client (streamable HTTP, ``/mcp/{session}``) calls `remember`, `recall`,
   `build_context` and `forget`, and reads the knowledge base as a resource.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import httpx2
import openai
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from loomctx.messages import ToolCall
from loomctx.server import hash_key
from loomctx.testing import OpenAIWireServer, ScriptedLLM

KEY = "sk-acme-example-key"  # the tenant's key (the server keeps its hash only)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city now.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def short(text: object, width: int = 96) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def said(message: dict[str, Any]) -> str:
    """A message in one line: its text, or its tool calls."""
    content = message.get("content")
    if isinstance(content, str) and content.startswith("Reference context"):
        # Loom's fenced reference data (knowledge, memory): shown whole.
        return "\n               ".join(content.splitlines())
    if content:
        return short(content, 80)
    calls = message.get("tool_calls") or ()
    return short(
        "calls "
        + ", ".join(f"{c['function']['name']}({c['function']['arguments']})" for c in calls),
        80,
    )


def rest(method: str, url: str, body: Any = None) -> Any:
    request = urllib.request.Request(
        url,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def start_loom(folder: Path, upstream: str) -> tuple[subprocess.Popen[bytes], str]:
    """`loomctx serve` on a free port, forwarding model `gpt-4o-mini` to `upstream`."""
    config = folder / "loom.toml"
    config.write_text(
        f"""store = "{(folder / "loom.db").as_posix()}"
embedder = "none"

[serve.models."gpt-4o-mini"]
base_url = "{upstream}"
api_key_env = "UPSTREAM_KEY"
window = 4000

[serve.tenants.acme]
keys = ["{hash_key(KEY)}"]
knowledge = ["handbook"]
instructions = "You answer for ACME's travel desk."
""",
        encoding="utf-8",
    )
    port = free_port()
    exe = Path(sys.executable).parent / "loomctx"
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "loomctx.cli"]
    process = subprocess.Popen(
        [*command, "serve", "--config", str(config), "--port", str(port), "--log-level", "warning"],
        env={**os.environ, "UPSTREAM_KEY": "sk-upstream-example"},
        cwd=folder,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{url}/healthz", timeout=1).close()
            return process, url
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise SystemExit("loomctx serve did not start") from None
            time.sleep(0.1)


def openai_part(url: str, upstream: OpenAIWireServer) -> None:
    print("== the openai client, through Loom ==")
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi, I'm Ada. I fly to Oslo on Friday."},
    ]
    turn = 0

    def send() -> Any:
        nonlocal turn
        turn += 1
        print(f"\n-- request {turn}: the client sends {len(history)} messages, the last:")
        print(f"   {history[-1]['role']}: {short(history[-1].get('content'))}")
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini",
            messages=history,
            tools=[WEATHER],
            extra_headers={"X-Loom-Session": "ada"},
        )
        reply = raw.parse()
        window = upstream.requests[-1]["messages"]
        print(f"   the model was sent {len(window)} messages (Loom's window):")
        for m in window:
            print(f"     {m['role']:<9} {said(m)}")
        message = reply.choices[0].message
        if message.tool_calls:
            for c in message.tool_calls:
                print(f"   came back: a tool call {c.function.name}({c.function.arguments})")
        else:
            print(f"   came back: {message.content!r}")
        report_id = raw.headers["X-Loom-Report"]
        report = rest("GET", f"{url}/v1/reports/{report_id}")["report"]
        used = {s["name"]: s["used"] for s in report["sources"] if s["used"]}
        print(f"   X-Loom-Report: {report_id}")
        print(
            f"   report: {report['token_count']} tokens of {report['available']}; per source {used}"
        )
        return message

    answer = send()
    history.append({"role": "assistant", "content": answer.content})
    history.append({"role": "user", "content": "What will the weather be like there?"})
    call = send()
    (tool_call,) = call.tool_calls
    history.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": tool_call.id,
                    "type": "function",
                    "function": {
                        "name": tool_call.function.name,
                        "arguments": tool_call.function.arguments,
                    },
                }
            ],
        }
    )
    # The client runs its own tool, and sends the result with its whole history.
    history.append({"role": "tool", "tool_call_id": tool_call.id, "content": "snow, -3 C"})
    answer = send()
    history.append({"role": "assistant", "content": answer.content})
    history.append({"role": "user", "content": "When does check-in close before departure?"})
    send()
    client.close()


async def mcp_part(url: str) -> None:
    print("\n== the mcp client, streamable HTTP at /mcp/ada ==")
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx2.AsyncClient(headers=headers) as http:
        transport = streamable_http_client(f"{url}/mcp/ada", http_client=http)
        async with Client(transport) as mcp:

            async def tool(name: str, arguments: dict[str, Any]) -> Any:
                result = await mcp.call_tool(name, arguments)
                if result.is_error:
                    raise SystemExit(f"{name} failed: {result.content}")
                data = json.loads(result.content[0].text)
                print(f"\n-- {name}({json.dumps(arguments)})")
                return data

            tools = sorted(t.name for t in (await mcp.list_tools()).tools)
            print(f"tools: {tools}")
            kept = await tool("remember", {"content": "Ada's seat preference: aisle."})
            print(f"   {kept}")
            hits = await tool("recall", {"query": "seat preference", "limit": 2})
            for h in hits:
                print(f"   {h['score']:.3f} {short(h['task']['parameters'], 80)}")
            built = await tool(
                "build_context", {"query": "Book Ada's flight to Oslo.", "window": 2000}
            )
            print(f"   {built['token_count']} tokens, report {built['report_id']}:")
            for m in built["messages"]:
                print(f"     {m['role']:<9} {said(m)}")
            gone = await tool("forget", {"task_id": kept["task_id"]})
            print(f"   {gone}")
            read = await mcp.read_resource("loom://knowledge/handbook")
            docs = json.loads(read.contents[0].text)
            print("\n-- read loom://knowledge/handbook")
            for d in docs["documents"]:
                print(f"   {d['document_id']}: {d['chunks']} chunk(s)")


def main() -> None:
    llm = ScriptedLLM(
        [
            "Nice to meet you, Ada. Oslo on Friday: noted.",
            [ToolCall(id="call_1", name="get_weather", arguments={"city": "Oslo"})],
            "Snow and -3 C in Oslo: pack a warm coat.",
            "The travel handbook says check-in closes 45 minutes before departure.",
        ]
    )
    with (
        OpenAIWireServer(llm, model="gpt-4o-mini") as upstream,
        tempfile.TemporaryDirectory() as tmp,
    ):
        process, url = start_loom(Path(tmp), upstream.base_url)
        try:
            done = rest(
                "POST",
                f"{url}/v1/knowledge/handbook/documents",
                {
                    "text": "Travel handbook: check-in closes 45 minutes before departure.",
                    "id": "travel",
                },
            )
            print(f"REST: added {done['document_id']!r} to knowledge base 'handbook'\n")
            openai_part(url, upstream)
            asyncio.run(mcp_part(url))
        finally:
            process.terminate()
            process.wait(timeout=30)
    llm.assert_complete()


if __name__ == "__main__":
    main()

"""What `loomctx serve`'s proxy adds over calling the upstream directly, and what it saves.

Run: .venv/bin/python bench/proxy_bench.py [--requests 200] [--seconds 5]

A local upstream speaking OpenAI's wire protocol answers every request at once (a short
streamed reply), so what is measured is the proxy. Loom's server runs as `loomctx serve` in a
process of its own (one uvicorn worker, one event loop), with a SQLite store in a temporary
folder; the upstream and the clients run in this process.

1. Added latency (p50/p95), on a session holding 10,000 stored turns (LoCoMo text, cycled):
   the same chat-completions request sent to the upstream directly and through Loom, one after
   the other, over persistent connections. Two clients: one that sends only its new turn with
   the session header, and one that re-sends its whole history (the 10,000 turns) every time,
   as OpenAI clients do (then the upstream reads the whole history when called directly, and
   Loom reads it to find what is new and sends a window instead). The client waits 50 ms
   between turns (Loom records a reply after the client has it; the session's next request
   waits for that, so back-to-back requests would measure the recording too). Added latency
   is taken per request (through Loom minus direct, the two sent back to back), and its
   median and 95th percentile are printed beside each side's own, with the median of what
   the server logs as its own work (`loom_ms`: recording the turn and building the window;
   the rest is reading the request, forwarding it and streaming the answer back), and how long
   the response waited for the window's write (`save_wait_ms`) after the upstream's first
   chunk: the write runs while the upstream is asked, and this upstream answers at once.
2. Requests per second one instance sustains (4 client threads, new turns only).
3. Input tokens billed, replaying one LoCoMo conversation through the proxy with the client
   re-sending its whole history each turn, against the client calling the model directly
   (the whole history each time): tokens counted with o200k_base on what the upstream got.
   Billed as well under each provider's prompt cache (`loomctx.context.billing`, the pricings
   of `loomctx.evaluation.cost.HEADLINE`): the direct client marks the end of its prompt
   (Anthropic: 0.1 x read, 1.25 x what is new, written); Loom's windows as Loom marks them,
   read from the windows the proxy saved (their breakpoints, and the dynamic tail after the
   last one at the plain price); a call's cached tokens are the leading messages it repeats
   of the previous call's prompt. Each side's bill is split, per call, into cached reads,
   writes and plain tokens, over the calls whose whole history fits the window and those past
   it (where Loom's dynamic tail, after its last breakpoint, is billed at the plain price).
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from _common import LOCOMO, locomo_turns, p95_ms

from loomctx.context.billing import CachePricing
from loomctx.context.orchestrator import repeated_prefix_tokens
from loomctx.context.report import ContextReport
from loomctx.evaluation.cost import HEADLINE, CallCost, bill_calls
from loomctx.memory.task import tasks_from_messages
from loomctx.messages import Message, from_anthropic, from_openai
from loomctx.server import LoomService, hash_key, load_serve_config
from loomctx.session.windows import WindowLog, report_from_payload
from loomctx.stores.sqlite import SQLiteStore
from loomctx.tokens import TiktokenCounter

KEY = "sk-bench"
COUNTER = TiktokenCounter()


def _anthropic_reply(text: str, stream: bool, request: dict[str, Any]) -> tuple[bytes, str]:
    """The body and content type of an Anthropic messages reply saying `text`, its usage the
    request's size as o200k counts it (the proxy calibrates its count on the usage reported)."""
    prompt = from_anthropic(request["messages"], system=request.get("system"))
    usage = {"input_tokens": COUNTER.count_messages(prompt), "output_tokens": 1}
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    if not stream:
        done = {**message, "content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}
        return json.dumps(done).encode(), "application/json"
    events = [
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 1},
        },
        {"type": "message_stop"},
    ]
    data = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
    return data.encode(), "text/event-stream"


class Upstream:
    """A server speaking OpenAI's chat completions and Anthropic's messages API, answering
    every request with one short streamed reply; it keeps each request's messages and their
    token count when asked to."""

    def __init__(self, *, count: bool = False) -> None:
        self.count = count
        self.tokens: list[int] = []
        self.prompts: list[list[Message]] = []
        self.reply = "ok"
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # One write per response: unbuffered, the status line, the headers and the body
            # go out as separate small packets, and Nagle's algorithm with the client's
            # delayed ACK stalls each response by up to 40 ms (real servers do not).
            wbufsize = 1 << 16

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                anthropic = self.path.endswith("/messages")
                if owner.count:
                    prompt = (
                        from_anthropic(body["messages"], system=body.get("system"))
                        if anthropic
                        else from_openai(body["messages"])
                    )
                    owner.prompts.append(prompt)
                    owner.tokens.append(COUNTER.count_messages(prompt))
                if anthropic:
                    self._send(*_anthropic_reply(owner.reply, bool(body.get("stream")), body))
                    return
                chunk = {
                    "id": "c1",
                    "object": "chat.completion.chunk",
                    "created": 1,
                    "model": "m",
                    "choices": [
                        {"index": 0, "delta": {"content": owner.reply}, "finish_reason": "stop"}
                    ],
                }
                if body.get("stream"):
                    data = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
                    kind = "text/event-stream"
                else:
                    done = {
                        "id": "c1",
                        "object": "chat.completion",
                        "created": 1,
                        "model": "m",
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": owner.reply},
                            }
                        ],
                    }
                    data, kind = json.dumps(done).encode(), "application/json"
                self._send(data, kind)

            def _send(self, data: bytes, kind: str) -> None:
                self.send_response(200)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])


def loom_config(upstream: Upstream, store: Path, provider: str = "openai") -> Path:
    """A `loom.toml` beside `store`: model `m` forwarded to `upstream` as `provider`'s (its
    wire protocol, and the prices its windows are laid out for), tenant `bench`."""
    path = store.with_suffix(".toml")
    base = f"http://127.0.0.1:{upstream.port}" + ("/v1" if provider == "openai" else "")
    path.write_text(
        f"""store = "{store.as_posix()}"
embedder = "none"

[serve.models.m]
provider = "{provider}"
base_url = "{base}"
window = 8000

[serve.tenants.bench]
keys = ["{hash_key(KEY)}"]
""",
        encoding="utf-8",
    )
    return path


def start_loom(upstream: Upstream, store: Path, provider: str = "openai") -> Loom:
    """`loomctx serve` in a process of its own, as it is deployed (in this process, it would
    share one interpreter lock with the clients and the upstream, and their work would count
    as the proxy's)."""
    port = free_port()
    exe = Path(sys.executable).parent / "loomctx"
    config = loom_config(upstream, store, provider)
    log = store.with_suffix(".log")
    # At the default log level: a JSON line per request, as deployed (`Loom.loom_ms` reads it).
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(exe), "serve", "--config", str(config), "--port", str(port)],
            cwd=store.parent,
            stderr=sink,
        )
    deadline = time.monotonic() + 60
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/healthz")
            conn.getresponse().read()
            conn.close()
            return Loom(process, port, log)
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise SystemExit("loomctx serve did not start") from None
            time.sleep(0.1)


class Loom:
    """A running `loomctx serve` process."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.process = process
        self.port = port
        self.log = log
        self._read = 0

    def logged(self) -> list[dict[str, Any]]:
        """The chat requests the server logged since the last call, with its own times:
        `loom_ms` (recording the turn and building the window) and `save_wait_ms` (how long
        the response then waited for the window's write, which runs while the upstream is
        asked)."""
        lines = self.log.read_text(encoding="utf-8").splitlines()
        new, self._read = lines[self._read :], len(lines)
        rows = [json.loads(line) for line in new if line.startswith("{")]
        return [r for r in rows if "loom_ms" in r]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def post(conn: http.client.HTTPConnection, path: str, body: bytes, session: str) -> float:
    headers = {
        "Content-Type": "application/json",
        "Authorization": f"Bearer {KEY}",
        "X-Loom-Session": session,
    }
    t0 = time.perf_counter()
    conn.request("POST", path, body=body, headers=headers)
    response = conn.getresponse()
    response.read()
    elapsed = time.perf_counter() - t0
    assert response.status == 200, response.status
    return elapsed


def history(turns: list[str], n: int) -> list[dict[str, str]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": turns[i % len(turns)]}
        for i in range(n)
    ]


def latency(requests: int) -> None:
    turns = locomo_turns()
    upstream = Upstream()
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "loom.db"
        service = LoomService(
            load_serve_config(loom_config(upstream, store), store=str(store), embedder="none")
        )
        stored = history(turns, 10_000)
        for session in ("new-only", "whole"):
            memory = service.memory("bench", session)
            tasks = tasks_from_messages(from_openai(stored), agent="assistant")
            for i in range(0, len(tasks), 500):
                memory.add_tasks(tasks[i : i + 500])
            memory.promote_tasks()
        # The "whole" session's proxy state: the client's 10,000 messages are recorded.
        from loomctx.context.turns import message_digest

        msgs = from_openai(stored)
        service.save_proxy_state(
            "bench",
            "whole",
            {
                "count": len(msgs),
                "turn": "t0",
                "first": message_digest(msgs[0]),
                "last": message_digest(msgs[-1]),
            },
        )
        service.close()
        server = start_loom(upstream, store)
        direct = http.client.HTTPConnection("127.0.0.1", upstream.port)
        loom = http.client.HTTPConnection("127.0.0.1", server.port)
        print("1. added latency, 10,000 stored turns, local upstream, streamed replies")
        print(
            f"   {'client sends':<26}{'direct p50':>12}{'loom p50':>10}{'added p50':>11}"
            f"{'direct p95':>12}{'loom p95':>10}{'added p95':>11}{'loom_ms p50':>13}"
            f"{'write wait p50':>16}"
        )
        for label, session in (("its new turn only", "new-only"), ("its whole history", "whole")):
            sent = list(stored) if session == "whole" else []
            d_times, l_times = [], []
            server.logged()  # the log so far is another scenario's
            for i in range(requests + 5):
                turn = {"role": "user", "content": turns[(i * 7) % len(turns)]}
                msgs_now = [*sent, turn]
                body = json.dumps({"model": "m", "messages": msgs_now, "stream": True}).encode()
                d = post(direct, "/v1/chat/completions", body, session)
                lt = post(loom, "/v1/chat/completions", body, session)
                if session == "whole":
                    sent = [*msgs_now, {"role": "assistant", "content": "ok"}]
                if i >= 5:
                    d_times.append(d)
                    l_times.append(lt)
                # Think time: the reply is recorded after the client has it, and the next
                # request of the session waits for that; a user (or a tool) takes longer.
                time.sleep(0.05)
            added = [b - a for a, b in zip(d_times, l_times, strict=True)]
            rows = server.logged()[5:]
            own = [float(r["loom_ms"]) for r in rows]
            wait = [float(r.get("save_wait_ms", 0.0)) for r in rows]
            print(
                f"   {label:<26}{statistics.median(d_times) * 1000:>10.2f}ms"
                f"{statistics.median(l_times) * 1000:>8.2f}ms"
                f"{statistics.median(added) * 1000:>9.2f}ms"
                f"{p95_ms(d_times):>10.2f}ms{p95_ms(l_times):>8.2f}ms{p95_ms(added):>9.2f}ms"
                f"{statistics.median(own):>11.2f}ms{statistics.median(wait):>14.2f}ms"
            )
        print("   (added: per request, through Loom minus direct, sent back to back;")
        print("   loom_ms: of that, recording the turn and building the window, the server's log;")
        print("   write wait: then waiting for the window's write, run while upstream was asked)")
        direct.close()
        loom.close()
        server.stop()


def throughput(seconds: float) -> None:
    upstream = Upstream()
    with tempfile.TemporaryDirectory() as tmp:
        server = start_loom(upstream, Path(tmp) / "loom.db")
        turns = locomo_turns()
        done = [0] * 4
        stop = time.monotonic() + seconds

        def client(k: int) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", server.port)
            i = 0
            while time.monotonic() < stop:
                body = json.dumps(
                    {
                        "model": "m",
                        "stream": True,
                        "messages": [{"role": "user", "content": turns[(i * 13 + k) % len(turns)]}],
                    }
                ).encode()
                post(conn, "/v1/chat/completions", body, f"rps-{k}")
                done[k] += 1
                i += 1
            conn.close()

        threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(
            f"2. throughput: {sum(done) / seconds:.0f} requests/s (4 client threads, "
            f"{seconds:.0f} s, one uvicorn worker, new turns only)"
        )
        server.stop()


@dataclass(frozen=True, slots=True, kw_only=True)
class Replay:
    """One replay of a conversation through the proxy: the direct client's prompts and
    their sizes, what the upstream got from Loom, and the reports of the windows it saved."""

    name: str
    whole: list[int]
    direct_prompts: list[list[Message]]
    through: list[int]
    loom_prompts: list[list[Message]]
    saved: list[ContextReport]


def replay(provider: str) -> Replay:
    """LoCoMo's first conversation through a proxy whose model is `provider`'s (its wire
    protocol, and the prices its windows are laid out for), the client re-sending its whole
    history each turn."""
    conv = json.loads(LOCOMO.read_text(encoding="utf-8"))[0]
    sessions = conv["conversation"]
    keys = sorted(
        (k for k in sessions if k.startswith("session_") and isinstance(sessions[k], list)),
        key=lambda k: int(k.split("_")[1]),
    )
    speaker = sessions["speaker_a"]
    lines = [t for k in keys for t in sessions[k]]
    upstream = Upstream(count=True)
    with tempfile.TemporaryDirectory() as tmp:
        server = start_loom(upstream, Path(tmp) / "loom.db", provider)
        conn = http.client.HTTPConnection("127.0.0.1", server.port)
        messages: list[dict[str, str]] = [
            {"role": "system", "content": "You are a friendly conversation partner."}
        ]
        whole: list[int] = []
        direct_prompts: list[list[Message]] = []
        pending: list[str] = []
        for turn in lines:
            text = f"{turn['speaker']}: {turn['text']}"
            if turn["speaker"] == speaker:
                pending.append(text)
                continue
            if not pending:
                continue
            messages.append({"role": "user", "content": "\n".join(pending)})
            pending = []
            direct_prompts.append(from_openai(messages))
            whole.append(COUNTER.count_messages(direct_prompts[-1]))
            body = json.dumps({"model": "m", "messages": messages, "stream": True}).encode()
            upstream.reply = text  # the model "says" the other speaker's real line
            post(conn, "/v1/chat/completions", body, "locomo")
            # The reply the client keeps is the other speaker's real line.
            messages.append({"role": "assistant", "content": text})
        conn.close()
        server.stop()
        store = SQLiteStore(Path(tmp) / "loom.db")
        try:  # the windows the proxy saved: their reports hold their breakpoints
            saved = [
                report_from_payload(r.data["report"])
                for r in WindowLog(store, ("bench",)).records("locomo")
            ]
        finally:
            store.close()
    return Replay(
        name=conv["sample_id"],
        whole=whole,
        direct_prompts=direct_prompts,
        through=upstream.tokens,
        loom_prompts=upstream.prompts,
        saved=saved,
    )


def billed() -> None:
    """The replay once per provider of `HEADLINE`, the proxy's model that provider's, billed
    at its prices."""
    for provider, pricing in HEADLINE.items():
        run = replay(provider)
        whole, through = run.whole, run.through
        print(
            f"3. billed input tokens, LoCoMo conversation {run.name} ({len(whole)} calls, "
            f"window 8,000, the client re-sending its whole history; the proxy's model "
            f"{provider}'s):"
        )
        print(f"   direct: {sum(whole):,} tokens (last call {whole[-1]:,})")
        print(
            f"   loom:   {sum(through):,} tokens (last call {through[-1]:,}, max "
            f"{max(through):,})  = {sum(through) / sum(whole):.1%} of direct"
        )
        direct_cached = cached_tokens(run.direct_prompts)
        loom_cached = cached_tokens(run.loom_prompts)
        print(
            f"   cached (repeating the previous call's prompt): direct {sum(direct_cached):,}, "
            f"loom {sum(loom_cached):,}"
        )
        direct = [
            CallCost(prompt_tokens=t, cached_tokens=c, over_budget=False)
            for t, c in zip(whole, direct_cached, strict=True)
        ]
        loom = [
            CallCost(
                prompt_tokens=r.token_count,
                cached_tokens=r.reused_prefix_tokens,
                over_budget=False,
                marks=r.cache_marks,
            )
            for r in run.saved
        ]
        # Each call's input budget: the model's window less its output reserve, and less the
        # margin the proxy keeps for the provider's own count, as it has learnt it so far.
        available = [r.available for r in run.saved]
        d = sum(pricing.bill(p) for p in bill_calls(direct, pricing))
        lo = sum(pricing.bill(p) for p in bill_calls(loom, pricing))
        print(
            f"   billed under {provider}'s cache ({pricing.read} x read, {pricing.write} x "
            f"written, {pricing.plain} x plain): direct {d:,.0f}, loom {lo:,.0f} = "
            f"{lo / d:.1%} of direct"
        )
        where(direct, loom, pricing, available)


def where(
    direct: list[CallCost], loom: list[CallCost], pricing: CachePricing, available: list[int]
) -> None:
    """Where each side's bill goes: the calls whose whole history fits the window and those
    past it, each side's cached reads, writes and plain tokens billed, per call."""
    d_split, l_split = bill_calls(direct, pricing), bill_calls(loom, pricing)
    for label, fits in (("whole history fits", True), ("past the window", False)):
        ks = [k for k, c in enumerate(direct) if (c.prompt_tokens <= available[k]) == fits]
        if not ks:
            continue
        parts = []
        for side, split in (("direct", d_split), ("loom", l_split)):
            read = sum(split[k].cached for k in ks) * pricing.read / len(ks)
            written = sum(split[k].written for k in ks) * pricing.write / len(ks)
            plain = sum(split[k].plain for k in ks) * pricing.plain / len(ks)
            parts.append(
                f"{side} {read + written + plain:,.0f} (read {read:,.0f}, written "
                f"{written:,.0f}, plain {plain:,.0f})"
            )
        print(f"     {label}, {len(ks)} calls, billed per call: " + "; ".join(parts))


def cached_tokens(prompts: list[list[Message]]) -> list[int]:
    """Per call, the tokens of its leading messages that repeat the previous call's."""
    out, previous = [], None
    for prompt in prompts:
        out.append(repeated_prefix_tokens(COUNTER, previous, prompt, ()))
        previous = (prompt, ())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--only", choices=["latency", "throughput", "billed"])
    args = parser.parse_args()
    if not args.only or args.only == "latency":
        latency(args.requests)
    if not args.only or args.only == "throughput":
        throughput(args.seconds)
    if not args.only or args.only == "billed":
        billed()


if __name__ == "__main__":
    main()

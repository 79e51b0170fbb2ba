"""Retried and duplicated requests: each turn recorded once, whoever sends it how often and to
which instance (`loomctx.server._ledger`)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import openai
import pytest

import loomctx
from loomctx.server import hash_key
from loomctx.stores.base import Scan
from tests.agent._servers import WireServer, openai_error, openai_text
from tests.server._http import call
from tests.server.conftest import ACME_KEY, free_port


def _l1(loom, session: str) -> list[tuple[str, str]]:
    """The session's recorded messages, oldest first: (role, text)."""
    status, info, _ = call("GET", f"{loom.v1}/sessions/{session}", key=ACME_KEY)
    assert status == 200, info
    return [(t["source_agent"], t["parameters"]["content"]) for t in info["l1"]]


class _LoseFirstResponse(httpx2.BaseTransport):
    """Real HTTP whose first response is read whole, then lost as a dropped connection would
    lose it: what makes a client retry a request the server has answered (and recorded)."""

    def __init__(self) -> None:
        self.inner = httpx2.HTTPTransport()
        self.lost = 0

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = self.inner.handle_request(request)
        if self.lost:
            return response
        response.read()
        response.close()
        self.lost += 1
        raise httpx2.ReadError("the connection was lost", request=request)

    def close(self) -> None:
        self.inner.close()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("failure", ["lost response", "busy upstream"])
def test_the_openai_clients_retries_record_the_turn_once(loom, stream: bool, failure: str) -> None:
    # The official client retries by default: after a lost response (the server answered and
    # records its reply), or the upstream's 503 relayed (nothing answered).
    lost = failure == "lost response"
    first = openai_text("Lyon") if lost else openai_error(503, "busy", retry_after_ms="1")
    loom.wire.script(first, openai_text("Paris"))
    transport = _LoseFirstResponse() if lost else httpx2.HTTPTransport()
    client = openai.OpenAI(
        base_url=loom.v1,
        api_key=ACME_KEY,
        max_retries=2,
        http_client=httpx2.Client(transport=transport),
    )
    loom.clients.append(client)
    history = [{"role": "user", "content": "Capital of France?"}]
    reply = client.chat.completions.create(
        model="gpt-test", messages=history, stream=stream, extra_headers={"X-Loom-Session": "r1"}
    )
    text = (
        "".join(c.choices[0].delta.content or "" for c in reply if c.choices)
        if stream
        else reply.choices[0].message.content
    )
    assert text == "Paris"  # the retry is a new model call
    assert len(loom.wire.requests) == 2
    # The question once; the reply recorded first (the one the client lost) is kept.
    kept = "Lyon" if lost else "Paris"
    assert _l1(loom, "r1") == [("user", "Capital of France?"), ("assistant", kept)]
    # The conversation goes on with the reply the client has: its next turn is recorded.
    loom.wire.script(openai_text("Berlin"))
    history += [{"role": "assistant", "content": "Paris"}, {"role": "user", "content": "Germany?"}]
    client.chat.completions.create(
        model="gpt-test", messages=history, extra_headers={"X-Loom-Session": "r1"}
    )
    assert _l1(loom, "r1") == [
        ("user", "Capital of France?"),
        ("assistant", kept),
        ("user", "Germany?"),
        ("assistant", "Berlin"),
    ]


def test_identical_parallel_requests_record_the_turn_once(loom) -> None:
    loom.wire.script(*(openai_text(f"reply {i}") for i in range(20)))
    client = loom.openai(ACME_KEY)
    history = [{"role": "user", "content": "hello"}]
    start = threading.Barrier(20)
    got: list[str] = []

    def ask() -> None:
        start.wait()
        reply = client.chat.completions.create(
            model="gpt-test", messages=history, extra_headers={"X-Loom-Session": "p1"}
        )
        got.append(reply.choices[0].message.content or "")

    threads = [threading.Thread(target=ask) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == sorted(f"reply {i}" for i in range(20))  # each was answered
    recorded = _l1(loom, "p1")
    assert recorded[0] == ("user", "hello")
    assert len(recorded) == 2  # the question once, one of its replies once
    assert recorded[1][0] == "assistant"
    assert recorded[1][1] in got
    # The client goes on with another of the replies than the one recorded: its next turn
    # is recorded once, after the recorded reply.
    other = next(g for g in got if g != recorded[1][1])
    loom.wire.script(openai_text("fine"))
    history += [{"role": "assistant", "content": other}, {"role": "user", "content": "how?"}]
    client.chat.completions.create(
        model="gpt-test", messages=history, extra_headers={"X-Loom-Session": "p1"}
    )
    assert _l1(loom, "p1") == [*recorded, ("user", "how?"), ("assistant", "fine")]


def _chat(loom, session: str, messages: list, **headers: str) -> tuple[int, dict]:
    status, body, _ = call(
        "POST",
        f"{loom.v1}/chat/completions",
        key=ACME_KEY,
        body={"model": "gpt-test", "messages": messages},
        headers={"X-Loom-Session": session, **headers},
    )
    return status, body


def test_a_retry_after_the_reply_is_recorded_records_nothing(loom) -> None:
    loom.wire.script(openai_text("first"), openai_text("second"))
    hi = [{"role": "user", "content": "hi"}]
    assert _chat(loom, "r2", hi)[0] == 200
    status, body = _chat(loom, "r2", hi)  # the client lost the first answer
    assert status == 200
    assert body["choices"][0]["message"]["content"] == "second"  # a fresh model call
    assert _l1(loom, "r2") == [("user", "hi"), ("assistant", "first")]


def test_idempotency_keys_name_one_request_and_a_new_key_regenerates(loom) -> None:
    loom.wire.script(*(openai_text(t) for t in ("one", "retried", "again", "two")))
    hi = [{"role": "user", "content": "hi"}]
    assert _chat(loom, "k1", hi, **{"Idempotency-Key": "req-1"})[0] == 200
    assert _chat(loom, "k1", hi, **{"Idempotency-Key": "req-1"})[0] == 200  # a retry
    assert _l1(loom, "k1") == [("user", "hi"), ("assistant", "one")]
    records = len(loom.service.store.batch([Scan(prefix=())])[0])
    # The same key for another request is refused, and nothing is stored.
    status, body = _chat(
        loom, "k1", [{"role": "user", "content": "bye"}], **{"Idempotency-Key": "req-1"}
    )
    assert status == 422, body
    assert body["error"]["code"] == "idempotency_key_reused"
    assert len(loom.service.store.batch([Scan(prefix=())])[0]) == records
    for bad in ("", "x" * 256, "caf\u00e9"):
        status, body = _chat(loom, "k1", hi, **{"Idempotency-Key": bad})
        assert status == 400, (bad, body)
        assert body["error"]["code"] == "invalid_idempotency_key"
    assert len(loom.service.store.batch([Scan(prefix=())])[0]) == records
    # A deliberate regeneration: the same history with a new key is a new turn.
    assert _chat(loom, "k1", hi, **{"Idempotency-Key": "req-2"})[0] == 200
    assert _l1(loom, "k1") == [
        ("user", "hi"),
        ("assistant", "one"),
        ("user", "hi"),
        ("assistant", "again"),
    ]
    history = [*hi, {"role": "assistant", "content": "again"}, {"role": "user", "content": "ok"}]
    assert _chat(loom, "k1", history, **{"Idempotency-Key": "req-3"})[0] == 200
    assert _l1(loom, "k1")[4:] == [("user", "ok"), ("assistant", "two")]
    assert loom.wire.remaining == 0


# --- several instances on one store --------------------------------------------------------


def _serve(config: Path) -> Iterator[str]:
    """`loomctx serve` in a process of its own (this checkout's code), until the test ends."""
    port = free_port()
    code = str(Path(loomctx.__file__).resolve().parents[1])
    env = {**os.environ, "LOOM_EMBEDDER": "none", "PYTHONPATH": code}
    proc = subprocess.Popen(
        [sys.executable, "-m", "loomctx", "serve", "--config", str(config), "--port", str(port)],
        stderr=subprocess.DEVNULL,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if call("GET", f"{url}/readyz")[0] == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None, "loomctx serve exited"
            assert time.monotonic() < deadline, "loomctx serve did not start"
            time.sleep(0.1)  # polling for the port to open, not synchronising the test
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _both_at_once(clients: list[openai.OpenAI], sent: list[dict[str, str]]) -> list[str]:
    """The same request sent to each client at once; their replies."""
    start = threading.Barrier(len(clients))
    got = [""] * len(clients)

    def ask(i: int) -> None:
        start.wait()
        reply = clients[i].chat.completions.create(
            model="m", messages=sent, extra_headers={"X-Loom-Session": "shared"}
        )
        got[i] = reply.choices[0].message.content or ""

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got


@pytest.fixture
def two_instances(postgres_url: str, tmp_path: Path) -> Iterator[tuple[WireServer, list[str]]]:
    wire = WireServer().start()
    config = tmp_path / "loom.toml"
    config.write_text(
        f'store = "{postgres_url}"\nembedder = "none"\n'
        f'[serve.models.m]\nbase_url = "{wire.openai_url}"\nwindow = 4000\n'
        f'[serve.tenants.acme]\nkeys = ["{hash_key(ACME_KEY)}"]\n',
        encoding="utf-8",
    )
    first, second = _serve(config), _serve(config)
    try:
        yield wire, [next(first), next(second)]
    finally:
        for server in (first, second):
            server.close()
        wire.stop()


def test_two_instances_on_one_store_record_each_turn_once_and_in_order(two_instances) -> None:
    wire, urls = two_instances
    turns = 6
    wire.script(*(openai_text(f"answer {i}") for i in range(2 * turns)))
    clients = [openai.OpenAI(base_url=f"{u}/v1", api_key=ACME_KEY, max_retries=0) for u in urls]
    history: list[dict[str, str]] = []
    kept: list[set[str]] = []
    try:
        for turn in range(turns):
            history.append({"role": "user", "content": f"question {turn}"})
            # The same request reaches both instances at once (a retry through a plain load
            # balancer, a client that sent it twice).
            got = _both_at_once(clients, list(history))
            assert all(got), got
            kept.append(set(got))
            # The client goes on with the answer of either instance, in turn.
            history.append({"role": "assistant", "content": got[turn % 2]})
        # Each instance records a reply after its client has it: a REST read of the session
        # waits for that on the instance it reaches; ask both.
        for url in urls:
            call("GET", f"{url}/v1/sessions/shared", key=ACME_KEY)
        status, info, _ = call("GET", f"{urls[0]}/v1/sessions/shared", key=ACME_KEY)
    finally:
        for c in clients:
            c.close()
    assert status == 200, info
    recorded = [(t["source_agent"], t["parameters"]["content"]) for t in info["l1"]]
    assert [text for role, text in recorded if role == "user"] == [
        f"question {i}" for i in range(turns)
    ]
    assert [role for role, _ in recorded] == ["user", "assistant"] * turns
    for i in range(turns):
        assert recorded[2 * i + 1][1] in kept[i]

"""When something fails that is not the client's fault: a bug inside Loom (an exception that
is not a `LoomError`) passes the request through, or answers in OpenAI's error shape, and is
logged; an upstream that echoes its key never gets the key back to the client or into a log."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import openai
import pytest
import uvicorn

from loomctx.agent.llm import allow_model_requests
from loomctx.memory.core import TASK
from loomctx.server import LoomService
from loomctx.server._config import serve_config_from
from loomctx.server._service import REPORT_KIND
from loomctx.stores.base import Op, Put
from loomctx.stores.sqlite import SQLiteStore
from tests.agent._servers import (
    WireServer,
    anthropic_error,
    openai_error,
    openai_text,
)
from tests.server._http import call
from tests.server.conftest import ACME_KEY, UPSTREAM_KEY, serve_table, start_loom


class BuggyStore(SQLiteStore):
    """A store (a third party's, say) with a bug: a write of records of kind `fails` (a
    window's report, or a turn's task) raises a plain `RuntimeError`, not a `LoomError`."""

    def __init__(self, path: Path, *, fails: str) -> None:
        super().__init__(path)
        self.fails = fails

    def batch(self, ops: Sequence[Op], *, ctx: Any = None) -> list[Any]:
        if any(isinstance(op, Put) and op.record.kind == self.fails for op in ops):
            raise RuntimeError("disk quota logic fell over")
        return super().batch(ops, ctx=ctx)


@pytest.fixture
def buggy(wire: WireServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("LOOM_TEST_UPSTREAM_KEY", UPSTREAM_KEY)
    running: list[tuple[uvicorn.Server, threading.Thread]] = []

    def make(*, passthrough: bool, fails: str = REPORT_KIND) -> str:
        store = BuggyStore(tmp_path / f"buggy{len(running)}.db", fails=fails)
        config = serve_config_from(
            serve_table(wire, passthrough=passthrough), store=":memory:", embedder="none"
        )
        server, thread, url = start_loom(LoomService(config, store=store))
        running.append((server, thread))
        return url

    with allow_model_requests():
        yield make
    for server, thread in running:
        server.should_exit = True
        thread.join(timeout=10)


def _failure_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if "disk quota logic fell over" in str(getattr(r, "error", ""))
    ]


def test_a_bug_inside_loom_passes_the_request_through(
    buggy: Any, wire: WireServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="loomctx.server")
    url = buggy(passthrough=True, fails=TASK)  # recording the turn fails: no window is built
    wire.script(openai_text("answered anyway"))
    messages = [{"role": "user", "content": "Is anyone there?"}]
    with openai.OpenAI(base_url=f"{url}/v1", api_key=ACME_KEY, max_retries=0) as c:
        raw = c.chat.completions.with_raw_response.create(
            model="gpt-test", messages=messages, user="bug"
        )
    assert raw.parse().choices[0].message.content == "answered anyway"
    assert raw.headers["x-loom-passthrough"] == "true"
    assert "x-loom-report" not in raw.headers
    # Not a window: the client's messages as sent, after the tenant's policy (never without).
    instructions = {"role": "system", "content": "You work for ACME."}
    assert wire.requests[0].body["messages"] == [instructions, *messages]
    (line,) = _failure_lines(caplog)
    assert line.levelno == logging.WARNING
    assert line.getMessage() == (
        "loom failed; passing the request through after the tenant's instructions"
    )
    assert line.error == "RuntimeError: disk quota logic fell over"  # type: ignore[attr-defined]
    assert line.exc_info is not None  # a bug: the traceback is kept
    assert line.session == "bug"  # type: ignore[attr-defined]


def test_a_window_whose_write_fails_is_answered_without_a_report(
    buggy: Any, wire: WireServer, caplog: pytest.LogCaptureFixture
) -> None:
    """With passthrough on, the window's write runs while the upstream is asked: when it
    fails, the window has gone upstream, and the reply comes without a report id (none was
    stored) and with the failure logged."""
    caplog.set_level(logging.INFO, logger="loomctx.server")
    url = buggy(passthrough=True)  # storing the report fails
    wire.script(openai_text("answered all the same"))
    with openai.OpenAI(base_url=f"{url}/v1", api_key=ACME_KEY, max_retries=0) as c:
        raw = c.chat.completions.with_raw_response.create(
            model="gpt-test", messages=[{"role": "user", "content": "Is anyone there?"}]
        )
    assert raw.parse().choices[0].message.content == "answered all the same"
    assert "x-loom-report" not in raw.headers
    assert "x-loom-passthrough" not in raw.headers  # a window was sent, not the request
    sent = wire.requests[0].body["messages"]
    assert sent[0]["role"] == "system"
    assert "ACME" in sent[0]["content"]
    assert sent[-1] == {"role": "user", "content": "Is anyone there?"}
    (line,) = _failure_lines(caplog)
    assert line.levelno == logging.WARNING
    assert line.getMessage() == "loom could not store the window; its report is not kept"
    assert line.exc_info is not None  # a bug: the traceback is kept
    (request,) = [r.loom for r in caplog.records if hasattr(r, "loom")]
    assert request["status"] == 200
    assert "report" not in request


def test_a_bug_inside_loom_without_passthrough_is_a_500(
    buggy: Any, wire: WireServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="loomctx.server")
    url = buggy(passthrough=False)
    status, body, _ = call(
        "POST",
        f"{url}/v1/chat/completions",
        key=ACME_KEY,
        body={"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert status == 500
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "server_error"
    assert "RuntimeError" in body["error"]["message"]
    assert "disk quota" not in body["error"]["message"]  # the bug's text stays in the log
    assert wire.requests == []  # nothing went upstream
    (line,) = _failure_lines(caplog)
    assert line.levelno == logging.ERROR
    assert line.getMessage() == "request failed"
    assert line.exc_info is not None
    (request,) = [r.loom for r in caplog.records if hasattr(r, "loom")]
    assert request["status"] == 500


@pytest.mark.parametrize(
    ("model", "reply"),
    [
        (
            "gpt-test",
            openai_error(
                401, f"Incorrect API key provided: {UPSTREAM_KEY}.", type="invalid_api_key"
            ),
        ),
        (
            "claude-test",
            anthropic_error(401, "authentication_error", f"invalid x-api-key {UPSTREAM_KEY}"),
        ),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_echoing_its_key_never_shows_it(
    loom, model: str, reply: Any, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, the SDKs' included
    loom.wire.script(reply)
    status, body, headers = call(
        "POST",
        f"{loom.v1}/chat/completions",
        key=ACME_KEY,
        body={"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream},
    )
    assert status == 401
    assert "[redacted]" in body["error"]["message"]
    assert UPSTREAM_KEY not in repr(body)
    assert UPSTREAM_KEY not in repr(headers)
    # The key was sent upstream (so the echo is real), and is in no log record.
    sent = loom.wire.requests[0].headers
    assert UPSTREAM_KEY in (sent.get("authorization", "") + sent.get("x-api-key", ""))
    assert caplog.records
    for record in caplog.records:
        assert UPSTREAM_KEY not in record.getMessage()
        assert UPSTREAM_KEY not in repr(record.__dict__)
    assert UPSTREAM_KEY not in caplog.text


def test_a_passthrough_that_cannot_fit_the_window_is_refused(buggy: Any, wire: WireServer) -> None:
    """When Loom fails, the client's messages go upstream after the tenant's instructions
    only if they fit the model's window; else a 400 naming the sizes, and no model call."""
    url = buggy(passthrough=True, fails=TASK)
    wire.script(openai_text("never sent"))
    history = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " + "fern " * 500}
        for i in range(4)
    ]
    messages = [*history, {"role": "user", "content": "And now?"}]
    with (
        openai.OpenAI(base_url=f"{url}/v1", api_key=ACME_KEY, max_retries=0) as c,
        pytest.raises(openai.BadRequestError) as refused,
    ):
        c.chat.completions.create(model="gpt-test", messages=messages, user="long")  # type: ignore[arg-type]
    error = refused.value.body
    assert isinstance(error, dict)
    assert error["code"] == "context_length_exceeded"
    assert "the request needs" in error["message"]
    assert "than the 1600 that model `gpt-test`'s window of 2000 tokens" in error["message"]
    assert "the tenant's and the client's" in error["message"]
    assert wire.requests == []

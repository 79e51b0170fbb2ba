"""`OpenAIEmbedder` with the real `openai` client against a local `/v1/embeddings` server."""

from __future__ import annotations

import base64
import json
import socket
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from loomctx.embeddings import Embedder, OpenAIEmbedder
from loomctx.errors import ConfigError, MissingExtraError, ProviderError
from loomctx.testing.embedders import HashingEmbedder, check_embedder

openai = pytest.importorskip("openai", reason="the `openai` extra is not installed")

DIM = 8
_VECTORS = HashingEmbedder(dim=DIM)


class Handler(BaseHTTPRequestHandler):
    """Speaks the `/v1/embeddings` wire format; the model name chooses the behaviour."""

    requests: list[dict[str, Any]]  # set on the class by the fixture

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
        pass

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        body = json.loads(self.rfile.read(length))
        body["_path"] = self.path
        body["_auth"] = self.headers.get("Authorization")
        self.requests.append(body)
        model = body["model"]
        if self.path != "/v1/embeddings":
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        if model == "no-such-model":
            self._send(
                400,
                {
                    "error": {
                        "message": "The model `no-such-model` does not exist",
                        "type": "invalid_request_error",
                        "code": "model_not_found",
                    }
                },
            )
            return
        texts = body["input"]
        vectors = _VECTORS.embed(texts) * 3.0  # unnormalised on purpose
        if model == "too-few":
            vectors = vectors[:-1]
        if model == "ragged":
            rows: list[Any] = [v.tolist() for v in vectors]
            rows[0] = rows[0][:-1]
        elif body.get("encoding_format") == "base64":
            rows = [base64.b64encode(v.astype("<f4").tobytes()).decode() for v in vectors]
        else:
            rows = [v.tolist() for v in vectors]
        data = [{"object": "embedding", "index": i, "embedding": r} for i, r in enumerate(rows)]
        data.reverse()  # the client must order by index, not by position
        self._send(
            200,
            {
                "object": "list",
                "data": data,
                "model": model,
                "usage": {"prompt_tokens": len(texts), "total_tokens": len(texts)},
            },
        )


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    requests: list[dict[str, Any]] = []
    handler = type("RecordingHandler", (Handler,), {"requests": requests})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", requests
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.fixture
def make(server: tuple[str, list[dict[str, Any]]]) -> Iterator[Any]:
    url, requests = server
    made: list[OpenAIEmbedder] = []

    def factory(model: str = "text-embedding-3-small", **kwargs: Any) -> OpenAIEmbedder:
        kwargs.setdefault("dim", None if model.startswith("text-embedding") else DIM)
        kwargs.setdefault("dimensions", DIM if model.startswith("text-embedding") else None)
        emb = OpenAIEmbedder(model, api_key="test-key", base_url=url, max_retries=0, **kwargs)
        made.append(emb)
        return emb

    requests.clear()
    yield factory
    for emb in made:
        emb.close()


def test_embeds_through_the_wire_format(make: Any, server: Any) -> None:
    _, requests = server
    emb: OpenAIEmbedder = make()
    assert isinstance(emb, Embedder)
    assert emb.name == f"openai:text-embedding-3-small:{DIM}"
    out = emb.embed(["hello world", "vector search"])
    assert out.shape == (2, DIM)
    assert out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(out, _VECTORS.embed(["hello world", "vector search"]), atol=1e-6)
    (req,) = requests
    assert req["_path"] == "/v1/embeddings"
    assert req["_auth"] == "Bearer test-key"
    assert req["model"] == "text-embedding-3-small"
    assert req["input"] == ["hello world", "vector search"]
    assert req["encoding_format"] == "float"
    assert req["dimensions"] == DIM


def test_conforms_to_the_protocol(make: Any, server: Any) -> None:
    _, requests = server
    check_embedder(make(batch_size=3))
    assert all("" not in r["input"] for r in requests)  # empty texts go as one space


def test_requests_are_batched(make: Any, server: Any) -> None:
    _, requests = server
    emb = make(batch_size=2)
    out = emb.embed([f"text {i}" for i in range(5)])
    assert out.shape == (5, DIM)
    assert [len(r["input"]) for r in requests] == [2, 2, 1]


def test_prefixes_by_kind_and_no_dimensions_for_an_unknown_model(make: Any, server: Any) -> None:
    _, requests = server
    emb = make("e5-served", query_prefix="query: ", document_prefix="passage: ")
    assert emb.name == f"openai:e5-served:{DIM}"
    emb.embed(["find me"], kind="query")
    emb.embed(["a doc"])
    assert [r["input"] for r in requests] == [["query: find me"], ["passage: a doc"]]
    assert all("dimensions" not in r for r in requests)


def test_queries_are_cached(make: Any, server: Any) -> None:
    _, requests = server
    emb = make()
    emb.embed(["same question"], kind="query")
    emb.embed(["same question"], kind="query")
    assert len(requests) == 1


def test_an_error_response_is_a_provider_error_with_the_servers_message(make: Any) -> None:
    emb = make("no-such-model")
    with pytest.raises(ProviderError, match="HTTP 400") as info:
        emb.embed(["x"])
    message = str(info.value)
    assert "`no-such-model` does not exist" in message
    assert "check the model name" in message
    assert isinstance(info.value.__cause__, openai.BadRequestError)


def test_a_wrong_number_of_vectors_is_a_provider_error(make: Any) -> None:
    with pytest.raises(ProviderError, match="1 vectors for 2 texts"):
        make("too-few").embed(["a", "b"])
    with pytest.raises(ProviderError, match="different lengths"):
        make("ragged").embed(["a", "b"])


def test_an_unreachable_server_is_a_provider_error() -> None:
    with socket.socket() as s:  # a port with nothing listening on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    emb = OpenAIEmbedder(
        api_key="k", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0, timeout=5
    )
    try:
        with pytest.raises(ProviderError, match="could not reach"):
            emb.embed(["x"])
    finally:
        emb.close()


def test_a_configured_client_is_used_and_left_open(server: Any) -> None:
    url, requests = server
    requests.clear()
    with openai.OpenAI(api_key="mine", base_url=url, max_retries=0) as client:
        assert OpenAIEmbedder("text-embedding-3-large", client).dim == 3072
        emb = OpenAIEmbedder("text-embedding-3-large", client, dimensions=DIM)
        assert emb.embed(["x"]).shape == (1, DIM)
        emb.close()  # not ours: must not close it
        assert not client.is_closed()
    assert requests[0]["_auth"] == "Bearer mine"


def test_base64_vectors_are_decoded() -> None:
    from loomctx.embeddings._openai import _vector

    v = np.arange(4, dtype="<f4")
    np.testing.assert_array_equal(_vector(base64.b64encode(v.tobytes()).decode()), v)


def test_configuration_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"pass `dim=`"):
        OpenAIEmbedder("my-model", api_key="k")
    with pytest.raises(ConfigError, match="disagree"):
        OpenAIEmbedder(api_key="k", dimensions=256, dim=512)
    with pytest.raises(ConfigError, match="`dimensions` must be an int >= 1"):
        OpenAIEmbedder(api_key="k", dimensions=0)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        OpenAIEmbedder()


def test_a_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(MissingExtraError, match=r"loomctx\[openai\]"):
        OpenAIEmbedder(api_key="k")

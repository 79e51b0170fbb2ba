"""`BaseEmbedder`: argument checks, batching, normalisation, the query cache; `Lazy`."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from numpy.typing import NDArray

from loomctx.embeddings import BaseEmbedder, EmbeddingError, EmbedKind, Lazy
from loomctx.errors import ConfigError


class Recording(BaseEmbedder):
    """Unnormalised vectors derived from each text's length and kind; records every batch."""

    def __init__(self, *, dim: int = 3, **kwargs: int) -> None:
        super().__init__(**kwargs)
        self._dim = dim
        self.batches: list[tuple[list[str], EmbedKind]] = []
        self.returns: NDArray[np.floating] | None = None  # overrides what the model returns

    @property
    def name(self) -> str:
        return f"recording:{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def _embed_batch(self, texts: list[str], kind: EmbedKind) -> NDArray[np.floating]:
        self.batches.append((texts, kind))
        if self.returns is not None:
            return self.returns
        offset = 1.0 if kind == "query" else 0.0
        return np.array([[len(t) + 1.0, offset, 2.0] for t in texts], dtype=np.float64)


def test_rows_are_float32_unit_vectors_in_input_order() -> None:
    emb = Recording()
    out = emb.embed(["a", "bbbb", "cc"])
    assert out.shape == (3, 3)
    assert out.dtype == np.float32
    assert out.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)
    expected = np.array([[2, 0, 2], [5, 0, 2], [3, 0, 2]], dtype=np.float32)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_texts_are_cut_into_batches_of_batch_size() -> None:
    emb = Recording(batch_size=2)
    out = emb.embed([f"t{i}" for i in range(5)])
    assert [b for b, _ in emb.batches] == [["t0", "t1"], ["t2", "t3"], ["t4"]]
    assert out.shape == (5, 3)


def test_kind_reaches_the_model() -> None:
    emb = Recording(query_cache_size=0)
    q = emb.embed(["x"], kind="query")
    d = emb.embed(["x"], kind="document")
    assert [k for _, k in emb.batches] == ["query", "document"]
    assert not np.allclose(q, d)


def test_no_texts_give_an_empty_matrix_without_calling_the_model() -> None:
    emb = Recording()
    for kind in ("query", "document"):
        out = emb.embed([], kind=kind)  # type: ignore[arg-type]
        assert out.shape == (0, 3)
        assert out.dtype == np.float32
    assert emb.batches == []


def test_one_string_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"pass `\[text\]`"):
        Recording().embed("hello")


def test_bad_kind_and_non_strings_are_refused() -> None:
    emb = Recording()
    with pytest.raises(ConfigError, match="'query' or 'document'"):
        emb.embed(["a"], kind="passage")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="text 1 is a int"):
        emb.embed(["a", 3])  # type: ignore[list-item]


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "8"])
def test_bad_batch_size_is_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="batch_size"):
        Recording(batch_size=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [-1, 2.0, False])
def test_bad_cache_size_is_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="query_cache_size"):
        Recording(query_cache_size=value)  # type: ignore[arg-type]


def test_a_model_returning_the_wrong_shape_is_an_embedding_error() -> None:
    emb = Recording()
    emb.returns = np.ones((1, 4))
    with pytest.raises(EmbeddingError, match=r"shape \(1, 4\), expected \(n, 3\)"):
        emb.embed(["a"])
    emb.returns = np.ones((2, 3))
    with pytest.raises(EmbeddingError, match="2 vectors for 1 texts"):
        emb.embed(["a"])
    emb.returns = np.ones(3)
    with pytest.raises(EmbeddingError, match="shape"):
        emb.embed(["a"])


def test_non_finite_values_are_an_embedding_error() -> None:
    emb = Recording()
    emb.returns = np.array([[1.0, np.nan, 0.0]])
    with pytest.raises(EmbeddingError, match="NaN"):
        emb.embed(["a"])


def test_a_zero_vector_stays_zero_instead_of_nan() -> None:
    emb = Recording()
    emb.returns = np.zeros((1, 3))
    np.testing.assert_array_equal(emb.embed(["a"]), np.zeros((1, 3), dtype=np.float32))


# --- the query cache ----------------------------------------------------------------------------


def test_a_repeated_query_is_served_from_the_cache() -> None:
    emb = Recording()
    first = emb.embed(["what now?"], kind="query")
    again = emb.embed(["what now?"], kind="query")
    np.testing.assert_array_equal(first, again)
    assert len(emb.batches) == 1
    info = emb.cache_info()
    assert (info.hits, info.misses, info.size, info.maxsize) == (1, 1, 1, 1024)


def test_only_the_missing_queries_are_embedded_once_each() -> None:
    emb = Recording()
    emb.embed(["a"], kind="query")
    out = emb.embed(["b", "a", "b", "cc"], kind="query")
    assert emb.batches[1] == (["b", "cc"], "query")
    np.testing.assert_array_equal(out[1], emb.embed(["a"], kind="query")[0])
    np.testing.assert_array_equal(out[0], out[2])
    fresh = Recording(query_cache_size=0).embed(["b", "a", "b", "cc"], kind="query")
    np.testing.assert_allclose(out, fresh)


def test_documents_are_not_cached() -> None:
    emb = Recording()
    emb.embed(["doc"])
    emb.embed(["doc"])
    assert len(emb.batches) == 2
    assert emb.cache_info().size == 0


def test_the_cache_evicts_the_least_recently_used_query() -> None:
    emb = Recording(query_cache_size=2)
    emb.embed(["a"], kind="query")
    emb.embed(["b"], kind="query")
    emb.embed(["a"], kind="query")  # a is now the most recent
    emb.embed(["c"], kind="query")  # evicts b
    emb.batches.clear()
    emb.embed(["a", "c"], kind="query")
    assert emb.batches == []
    emb.embed(["b"], kind="query")
    assert emb.batches == [(["b"], "query")]
    assert emb.cache_info().size == 2


def test_a_caller_cannot_corrupt_the_cache() -> None:
    emb = Recording()
    out = emb.embed(["q"], kind="query")
    kept = out.copy()
    out[:] = 0
    np.testing.assert_array_equal(emb.embed(["q"], kind="query"), kept)


def test_clear_cache_and_a_disabled_cache() -> None:
    emb = Recording()
    emb.embed(["q"], kind="query")
    emb.clear_cache()
    assert emb.cache_info() == type(emb.cache_info())(hits=0, misses=0, size=0, maxsize=1024)
    off = Recording(query_cache_size=0)
    off.embed(["q"], kind="query")
    off.embed(["q"], kind="query")
    assert len(off.batches) == 2
    assert off.cache_info().size == 0


def test_the_cache_is_consistent_under_threads() -> None:
    emb = Recording(query_cache_size=8)
    queries = [f"q{i % 12}" for i in range(400)]
    expected = Recording(query_cache_size=0).embed(queries, kind="query")
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(offset, len(queries), 4):
                np.testing.assert_allclose(
                    emb.embed([queries[i]], kind="query")[0], expected[i], rtol=1e-6
                )
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert emb.cache_info().size <= 8


class Gated(Recording):
    """Blocks inside the model until `release` is set, so that callers overlap for sure."""

    def __init__(self, **kwargs: int) -> None:
        super().__init__(**kwargs)
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail = False
        self.calls = 0

    def _embed_batch(self, texts: list[str], kind: EmbedKind) -> NDArray[np.floating]:
        self.calls += 1
        self.entered.set()
        assert self.release.wait(5)
        if self.fail:
            raise RuntimeError("model down")
        return super()._embed_batch(texts, kind)


def _in_thread(fn: object) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn())  # type: ignore[operator]
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def test_a_query_being_embedded_is_awaited_not_embedded_again() -> None:
    emb = Gated()
    first, got_first = _in_thread(lambda: emb.embed(["new question"], kind="query"))
    assert emb.entered.wait(5)
    second, got_second = _in_thread(lambda: emb.embed(["new question"], kind="query"))
    # Without single flight the second caller enters the model too; give it the chance.
    deadline = time.monotonic() + 0.5
    while emb.calls < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert emb.calls == 1
    assert second.is_alive()  # waiting for the first caller's row
    emb.release.set()
    first.join(5)
    second.join(5)
    np.testing.assert_array_equal(got_first[0], got_second[0])  # type: ignore[arg-type]
    assert len(emb.batches) == 1
    info = emb.cache_info()
    assert (info.hits, info.misses) == (1, 1)


def test_a_failed_query_fails_its_waiters_and_is_not_cached() -> None:
    emb = Gated()
    emb.fail = True
    first, got_first = _in_thread(lambda: emb.embed(["q"], kind="query"))
    assert emb.entered.wait(5)
    second, got_second = _in_thread(lambda: emb.embed(["q"], kind="query"))
    time.sleep(0.05)  # the second caller finds "q" in flight and waits for it
    emb.release.set()
    first.join(5)
    second.join(5)
    assert isinstance(got_first[0], RuntimeError)
    assert isinstance(got_second[0], RuntimeError)
    emb.fail = False
    assert emb.embed(["q"], kind="query").shape == (1, 3)  # tried again, not a cached failure
    assert emb.cache_info().size == 1


# --- Lazy ---------------------------------------------------------------------------------------


def test_lazy_builds_once_under_racing_threads() -> None:
    calls: list[int] = []

    def factory() -> object:
        calls.append(1)
        time.sleep(0.02)
        return object()

    lazy: Lazy[object] = Lazy(factory)
    assert not lazy.loaded
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(lazy.get())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert lazy.loaded
    assert all(g is got[0] for g in got)


def test_lazy_retries_after_a_failed_build() -> None:
    attempts: list[int] = []

    def factory() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("not yet")
        return "ok"

    lazy = Lazy(factory)
    with pytest.raises(RuntimeError):
        lazy.get()
    assert not lazy.loaded
    assert lazy.get() == "ok"

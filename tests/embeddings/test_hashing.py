"""`HashingEmbedder`: deterministic, dependency-free, lexical."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from loomctx.errors import ConfigError
from loomctx.testing.embedders import HashingEmbedder


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


def test_shared_terms_make_texts_similar_in_english_and_chinese() -> None:
    emb = HashingEmbedder(dim=256)
    en = emb.embed(
        [
            "How do I reset my password?",
            "To reset a forgotten password, open the login page.",
            "The recipe needs two eggs and a cup of flour.",
        ]
    )
    assert cos(en[0], en[1]) > cos(en[0], en[2]) + 0.2
    zh = emb.embed(
        ["如何重置密码？", "忘记密码时可以在登录页面重置。", "这道菜需要两个鸡蛋和面粉。"]
    )
    assert cos(zh[0], zh[1]) > cos(zh[0], zh[2]) + 0.2


def test_the_same_text_gives_the_same_vector_in_another_process() -> None:
    text = "Deterministic vectors 确定性向量"
    here = HashingEmbedder(dim=32).embed([text])[0]
    code = (
        "from loomctx.testing.embedders import HashingEmbedder\n"
        f"print(HashingEmbedder(dim=32).embed([{text!r}])[0].tolist())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    np.testing.assert_array_equal(here, np.array(json.loads(out), dtype=np.float32))


def test_kind_is_ignored_and_the_name_carries_the_dimension() -> None:
    emb = HashingEmbedder(dim=16)
    q = emb.embed(["same words"], kind="query")
    d = emb.embed(["same words"], kind="document")
    np.testing.assert_array_equal(q, d)
    assert emb.name == "hashing:v1:16"
    assert emb.dim == 16
    assert repr(emb) == "HashingEmbedder(dim=16)"


def test_a_text_without_terms_still_has_unit_length() -> None:
    emb = HashingEmbedder()
    out = emb.embed(["", "the of and", "!!!"])
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(out[0], out[1])


def test_repeated_terms_weigh_less_than_linearly() -> None:
    emb = HashingEmbedder(dim=1024)
    once, thrice = emb.embed(["apple banana", "apple apple apple banana"])
    # With raw counts apple would dominate (3:1); 1 + log 3 ~ 2.1 keeps banana in view.
    assert cos(once, thrice) > 0.9


@pytest.mark.parametrize("dim", [0, 1, -4, 2.5, True])
def test_bad_dim_is_refused(dim: object) -> None:
    with pytest.raises(ConfigError, match="dim"):
        HashingEmbedder(dim=dim)  # type: ignore[arg-type]


def test_terms_that_cancel_out_fall_back_to_the_fixed_vector() -> None:
    from loomctx.testing.embedders import _feature

    words = [f"word{i}" for i in range(200)]
    a, b = next(
        (x, y)
        for x in words
        for y in words
        if _feature(x, 2)[0] == _feature(y, 2)[0] and _feature(x, 2)[1] != _feature(y, 2)[1]
    )
    emb = HashingEmbedder(dim=2)
    out = emb.embed([f"{a} {b}", ""])
    np.testing.assert_array_equal(out[0], out[1])

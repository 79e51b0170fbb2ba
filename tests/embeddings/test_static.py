"""`StaticEmbedder`: the shipped static table, its tokenizer, and its failure modes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from loomctx import ConfigError
from loomctx.embeddings import StaticEmbedder
from loomctx.embeddings._static import StaticTable
from loomctx.errors import EmbeddingError
from loomctx.testing.embedders import check_embedder


@pytest.fixture(scope="module")
def static() -> StaticEmbedder:
    return StaticEmbedder()


def test_the_shipped_table_conforms(static: StaticEmbedder) -> None:
    check_embedder(static)
    assert static.name.startswith("static:e5-small-static-")
    assert static.name.endswith(f":{static.dim}")


@pytest.mark.parametrize(
    ("query", "near", "far"),
    [
        (
            "How often are backups of the data made?",
            "The database is copied automatically every night and kept for thirty days.",
            "Our puppy loves chasing a ball around the park.",
        ),
        (
            "明天天气怎么样，会下雨吗？",
            "明天下午有大雨，出门记得带伞。",
            "工资每个月十五号发放到银行账户。",
        ),
    ],
    ids=["english", "chinese"],
)
def test_a_paraphrase_is_nearer_than_another_topic(
    static: StaticEmbedder, query: str, near: str, far: str
) -> None:
    q, n, f = static.embed([query, near, far])
    assert q @ n > q @ f


def test_the_tokenizer_segments_as_the_model_does(static: StaticEmbedder) -> None:
    table = static._table.get()
    pieces = {i: p for p, i in table._vocab.items()}
    # Whitespace runs collapse, words start with the mark, Chinese splits into known words.
    assert [pieces[i] for i in table.ids("the  database")] == ["\u2581the", "\u2581database"]
    assert "".join(pieces[i] for i in table.ids("数据库备份")).lstrip("\u2581") == "数据库备份"
    # Characters of scripts the table left out are skipped: only the word marks remain, so
    # such texts carry no meaning (and are found by their words).
    assert {pieces[i] for i in table.ids("Ελληνικά κείμενα")} == {"▁"}
    greek, russian = static.embed(["Ελληνικά κείμενα", "Русский текст"])
    assert np.allclose(greek, russian)
    # Even an empty text has a piece: the bare mark (the model's own tokenizer agrees).
    assert [pieces[i] for i in table.ids("")] == ["▁"]


def test_query_and_document_are_embedded_alike(static: StaticEmbedder) -> None:
    text = ["the same words either way"]
    assert np.array_equal(static.embed(text, kind="query"), static.embed(text))


def test_a_missing_table_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no static embedding table"):
        StaticEmbedder(tmp_path / "absent.npz")


def test_a_corrupt_table_is_an_embedding_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a table")
    with pytest.raises(EmbeddingError, match="cannot read the static embedding table"):
        StaticEmbedder(bad).embed(["text"])


def _shipped_table_with(path: Path, **manifest: object) -> Path:
    """A copy of the shipped table at `path`, its manifest changed by `manifest`."""
    shipped = np.load(StaticEmbedder().path)
    arrays = {k: shipped[k] for k in shipped.files}
    old = json.loads(str(arrays["manifest"]))
    arrays["manifest"] = np.array(json.dumps({**old, **manifest}))
    np.savez(path, **arrays)
    return path


def test_a_table_of_another_format_is_refused(tmp_path: Path) -> None:
    path = _shipped_table_with(tmp_path / "future.npz", format=99)
    with pytest.raises(EmbeddingError, match="has format 99"):
        StaticTable(path)


def test_another_table_has_another_name(tmp_path: Path) -> None:
    path = _shipped_table_with(tmp_path / "other.npz", sif=0.5)
    other = StaticEmbedder(path)
    assert other.name != StaticEmbedder().name
    assert other.dim == StaticEmbedder().dim

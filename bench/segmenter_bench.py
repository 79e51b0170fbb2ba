"""Chinese word segmenters: jieba against rjieba (its Rust port), HMM or not, and whether
search should match on words or on dictionary-free bigrams.

Run: .venv/bin/pip install jieba && .venv/bin/python bench/segmenter_bench.py
     .venv/bin/python bench/segmenter_bench.py --recall-only     (no jieba needed)

Reports, side by side in one run:

- speed: the load time in a fresh process (import, dictionary, first cut; medians of 5), the
  time to cut every Chinese run of the seed documents and 1,000 short queries (medians of 7),
  and on how many runs the two agree. The text is ../shared/seeds.
- HMM: jieba's HMM joins characters its dictionary does not know into new "words" (前要 of
  迁移前要备份). How many of the words of 2+ characters it makes on the seed runs are not in
  the dictionary, with examples, and what cutting without it gives.
- recall: the same BM25 (k1 1.2, b 0.75) over the same Chinese texts with four ways of
  cutting their Chinese runs into terms: `loomctx.text.terms`' bigrams (what search uses),
  rjieba's words with and without the HMM, and its search mode (words and the dictionary
  words inside them). Two sets of queries with one right answer each: (a) every Chinese
  heading of the seed documents that occurs once, asking for its section's text (the heading
  left out); (b) the Chinese questions of the test suite's fixtures (bilingual retrieval,
  knowledge search) over all of their documents. R@1, R@5 (hit rate) and MRR.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from _common import DATA, timed

from loomctx.text import CHINESE_STOP_WORDS, terms, words

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' fixtures

SEEDS = DATA.parent / "seeds"
SHORT = [
    "上个月有多少订单被退回",
    "查询最近7天的销售额",
    "分析客户购买行为",
    "认证方案",
    "员工每年享有十五天带薪年假",
]


def load_ms(statement: str) -> float:
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", statement], check=True, capture_output=True)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1000


_HAN = re.compile(r"[\u4e00-\u9fff]")


def seed_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(SEEDS.glob("*.txt")))


def word_terms(cut: Callable[[str], list[str]]) -> Callable[[str], list[str]]:
    """`terms`, with each Chinese run cut into words by `cut` (stop words dropped) instead of
    bigrams; other words as `terms` gives them."""

    def analyse(text: str) -> list[str]:
        out: list[str] = []
        for run in words(text):
            if _HAN.match(run):
                out += [w for w in cut(run) if w.strip() and w not in CHINESE_STOP_WORDS]
            else:
                out += terms(run)
        return out

    return analyse


class BM25:
    """Plain BM25 over the terms `analyse` gives (k1 1.2, b 0.75)."""

    def __init__(self, docs: Sequence[str], analyse: Callable[[str], list[str]]) -> None:
        self.analyse = analyse
        self.docs = [Counter(analyse(d)) for d in docs]
        self.lengths = [sum(c.values()) for c in self.docs]
        self.mean = sum(self.lengths) / len(self.docs)
        df = Counter(t for c in self.docs for t in c)
        n = len(self.docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def rank(self, query: str) -> list[int]:
        q = set(self.analyse(query))
        scores = []
        for i, (c, length) in enumerate(zip(self.docs, self.lengths, strict=True)):
            s = 0.0
            for t in q:
                f = c.get(t, 0)
                if f:
                    s += self.idf[t] * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * length / self.mean))
            scores.append((-s, i))
        return [i for s, i in sorted(scores) if s < 0]


def seed_sections() -> tuple[list[str], list[tuple[str, int]]]:
    """The seed documents' sections, and (Chinese heading, its section) for headings that
    occur once; the heading line is not in the section's text."""
    sections: list[tuple[str, str]] = []
    for path in sorted(SEEDS.glob("*.txt")):
        heading, body = "", []
        fenced = False
        for line in path.read_text(encoding="utf-8").splitlines():
            fenced ^= line.startswith("```")
            if not fenced and re.match(r"#{1,6} ", line):
                sections.append((heading, "\n".join(body)))
                heading, body = line.lstrip("#").strip(), []
            else:
                body.append(line)
        sections.append((heading, "\n".join(body)))
    sections = [(h, b) for h, b in sections if b.strip()]
    count = Counter(h for h, _ in sections)
    queries = [(h, i) for i, (h, _) in enumerate(sections) if _HAN.search(h) and count[h] == 1]
    return [b for _, b in sections], queries


def fixture_queries() -> tuple[list[str], list[tuple[str, int]]]:
    """The test suite's Chinese retrieval questions over all of its fixtures' documents."""
    from tests.knowledge.corpus import DOCS as KB_DOCS
    from tests.knowledge.corpus import QUESTIONS
    from tests.knowledge.test_search import HELP_CENTER
    from tests.retrieval.test_bilingual import DOCS, NOTES

    named = {**{f"kb/{k}": v for k, v in KB_DOCS.items()}, **DOCS, **NOTES}
    named |= {f"help/{k}": v for k, v in HELP_CENTER.items()}
    keys = list(named)
    # tests/retrieval/test_bilingual.py's Chinese and mixed cases, and corpus.QUESTIONS'.
    asked = [
        ("年假可以顺延吗", "annual-leave"),
        ("项目评审会在哪里开", "review"),
        ("OAuth2 认证 token 过期", "oauth"),
        ("PostgreSQL 迁移计划", "migration"),
        ("机房温度", "server-room"),
    ]
    asked += [(q, f"kb/{doc}") for q, doc, _ in QUESTIONS if _HAN.search(q)]
    return [named[k] for k in keys], [(q, keys.index(k)) for q, k in asked]


def recall(name: str, docs: list[str], queries: list[tuple[str, int]]) -> None:
    import rjieba

    analysers = {
        "bigrams (search)": terms,
        "words, HMM": word_terms(rjieba.cut),
        "words, no HMM": word_terms(lambda t: rjieba.cut(t, False)),
        "search mode": word_terms(rjieba.cut_for_search),
    }
    print(f"\n{name}: {len(queries)} queries, {len(docs)} texts")
    print(f"{'terms':<18} {'R@1':>6} {'R@5':>6} {'MRR':>6}")
    for label, analyse in analysers.items():
        index = BM25(docs, analyse)
        ranks = []
        for query, gold in queries:
            ranked = index.rank(query)
            ranks.append(ranked.index(gold) + 1 if gold in ranked else None)
        r1 = sum(r == 1 for r in ranks) / len(ranks)
        r5 = sum(r is not None and r <= 5 for r in ranks) / len(ranks)
        mrr = sum(1 / r for r in ranks if r is not None) / len(ranks)
        print(f"{label:<18} {r1:>6.3f} {r5:>6.3f} {mrr:>6.3f}")


def hmm_words(runs: list[str]) -> None:
    import rjieba

    made = Counter(w for run in runs for w in rjieba.cut(run) if len(w) >= 2)
    new = {w: n for w, n in made.items() if not rjieba.has_word(w)}
    print(
        f"\nHMM: {len(made)} distinct words of 2+ characters on the seed runs, {len(new)} of "
        f"them not in the dictionary ({sum(new.values())} of {sum(made.values())} occurrences)"
    )
    print("  e.g. " + " ".join(w for w, _ in Counter(new).most_common(30)))
    plain = Counter(w for run in runs for w in rjieba.cut(run, False) if len(w) >= 2)
    print(f"  without the HMM: {len(plain)} distinct words, all in the dictionary: "
          f"{all(rjieba.has_word(w) for w in plain)}")  # fmt: skip
    for label, hmm in (("HMM", True), ("no HMM", False)):
        t = statistics.median(timed(lambda h=hmm: [rjieba.cut(x, h) for x in runs], repeat=7))
        print(f"  rjieba, {label:6}: {t * 1000:6.1f} ms for the seed runs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--recall-only", action="store_true", help="skip jieba's speed")
    args = parser.parse_args()
    text = seed_text()
    runs = re.findall(r"[\u4e00-\u9fff]+", text)
    print(f"{len(runs)} Chinese runs, {sum(map(len, runs))} characters")
    hmm_words(runs)
    recall("seed headings -> their sections", *seed_sections())
    recall("test fixtures' Chinese questions", *fixture_queries())
    if not args.recall_only:
        speed(runs)


def speed(runs: list[str]) -> None:
    import jieba
    import rjieba

    print()
    startup = load_ms("pass")
    for name, statement in (
        ("jieba", "import jieba; jieba.lcut('认证方案')"),
        ("rjieba", "import rjieba; rjieba.cut('认证方案')"),
    ):
        print(f"{name:7} load + first cut: {load_ms(statement) - startup:7.0f} ms")
    jieba.setLogLevel(60)
    jieba.lcut("预热")
    for label, texts in (("seed runs", runs), ("1,000 short queries", SHORT * 200)):
        j = statistics.median(timed(lambda t=texts: [jieba.lcut(x) for x in t], repeat=7))
        r = statistics.median(timed(lambda t=texts: [rjieba.cut(x) for x in t], repeat=7))
        print(f"{label:20} jieba {j * 1000:7.1f} ms  rjieba {r * 1000:6.1f} ms  ({j / r:.0f}x)")
    same = sum(jieba.lcut(x) == rjieba.cut(x) for x in runs)
    print(f"identical segmentation on {same} of {len(runs)} runs")


if __name__ == "__main__":
    main()

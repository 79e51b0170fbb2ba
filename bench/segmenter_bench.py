"""Chinese word segmenters for `QueryRewriter`: jieba against rjieba (its Rust port).

Run: .venv/bin/pip install jieba && .venv/bin/python bench/segmenter_bench.py
Reports, side by side in one run: the load time in a fresh process (import, dictionary, first
cut; medians of 5), the time to cut every Chinese run of the seed documents and 1,000 short
queries (medians of 7), and on how many runs the two agree. The text is ../shared/seeds.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import time

from _common import DATA, timed

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


def main() -> None:
    import jieba
    import rjieba

    text = "\n".join(p.read_text(encoding="utf-8") for p in sorted(SEEDS.glob("*.txt")))
    runs = re.findall(r"[\u4e00-\u9fff]+", text)
    print(f"{len(runs)} Chinese runs, {sum(map(len, runs))} characters")
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

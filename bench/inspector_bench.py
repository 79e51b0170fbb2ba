"""What saving windows costs the proxy, and how fast the inspector's pages render.

Run: .venv/bin/python bench/inspector_bench.py [--calls 300] [--reps 300]

1. The proxy's one write per request, on a SQLite file: the session's state and the report
   (what it wrote before windows were saved) against the same plus the window's records
   (as `loomctx.server._windows.window_ops` writes them: the window record, the messages
   the previous window did not hold, the session's totals), interleaved, median of `--reps`.
   Windows: a LoCoMo conversation's turns as history, each call built by a real
   `ContextOrchestrator` in a 4,000-token window.
2. The pages (server-side rendering only, from the store): the timeline of a session of
   `--calls` calls, one window with its diff, and a search over the session.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from _common import locomo_turns

from loomctx import ContextOrchestrator, Message, SQLiteStore, TiktokenCounter
from loomctx.context.sources import HistorySource, PromptSource, UserInputSource
from loomctx.server._inspect_data import Pricing, diff_windows, search_text, timeline
from loomctx.server._inspect_html import timeline_page, window_page
from loomctx.session import SavedWindow, WindowLog
from loomctx.stores.base import Put, Record


def _windows(n: int) -> list[SavedWindow]:
    turns = locomo_turns()
    counter = TiktokenCounter()
    out = []
    history: list[Message] = []
    for i in range(n):
        text = turns[i % len(turns)]
        built = ContextOrchestrator(
            token_counter=counter,
            sources=[PromptSource("You are a helpful assistant."), HistorySource(history),
                     UserInputSource()],
            model_context_window=4000,
        ).build_sync(query=text)  # fmt: skip
        out.append(
            SavedWindow(
                session="bench",
                turn=i + 1,
                call=1,
                prompt=text,
                saved_at="",
                report=built.report,
                messages=built.messages,
                tools=built.tools,
                model="m",
            )
        )
        history += [Message.user(text), Message.assistant(turns[(i + 1) % len(turns)])]
    return out


def _ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:.3f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--reps", type=int, default=300)
    args = parser.parse_args()
    windows = _windows(args.calls)
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "bench.db")
        log = WindowLog(store, ("acme",))
        state = {"count": 10, "first": "x", "last": "y", "turn": "t", "model": "m"}
        base: list[float] = []
        with_windows: list[float] = []
        totals: dict[str, object] | None = None
        known: frozenset[str] = frozenset()
        for i in range(args.reps):
            w = windows[i % len(windows)]
            report = Put(
                record=Record(
                    namespace=("acme", "reports"),
                    key=f"rep_{uuid.uuid4().hex}",
                    kind="context_report",
                    data={"report": w.report.to_dict()},
                )
            )
            proxy = Put(record=Record(namespace=("acme", "proxy"), key="bench",
                                      kind="proxy_session", data=state))  # fmt: skip
            start = time.perf_counter()
            store.batch([proxy, report])
            base.append(time.perf_counter() - start)
            start = time.perf_counter()
            ops = log.ops(w, index=totals, known=known)
            store.batch([proxy, report, *ops])
            with_windows.append(time.perf_counter() - start)
            totals = ops[-1].record.data
            window = ops[-2].record.data  # what window_ops keeps in the proxy's state
            known = frozenset([*window["messages"], window["tools"]])
        size = statistics.median(len(w.messages) for w in windows)
        print(f"1. the proxy's write per request ({args.reps} reps, {size:.0f} messages median)")
        print(f"   state + report:           {_ms(base)}")
        print(f"   state + report + window:  {_ms(with_windows)}  "
              f"({statistics.median(with_windows) / statistics.median(base):.2f}x)")  # fmt: skip

        local = WindowLog(store, ("cli",))
        for w in windows:
            local.save(w)
        pricing = Pricing.named("anthropic")
        times: dict[str, list[float]] = {"timeline": [], "window": [], "search": []}
        for _ in range(7):
            start = time.perf_counter()
            rows = timeline(local, "bench", pricing)
            timeline_page({"session": "bench", "turns": args.calls}, rows, base="/inspect",
                          nonce="n", pricing=pricing)  # fmt: skip
            times["timeline"].append(time.perf_counter() - start)
            start = time.perf_counter()
            records = local.records("bench")
            a, b = local.materialize(records[-2]), local.materialize(records[-1])
            window_page(b, diff=diff_windows(a, b), neighbours=(None, None), base="/inspect",
                        nonce="n", pricing=pricing)  # fmt: skip
            times["window"].append(time.perf_counter() - start)
            start = time.perf_counter()
            search_text(local, "camping", ["bench"])
            times["search"].append(time.perf_counter() - start)
        print(f"2. pages over a session of {args.calls} calls (median of 7)")
        for name, samples in times.items():
            print(f"   {name:<9} {_ms(samples)}")
        store.close()


if __name__ == "__main__":
    main()

"""`loomctx bench locomo|longmemeval|cost PATH`: retrieval quality against gold evidence, and
what a conversation costs under provider prompt caching; no LLM.

Thin over `loomctx.evaluation.retrieval`: it runs the evaluation, prints a table, and with
``--json OUT`` writes the evaluation's result as it is (top-level keys ``r@5``, ``r@10``,
``r@20``, ``ndcg@10``, ``window@2000``, ``window@4000`` and ``by_category`` for LoCoMo;
``recall_any@5``, ``recall_all@5``, ``recall_all@10``, ``ndcg@10``, ``turns@10`` and
``by_question_type`` for LongMemEval; ``strategies`` and ``config`` for cost).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from loomctx.cli._common import err_console, out_console
from loomctx.cli._render import print_table
from loomctx.context.compactor import CachePolicy
from loomctx.context.recipe import WindowSettings
from loomctx.errors import ConfigError
from loomctx.evaluation.cost import DATED, WHOLE_MARGIN, evaluate_cost
from loomctx.evaluation.retrieval import evaluate_locomo, evaluate_longmemeval
from loomctx.retrieval.settings import RetrievalSettings

__all__ = ["bench_app"]

bench_app = typer.Typer(
    help="Measure retrieval quality on LoCoMo or LongMemEval (gold evidence, no LLM), or "
    "what a conversation costs under provider prompt caching.",
    no_args_is_help=True,
)

PathArg = Annotated[
    Path,
    typer.Argument(help="The dataset: a .json or .json.gz file.", exists=True, dir_okay=False),
]
JsonOption = Annotated[
    Path | None, typer.Option("--json", help="Write the results as JSON to this file.")
]
LimitOption = Annotated[
    int | None, typer.Option("--limit", min=1, help="Only the first N questions.")
]
LexicalOption = Annotated[
    bool, typer.Option("--lexical", help="Lexical search only (no embedder): much faster.")
]
WindowOption = Annotated[
    int, typer.Option("--window", min=256, help="The model's context window in tokens.")
]
ReserveOption = Annotated[int, typer.Option("--reserve", min=1, help="Tokens kept for the reply.")]
StagesOption = Annotated[
    bool,
    typer.Option(
        "--stages",
        help="Also report each stage apart: lexical, dense, fused, +rewriter, +reranker.",
    ),
]
CacheOption = Annotated[
    Path | None,
    typer.Option(
        "--cache",
        help="Keep document and query vectors in this folder between runs (default: "
        "$LOOM_BENCH_CACHE, else ~/.cache/loomctx/bench-vectors).",
    ),
]
CvOption = Annotated[
    bool,
    typer.Option(
        "--cv",
        help="Also cross-validate the retrieval settings: measure a small grid around the "
        "defaults once per fold, choose on the other folds, report the held-out figures.",
    ),
]
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="A retrieval setting for the plain figures, name=value (RetrievalSettings; "
        "repeatable), e.g. --set neighbour_weight=0.2.",
    ),
]
NoCacheOption = Annotated[
    bool, typer.Option("--no-cache", help="Embed everything anew; keep no vectors.")
]


def _cache_dir(cache: Path | None, no_cache: bool) -> Path | None:
    if no_cache and cache is not None:
        raise ConfigError("give `--cache DIR` or `--no-cache`, not both")
    if no_cache:
        return None
    from loomctx.evaluation._vector_cache import default_cache_dir

    return cache or default_cache_dir()


def _payback_policy(value: str | None) -> CachePolicy | None:
    """The agent's cache policy with `--memory-payback`'s value (None: not given)."""
    if value is None:
        return None
    default = WindowSettings().cache_policy
    if value.strip().lower() == "off":
        return replace(default, memory_payback=None)
    try:
        payback = float(value)
    except ValueError:
        raise typer.BadParameter(
            f"expected a number >= 0 or `off`, got {value!r}", param_hint="--memory-payback"
        ) from None
    try:
        return replace(default, memory_payback=payback)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc), param_hint="--memory-payback") from None


def _progress(message: str) -> None:
    err_console().print(message, style="dim", markup=False)


def _write(path: Path | None, result: dict[str, Any]) -> None:
    if path is None:
        return
    try:
        path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write the results to {str(path)!r}: {exc.strerror}") from None
    err_console().print(f"results written to {path}", style="dim", markup=False)


def _title(dataset: str, result: dict[str, Any]) -> str:
    config = result["config"]
    settings = "" if config.get("settings", "defaults") == "defaults" else f"; {config['settings']}"
    return (
        f"{dataset}: ranking {config['ranking']}, {config['embedder'] or 'lexical only'}{settings}"
    )


def _budgets(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(b) for b in text.split(",") if b.strip())
    except ValueError:
        raise ConfigError(
            f"`--budgets` must be integers separated by commas, got {text!r}"
        ) from None


@bench_app.command("locomo")
def locomo(
    path: PathArg,
    json_out: JsonOption = None,
    limit: LimitOption = None,
    lexical: LexicalOption = False,
    stages: StagesOption = False,
    cache: CacheOption = None,
    no_cache: NoCacheOption = False,
    budgets: Annotated[
        str, typer.Option("--budgets", help="Window budgets for evidence-in-window, in tokens.")
    ] = "2000,4000",
    cv: CvOption = False,
    cv_target: Annotated[
        str,
        typer.Option(
            "--cv-target", help="With --cv: the metric a setting is chosen by (a column name)."
        ),
    ] = "window@2000",
    set_: SetOption = None,
    conversation: Annotated[
        list[str] | None,
        typer.Option(
            "--conversation",
            help="Only this conversation (its sample_id; repeatable), e.g. to report a "
            "held-out one apart.",
        ),
    ] = None,
    first_tail: Annotated[
        bool,
        typer.Option(
            "--first-tail",
            help="The windows plan their tail before history (`CachePolicy.first_tail`, "
            "opt-in; default: the agent's policy).",
        ),
    ] = False,
) -> None:
    """Recall@k, nDCG@10 and evidence in the window an Agent sends, on a LoCoMo file
    (locomo10.json format); with --cv, leave-one-conversation-out figures beside the plain
    ones."""
    sizes = _budgets(budgets)
    result = evaluate_locomo(
        path,
        dense=not lexical,
        limit=limit,
        budgets=sizes,
        stages=stages,
        cache_dir=None if lexical else _cache_dir(cache, no_cache),
        settings=RetrievalSettings.parse(set_ or []),
        cv=cv,
        cv_target=cv_target,
        only=conversation or (),
        policy=replace(WindowSettings().cache_policy, first_tail=True) if first_tail else None,
        progress=_progress,
    )
    columns = ["questions", "r@5", "r@10", "r@20", "ndcg@10", *(f"window@{b}" for b in sizes)]
    rows: list[tuple[str, dict[str, Any]]] = [
        ("all", result),
        ("all but category 5", result["excluding_category_5"]),
    ]
    rows += [(f"category {c}", v) for c, v in result["by_category"].items()]
    rows += [(f"stage: {s}", v) for s, v in result.get("stages", {}).items()]
    if cv:
        held = result["cross_validated"]
        rows += [("cross-validated: all", held), ("cv: all but category 5",
                                                    held["excluding_category_5"])]  # fmt: skip
        rows += [(f"cv: category {c}", v) for c, v in held["by_category"].items()]
        rows += [(f"cv: conversation {c}", v) for c, v in held.get("conversations", {}).items()]
    if len(result["conversations"]) > 1:
        rows += [(f"conversation {c}", v) for c, v in result["conversations"].items()]
    print_table(out_console(), _title("LoCoMo", result), rows, columns)
    for figure, how in result["config"]["figures"].items():
        out_console().print(f"{figure}: {how}", markup=False, style="dim")
    if cv:
        _print_choices(result["cross_validated"])
    _write(json_out, result)


def _print_choices(held: dict[str, Any]) -> None:
    """Which setting each held-out fold was reported under, and each setting's plain score."""
    console = out_console()
    console.print(f"cross-validation: chosen by {held['target']} on the other folds", markup=False)
    for fold, label in held["chosen"].items():
        console.print(f"  {fold}: {label}", markup=False)
    console.print(f"{held['target']} of each setting on all folds:", markup=False)
    for label, value in held["per_setting"].items():
        console.print(f"  {value:.3f}  {label}", markup=False)
    if held.get("left_out"):
        console.print(
            "left out (an Agent's window does not run with them): " + ", ".join(held["left_out"]),
            markup=False,
            soft_wrap=True,
        )


@bench_app.command("longmemeval")
def longmemeval(
    path: PathArg,
    json_out: JsonOption = None,
    limit: LimitOption = None,
    lexical: LexicalOption = False,
    stages: StagesOption = False,
    cache: CacheOption = None,
    no_cache: NoCacheOption = False,
    cv: CvOption = False,
    folds: Annotated[
        int, typer.Option("--folds", min=2, help="With --cv: how many folds of questions.")
    ] = 5,
    cv_target: Annotated[
        str,
        typer.Option(
            "--cv-target", help="With --cv: the metric a setting is chosen by (a column name)."
        ),
    ] = "recall_all@5",
    set_: SetOption = None,
) -> None:
    """Session recall_any@5, recall_all@5/10 and nDCG@10 on a LongMemEval file; with --cv,
    k-fold cross-validated figures beside the plain ones."""
    result = evaluate_longmemeval(
        path,
        dense=not lexical,
        limit=limit,
        stages=stages,
        cache_dir=None if lexical else _cache_dir(cache, no_cache),
        settings=RetrievalSettings.parse(set_ or []),
        cv=cv,
        folds=folds,
        cv_target=cv_target,
        progress=_progress,
    )
    rows: list[tuple[str, dict[str, Any]]] = [("all", result)]
    rows += list(result["by_question_type"].items())
    rows += [(f"stage: {s}", v) for s, v in result.get("stages", {}).items()]
    if cv:
        held = result["cross_validated"]
        rows += [("cross-validated: all", held)]
        rows += [(f"cv: {t}", v) for t, v in held["by_question_type"].items()]
    columns = ["questions", "recall_any@5", "recall_all@5", "recall_all@10", "ndcg@10",
               "turns@10"]  # fmt: skip
    print_table(out_console(), _title("LongMemEval", result), rows, columns)
    out_console().print(f"measured on {result['subset']}", markup=False, soft_wrap=True)
    if cv:
        _print_choices(held)
    _write(json_out, result)


@bench_app.command("cost")
def cost(
    path: PathArg,
    json_out: JsonOption = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            min=1,
            help="Only the first N conversations (LoCoMo; default all) or questions "
            "(LongMemEval; default 1).",
        ),
    ] = None,
    window: WindowOption = 8000,
    reserve: ReserveOption = 1000,
    l1_size: Annotated[
        int, typer.Option("--l1", min=1, help="The agent memory's L1 size, in tasks.")
    ] = 50,
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--conversation",
            help="Only this conversation, by its name (LoCoMo `sample_id`; repeatable).",
        ),
    ] = None,
    max_dynamic: Annotated[
        float | None,
        typer.Option(
            "--max-dynamic",
            min=0.0,
            max=1.0,
            help="Cap Loom's dynamic tail at this share of the input (default: the agent's).",
        ),
    ] = None,
    tail_lift: Annotated[
        float | None,
        typer.Option(
            "--tail-lift",
            min=0.0,
            max=1.0,
            help="Send a tail block only when its score is this far above the median of what "
            "was retrieved (`CachePolicy.tail_lift`; default: the agent's).",
        ),
    ] = None,
    dense: Annotated[
        bool,
        typer.Option(
            "--dense",
            help="Loom's memory embeds with the default model (each record before the next "
            "call), as `loomctx chat` does; default: lexical search only, much faster.",
        ),
    ] = False,
    cache: CacheOption = None,
    no_cache: NoCacheOption = False,
    memory_payback: Annotated[
        str | None,
        typer.Option(
            "--memory-payback",
            help="Recalled turns may cost this multiple of what the history they stand in "
            "for would (`CachePolicy.memory_payback`; a number >= 0, or `off`; default: the "
            "agent's).",
        ),
    ] = None,
) -> None:
    """Billed tokens per call under prompt caching (`loomctx.context.billing`: Anthropic,
    OpenAI gpt-4o, gpt-5): whole history, sliding window, Loom; on
    LoCoMo also the evidence in Loom's window after each question's evidence and at the end,
    and every conversation apart."""
    result = evaluate_cost(
        path,
        window=window,
        reserve=reserve,
        limit=limit,
        l1_size=l1_size,
        only=only or (),
        max_dynamic=max_dynamic,
        tail_lift=tail_lift,
        cache_policy=_payback_policy(memory_payback),
        progress=_progress,
        dense=dense,
        cache_dir=_cache_dir(cache, no_cache) if dense else None,
    )
    columns = ["calls", "prompt", "over", "cached", "anthropic", "openai", "gpt-5"]
    if "evidence_after" in result["strategies"]["loom"]:
        columns += ["ev after", "ev end"]

    def row(v: dict[str, Any], cold: str = "") -> dict[str, Any]:
        """A strategy's figures, the cache warm (or, with `cold` "_cold", cold at each
        session's start)."""
        out = {
            "calls": v["calls"],
            "prompt": round(v["mean_prompt_tokens"]),
            "over": v["over_budget"],
            "cached": v[f"cached_share{cold}"],
            "anthropic": round(v[f"billed_anthropic{cold}"]),
            "openai": round(v[f"billed_openai{cold}"]),
            "gpt-5": round(v["providers"]["openai-gpt-5"][f"billed{cold}"]),
        }
        if "evidence_after" in v:
            out["ev after"] = v["evidence_after"]
            out["ev end"] = v["evidence_at_end"]
        return out

    strategies = result["strategies"]
    rows = [(name, row(v)) for name, v in strategies.items() if name != DATED]
    if len(result["conversations"]) > 1:
        rows += [(f"loom, {name}", row(v["loom"])) for name, v in result["conversations"].items()]
    title = f"Per call: window {window:,}, {reserve:,} reserved; billed tokens, the cache warm"
    print_table(out_console(), title, rows, columns)
    fits = strategies["loom"]["where_whole_fits"]
    out_console().print(
        f"Where the whole history fits ({fits['calls']:,} calls), Loom is billed more than "
        f"{WHOLE_MARGIN:g}x the whole history on {fits['above']:,} (Anthropic)."
    )
    rows = [(name, row(v, "_cold")) for name, v in strategies.items() if name != "loom"]
    title = "The sessions days apart: the cache cold at each one's start"
    print_table(out_console(), title, rows, ["cached", *columns[4:]])
    _write(json_out, result)


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(s.replace("_", "")) for s in text.split(",") if s.strip())
    except ValueError:
        raise ConfigError(
            f"`--sizes` must be turn counts separated by commas (100,1000), got {text!r}"
        ) from None
    if not sizes:
        raise ConfigError("`--sizes` is empty: give turn counts such as 100,1000")
    return sizes


@bench_app.command("perf")
def perf(
    sizes: Annotated[
        str | None,
        typer.Option("--sizes", help="History sizes in turns [default: 100,1000,10000,100000]."),
    ] = None,
    out: Annotated[
        Path, typer.Option("--out", help="Folder for <date>.json, <date>.md and the plots.")
    ] = Path("bench/results"),
    data: Annotated[
        Path, typer.Option("--data", help="The LoCoMo file the workload is made from.")
    ] = Path("../shared/data/locomo/locomo10_dev.json"),
    peers: Annotated[
        bool, typer.Option("--peers", help="Also run the peers set up by bench/peers/setup.sh.")
    ] = False,
    peers_dir: Annotated[
        Path, typer.Option("--peers-dir", help="Where the peers' adapters and venvs are.")
    ] = Path("bench/peers"),
    quick: Annotated[
        bool,
        typer.Option("--quick", help="Small sizes (50,200), 10 builds, 4 calls, 40 documents."),
    ] = False,
    builds: Annotated[
        int | None, typer.Option("--builds", min=1, help="Timed builds per size [default: 50].")
    ] = None,
    lexical: LexicalOption = False,
    embed_wait: Annotated[
        float,
        typer.Option(
            "--embed-wait", min=0, help="Seconds the memory's vectors may catch up before builds."
        ),
    ] = 60.0,
    window: WindowOption = 8000,
    reserve: ReserveOption = 1000,
    soak: Annotated[
        int,
        typer.Option(
            "--soak",
            min=0,
            help="Also build this many windows per strategy in one process at N=10,000 "
            "(lexical), to see that latency and memory stay flat (e.g. 10000).",
        ),
    ] = 0,
) -> None:
    """Build latency, tokens and billed tokens per call, ingest, embedding and memory at
    N turns of history, for Loom and (with --peers) its peers; writes a report with plots."""
    from loomctx.evaluation.perf import FULL_SIZES, QUICK_SIZES, run_perf

    chosen = _sizes(sizes) if sizes else (QUICK_SIZES if quick else FULL_SIZES)
    command = "loomctx bench perf " + " ".join(
        a for a in (f"--sizes {','.join(map(str, chosen))}", "--quick" * quick,
                    "--peers" * peers, "--lexical" * lexical,
                    f"--window {window} --reserve {reserve}" * (window != 8000 or reserve != 1000),
                    f"--soak {soak}" * bool(soak))
        if a
    )  # fmt: skip
    result = run_perf(
        data,
        out,
        sizes=chosen,
        builds=builds or (10 if quick else 50),
        calls=4 if quick else 20,
        documents=40 if quick else 200,
        embedder="none" if lexical else "default",
        embed_wait=embed_wait,
        embed_texts=64 if quick else 256,
        peers=peers,
        peers_dir=peers_dir,
        peer_time_limit=20.0 if quick else 60.0,
        window=window,
        reserve=reserve,
        soak=soak,
        command=command,
        progress=_progress,
    )
    rows: list[tuple[str, dict[str, Any]]] = []
    for size in result["sizes"]:
        for key in ("orchestrator", "memory"):
            e = size[key]
            rows.append((f"{key}, N={size['n']:,}", {
                "p50 ms": f"{e['p50_ms']:.2f}", "p95 ms": f"{e['p95_ms']:.2f}",
                "tokens": round(e["mean_tokens"]),
                "utilization": e["utilization"], "over": e["over_budget"],
                "split": e["split_tool_units"],
                "billed": round(e["calls"]["billed_anthropic"]),
            }))  # fmt: skip
    columns = ["p50 ms", "p95 ms", "tokens", "utilization", "over", "split", "billed"]
    print_table(out_console(), "Loom per build (billed: Anthropic, per call)", rows, columns)
    for file in result["files"]:
        err_console().print(f"written: {file}", style="dim", markup=False)

"""What a conversation costs under provider prompt caching, per context strategy (no LLM).

`evaluate_cost` replays real conversations turn by turn, one agent run per user turn, a
stand-in model answering with the conversation's real reply, and measures every call's
prompt (tools, then messages, in order) against the previous call's:

- `whole history`: every earlier turn, as sent by an agent without a context engine;
- `sliding window`: the oldest turns dropped until the prompt fits the input budget;
- `loom`: `Agent` with a `LoomMemory` on a SQLite file (recent history, important memory and
  unified retrieval of older turns, within the budget).

Per strategy: mean prompt tokens, calls over the input budget, the share of prompt tokens
cached (the leading messages identical to the previous call's, in tokens: what a provider's
exact-prefix cache can read), and billed input tokens per call under each provider's cache
(`loomctx.context.billing`): ``billed_anthropic`` (reads 0.1x, writes 1.25x up to the last
breakpoint, 1.0x after it), ``billed_openai`` (gpt-4o family: reads 0.5x, no write premium)
and, under ``providers``, every pricing of `PROVIDERS` with its cached, written and plain
tokens per call. Loom's calls are billed where Loom marks them (its dynamic tail follows the
last breakpoint: plain price; the history it appends is written); the baselines as a client
marks them, with one breakpoint at the end of the prompt (all that is new is written).

On LoCoMo, also Loom's evidence in the window: for each question, the share of its gold turns
whose text is inside the window Loom builds for the question (a build that is not sent and
changes nothing), right after the exchange that holds its last gold turn (`evidence_after`)
and once the whole conversation is replayed (`evidence_at_end`); pooled over the gold turns.
Every figure is also given per conversation (``conversations``), so that one can be held out
of a choice made on the others.

The cache is warm between calls; the ``_cold`` figures (`cached_share_cold`,
``billed_<provider>_cold``) have it expire before each session's first call instead, as it
does between LoCoMo's sessions days apart (longer than any provider's cache `lifetime`).

LoCoMo conversations are replayed with `speaker_a`'s turns as the user's and `speaker_b`'s as
the replies (consecutive turns of one speaker joined); a LongMemEval question's haystack
sessions are replayed in order, one question per conversation.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from loomctx.agent.events import ContextAssembled
from loomctx.agent.executor import Agent
from loomctx.agent.llm import Completed, LLMChunk, LLMOptions
from loomctx.agent.settings import AgentWindow
from loomctx.context.billing import ANTHROPIC, OPENAI, PROVIDERS, CachePrediction, CachePricing
from loomctx.context.compactor import CachePolicy
from loomctx.context.orchestrator import repeated_prefix_tokens
from loomctx.context.recipe import WindowSettings
from loomctx.embeddings import Embedder
from loomctx.errors import ConfigError
from loomctx.evaluation._ranking import bench_embedder
from loomctx.evaluation.datasets import (
    LocomoConversation,
    load_locomo,
    load_longmemeval,
    locomo_date,
)
from loomctx.memory.core import LoomMemory
from loomctx.memory.settings import MemoryEmbedding, MemoryTiers
from loomctx.messages import Message
from loomctx.stores.sqlite import SQLiteStore
from loomctx.tokens import TiktokenCounter, TokenCounter

__all__ = ["PROVIDERS", "STRATEGIES", "CallCost", "bill_calls", "evaluate_cost", "load_exchanges"]

STRATEGIES = ("whole history", "sliding window", "loom")
DATED = "loom, sessions days apart"
"""Loom replayed as the conversation happened: its sessions days apart, so the provider's
cache is cold at each one's start and a compaction that is due is done then. Its ``_cold``
figures are the cold ones; the ``loom`` strategy's warm ones have the cache warm
throughout."""
HEADLINE: Mapping[str, CachePricing] = {"anthropic": ANTHROPIC, "openai": OPENAI}
"""The pricings of the ``billed_<name>`` figures (every one of `PROVIDERS` is under
``providers``)."""

SYSTEM = (
    "You are a helpful assistant in a long-running conversation with one user. Answer from "
    "what you know of them and of the conversation so far."
)

Exchange = tuple[str, str]  # (the user's turn, the real reply)
Probe = tuple[str, tuple[str, ...]]  # (a question, the texts of its gold turns)


@dataclass(frozen=True, slots=True, kw_only=True)
class CallCost:
    """One model call: its prompt's tokens, how many of them repeat the previous call's, and
    its sizes up to each cache breakpoint (`marks`; a client's one breakpoint at the end of
    the prompt when empty)."""

    prompt_tokens: int
    cached_tokens: int
    over_budget: bool
    cold: bool = False  # a session's first call: the provider's cache has expired since
    marks: tuple[int, ...] = ()


def bill_calls(
    calls: Sequence[CallCost], pricing: CachePricing, *, cold: bool = False
) -> list[CachePrediction]:
    """Each call of a conversation (in order) split into cached, written and plain tokens
    under `pricing` (`loomctx.context.billing`): a call reads the previous call's cache
    entries within the prefix it repeats; with `cold`, calls marked `cold` read nothing."""
    out = []
    previous: tuple[int, ...] = ()
    for c in calls:
        marks = c.marks or (c.prompt_tokens,)
        out.append(
            pricing.predict(
                tokens=c.prompt_tokens,
                reused=c.cached_tokens,
                marks=marks,
                previous_marks=previous,
                cold=cold and c.cold,
            )
        )
        previous = marks
    return out


WHOLE_MARGIN = 1.05
"""Where the whole history fits the window, Loom is to cost at most this much of it, call by
call (`where_whole_fits`)."""


def where_whole_fits(
    loom: Sequence[CallCost], whole: Sequence[CallCost], pricing: CachePricing = ANTHROPIC
) -> dict[str, int]:
    """Of the calls whose whole history fits the input budget, how many there are and on how
    many Loom is billed more than `WHOLE_MARGIN` times the whole history (the cache warm)."""
    mine = [pricing.bill(p) for p in bill_calls(loom, pricing)]
    theirs = [pricing.bill(p) for p in bill_calls(whole, pricing)]
    fits = [k for k, c in enumerate(whole) if not c.over_budget]
    above = sum(mine[k] > WHOLE_MARGIN * theirs[k] for k in fits)
    return {"calls": len(fits), "above": above}


def load_exchanges(path: str | Path, *, limit: int | None = None) -> list[list[Exchange]]:
    """The conversations of a LoCoMo or LongMemEval file as (user turn, reply) exchanges."""
    name = Path(path).name.lower()
    conversations: list[list[Exchange]] = []
    if "longmemeval" in name:
        for q in load_longmemeval(path)[: limit or 1]:
            turns = [(role, text) for session in q.sessions for role, text in session]
            conversations.append(_pair(turns, user="user"))
    else:
        for c in load_locomo(path)[: limit or None]:
            turns = [(t.speaker, t.text) for t in c.turns]
            conversations.append(_pair(turns, user=c.speakers[0]))
    return conversations


_Replay = tuple[str, list[Exchange], dict[int, list[Probe]], set[int], list[datetime | None]]


def _replays(path: str | Path, limit: int | None) -> list[_Replay]:
    """Each conversation to replay: its name, its exchanges, (LoCoMo) its questions, the
    exchanges that open a session (days apart: a provider's cache, minutes to an hour, has
    expired by then), and when each exchange took place (its session's date, a minute more
    per exchange; None where the dataset does not say)."""
    if "longmemeval" not in Path(path).name.lower():
        return [(c.sample_id, *_locomo_probes(c)) for c in load_locomo(path)[: limit or None]]
    out: list[_Replay] = []
    for i, q in enumerate(load_longmemeval(path)[: limit or 1]):
        exchanges: list[Exchange] = []
        starts: set[int] = set()
        times: list[datetime | None] = []
        for s, session in enumerate(q.sessions):
            pairs = _pair(session, user="user")
            if pairs:
                starts.add(len(exchanges))
            date = q.session_dates[s] if s < len(q.session_dates) else None
            times += [_minutes(date, k) for k in range(len(pairs))]
            exchanges += pairs
        out.append((f"question-{i}", exchanges, {}, starts or {0}, times))
    return out


def _minutes(date: datetime | None, k: int) -> datetime | None:
    """A session's `k`-th exchange: a minute apart from the one before."""
    return None if date is None else date + timedelta(minutes=k)


def _pair(turns: Sequence[tuple[str, str]], *, user: str) -> list[Exchange]:
    """Consecutive turns of one side joined; each user stretch with the replies after it."""
    return _pair_ids([(who, text, "") for who, text in turns], user=user)[0]


def _pair_ids(
    turns: Sequence[tuple[str, str, str]], *, user: str
) -> tuple[list[Exchange], list[list[str]]]:
    """`_pair`, and the ids of the turns each exchange holds."""
    out: list[Exchange] = []
    ids: list[list[str]] = []
    asked: list[str] = []
    said: list[str] = []
    held: list[str] = []
    for who, text, turn_id in turns:
        if who == user:
            if said and asked:
                out.append(("\n".join(asked), "\n".join(said)))
                ids.append(held)
                asked, said, held = [], [], []
            asked.append(text)
            held.append(turn_id)
        elif asked:
            said.append(text)
            held.append(turn_id)
    if asked and said:
        out.append(("\n".join(asked), "\n".join(said)))
        ids.append(held)
    return out, ids


def _locomo_probes(
    conv: LocomoConversation,
) -> tuple[list[Exchange], dict[int, list[Probe]], set[int], list[datetime | None]]:
    """A LoCoMo conversation's exchanges, its questions (those whose gold turns are all
    replayed) by the exchange after which their evidence is all in, the exchanges that
    open a session, and when each took place."""
    turns = [(t.speaker, t.text, t.dia_id) for t in conv.turns]
    exchanges, ids = _pair_ids(turns, user=conv.speakers[0])
    session = {t.dia_id: t.session for t in conv.turns}
    dates = {t.dia_id: locomo_date(t.date) for t in conv.turns}
    opened = [session[held[0]] for held in ids]
    starts = {k for k, n in enumerate(opened) if k == 0 or n != opened[k - 1]}
    times: list[datetime | None] = []
    first = 0
    for k in range(len(ids)):
        first = k if k in starts else first
        times.append(_minutes(dates[ids[first][0]], k - first))
    where = {d: k for k, held in enumerate(ids) for d in held}
    texts = {t.dia_id: t.text for t in conv.turns}
    probes: dict[int, list[Probe]] = {}
    for q in conv.questions:
        if q.evidence and all(e in where for e in q.evidence):
            due = max(where[e] for e in q.evidence)
            probes.setdefault(due, []).append((q.question, tuple(texts[e] for e in q.evidence)))
    return exchanges, probes, starts, times


def _baseline(
    exchanges: Sequence[Exchange], available: int, counter: TokenCounter, *, slide: bool
) -> list[CallCost]:
    system = Message.system(SYSTEM)
    history: list[Message] = []
    start = 0
    calls: list[CallCost] = []
    previous: tuple[Sequence[Message], Sequence[Mapping[str, Any]]] | None = None
    for asked, said in exchanges:
        user = Message.user(asked)
        messages = [system, *history[start:], user]
        tokens = counter.count_messages(messages)
        while slide and tokens > available and start < len(history):
            start += 2  # one exchange: the user's turn and the reply
            messages = [system, *history[start:], user]
            tokens = counter.count_messages(messages)
        calls.append(
            CallCost(
                prompt_tokens=tokens,
                cached_tokens=repeated_prefix_tokens(counter, previous, messages, ()),
                over_budget=tokens > available,
            )
        )
        previous = (messages, ())
        history += [user, Message.assistant(said)]
    return calls


class _Replayer:
    """A stand-in model that answers each call with the next real reply, and keeps every
    prompt it was sent."""

    name = "replay"

    def __init__(self) -> None:
        self.reply = ""
        self.prompts: list[tuple[tuple[Message, ...], tuple[Mapping[str, Any], ...]]] = []

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        options: LLMOptions | None = None,
    ) -> AsyncIterator[LLMChunk]:
        self.prompts.append((tuple(messages), tuple(tools)))
        yield Completed(message=Message.assistant(self.reply), finish_reason="stop")


@dataclass(frozen=True, slots=True, kw_only=True)
class _Evidence:
    """Gold turns inside Loom's windows: found of all, right after and at the end."""

    after: tuple[int, int] = (0, 0)
    end: tuple[int, int] = (0, 0)


async def _loom(
    exchanges: Sequence[Exchange],
    window: int,
    reserve: int,
    counter: TokenCounter,
    folder: Path,
    l1_size: int,
    probes: Mapping[int, Sequence[Probe]],
    policy: CachePolicy | None,
    times: Sequence[datetime | None] = (),
    embedder: Embedder | None = None,
) -> tuple[list[CallCost], _Evidence]:
    store = SQLiteStore(folder / "cost.db")
    # The conversation's own time: its sessions are days apart, so the provider's cache is
    # cold at each one's start (where a date is missing, a minute after the exchange before).
    now = [_EPOCH]

    def clock() -> datetime:
        return now[0]

    # With an `embedder`, every record is embedded before the next call (no background
    # thread): a replay must build the same windows however fast a thread would embed.
    memory = LoomMemory(
        "cost",
        store=store,
        counter=counter,
        tiers=MemoryTiers(max_l1_size=l1_size),
        embedder=embedder,
        clock=clock,
        embedding=MemoryEmbedding() if embedder is None else MemoryEmbedding(in_background=False),
    )
    model = _Replayer()
    agent = Agent(
        model,
        SYSTEM,
        memory=memory,
        window=AgentWindow(
            model_context_window=window,
            output_reserve_ratio=reserve / window,
            token_counter=counter,
            cache_policy=policy,
        ),
    )
    available = window - reserve

    async def found(asked: Sequence[Probe]) -> tuple[int, int]:
        hits = total = 0
        for question, gold in asked:
            shown = "\n".join(m.content for m in (await agent.preview(question)).messages)
            hits += sum(text in shown for text in gold)
            total += len(gold)
        return hits, total

    after = (0, 0)
    marks: list[tuple[int, ...]] = []
    try:
        for k, (asked, said) in enumerate(exchanges):
            when = times[k] if k < len(times) else None
            now[0] = when if when is not None else now[0] + timedelta(minutes=1)
            model.reply = said
            async for event in agent.stream(asked):
                if isinstance(event, ContextAssembled):
                    marks.append(tuple(event.report.get("cache_marks", ())))
            if memory.background is not None:
                memory.background.drain()
            if k in probes:
                hits, total = await found(probes[k])
                after = (after[0] + hits, after[1] + total)
        end = await found([p for k in sorted(probes) for p in probes[k]])
    finally:
        memory.close()
        store.close()
        save = getattr(embedder, "save", None)
        if save is not None:  # a vector cache keeps what it embedded for the next run
            save()
    calls: list[CallCost] = []
    previous = None
    for (messages, tools), at in zip(model.prompts, marks, strict=True):
        tokens = counter.count_messages(messages, tools=tools)
        calls.append(
            CallCost(
                prompt_tokens=tokens,
                cached_tokens=repeated_prefix_tokens(counter, previous, messages, tools),
                over_budget=tokens > available,
                marks=at,
            )
        )
        previous = (messages, tools)
    return calls, _Evidence(after=after, end=end)


_EPOCH = datetime(2023, 1, 1, tzinfo=UTC)


def _cold(calls: list[CallCost], starts: set[int]) -> list[CallCost]:
    """`calls` (one per exchange) with those that open a session marked cold."""
    return [replace(c, cold=True) if k in starts else c for k, c in enumerate(calls)]


def _summarize(
    runs: Sequence[Sequence[CallCost]],
    evidence: Sequence[_Evidence] = (),
    pricings: Sequence[CachePricing] = tuple(PROVIDERS.values()),
) -> dict[str, Any]:
    """The figures of one strategy over its conversations (`runs`, each its calls in order)
    under each of `pricings`."""
    calls = [c for run in runs for c in run]
    prompt = sum(c.prompt_tokens for c in calls)
    cached = sum(c.cached_tokens for c in calls)
    out: dict[str, Any] = {
        "calls": len(calls),
        "mean_prompt_tokens": round(statistics.fmean(c.prompt_tokens for c in calls), 1),
        "over_budget": sum(c.over_budget for c in calls),
        "cached_share": round(cached / prompt, 4) if prompt else 0.0,
    }
    # Cold at each session's start: its first call reads nothing from the cache.
    warm = sum(c.cached_tokens for c in calls if not c.cold)
    out["cached_share_cold"] = round(warm / prompt, 4) if prompt else 0.0
    providers: dict[str, dict[str, float]] = {}
    for pricing in pricings:
        figures: dict[str, float] = {}
        for suffix, cold in (("", False), ("_cold", True)):
            split = [p for run in runs for p in bill_calls(run, pricing, cold=cold)]
            billed = sum(pricing.bill(p) for p in split)
            figures[f"billed{suffix}"] = round(billed / len(calls), 1)
            for part in ("cached", "written", "plain"):
                total = sum(getattr(p, part) for p in split)
                figures[f"{part}{suffix}"] = round(total / len(calls), 1)
        providers[pricing.name] = figures
    for name in HEADLINE:
        if name in providers:
            out[f"billed_{name}"] = providers[name]["billed"]
            out[f"billed_{name}_cold"] = providers[name]["billed_cold"]
    out["providers"] = providers
    for key in ("after", "end"):
        hits = sum(getattr(e, key)[0] for e in evidence)
        total = sum(getattr(e, key)[1] for e in evidence)
        if total:
            out["evidence_after" if key == "after" else "evidence_at_end"] = round(hits / total, 4)
    return out


def evaluate_cost(
    path: str | Path,
    *,
    window: int = 8000,
    reserve: int = 1000,
    limit: int | None = None,
    l1_size: int = 50,
    only: Sequence[str] = (),
    max_dynamic: float | None = None,
    tail_lift: float | None = None,
    cache_policy: CachePolicy | None = None,
    progress: Callable[[str], None] | None = None,
    pricings: Sequence[CachePricing] = tuple(PROVIDERS.values()),
    dense: bool = False,
    embedder: Embedder | None = None,
    cache_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Per strategy (`STRATEGIES`), the cost of replaying the conversations of `path`
    (LoCoMo: the first `limit` conversations, all by default, or those named in `only`;
    LongMemEval: the first `limit` questions, one by default) at a `window`-token context
    window with `reserve` kept for the reply. `l1_size` is the agent memory's L1 (the tier
    held in memory; the window's history reads the conversation beyond it); `max_dynamic`, if
    given, caps Loom's dynamic tail instead of the agent's default (`CachePolicy`), and
    `tail_lift`, if given, sets its `CachePolicy.tail_lift`; both change `cache_policy`
    (default: the window recipe's, `WindowSettings().cache_policy`).
    `pricings` are the caches every call is billed under (default: every one of
    `PROVIDERS`; ``billed_anthropic`` and ``billed_openai`` are those named so). With `dense`,
    Loom's memory embeds with `embedder` (default: the shipped model), each record before the
    next call, its vectors kept in `cache_dir` between runs when given; without it (the
    default, for speed), lexical search only. Returns
    ``{"strategies": {name: {...}}, "conversations": {name: {strategy: {...}}},
    "config": {...}}``; the strategies' numbers pool every call of every conversation."""
    if not 0 < reserve < window:
        raise ConfigError(f"`reserve` must be within 1..{window - 1}, got {reserve!r}")
    policy = cache_policy
    if max_dynamic is not None or tail_lift is not None:
        default = cache_policy or WindowSettings().cache_policy
        policy = replace(
            default,
            max_dynamic=default.max_dynamic if max_dynamic is None else max_dynamic,
            tail_lift=default.tail_lift if tail_lift is None else tail_lift,
        )
    counter = TiktokenCounter()
    embedder = bench_embedder(dense, embedder, cache_dir)
    conversations = _replays(path, limit)
    if only:
        names = [c[0] for c in conversations]
        missing = [n for n in only if n not in names]
        if missing:
            raise ConfigError(
                f"no conversation {', '.join(map(repr, missing))} in {str(path)!r}; "
                f"it has {', '.join(map(repr, names))}"
            )
        conversations = [c for c in conversations if c[0] in only]
    pooled: dict[str, list[list[CallCost]]] = {name: [] for name in (*STRATEGIES, DATED)}
    evidence: dict[str, list[_Evidence]] = {"loom": [], DATED: []}
    fitting = {"calls": 0, "above": 0}
    apart: dict[str, dict[str, Any]] = {}
    available = window - reserve
    with tempfile.TemporaryDirectory(prefix="loomctx-cost-") as tmp:
        for i, (name, exchanges, probes, starts, times) in enumerate(conversations):
            if progress is not None:
                progress(f"conversation {i + 1}/{len(conversations)}: {len(exchanges)} turns")
            folder = Path(tmp) / str(i)
            folder.mkdir()
            # Twice: with the cache warm throughout (a minute between calls), and as the
            # conversation happened, its sessions days apart (cold at each one's start, where
            # a due compaction is done). The warm figures come from the first, the cold ones
            # from the second.
            runs: dict[str, tuple[list[CallCost], _Evidence]] = {}
            for when in ("warm", "dated"):
                (folder / when).mkdir()
                runs[when] = asyncio.run(
                    _loom(exchanges, window, reserve, counter, folder / when, l1_size, probes,
                          policy, times if when == "dated" else (), embedder)
                )  # fmt: skip
            found = {"loom": runs["warm"][1], DATED: runs["dated"][1]}
            own = {
                name: _cold(calls, starts)
                for name, calls in (
                    ("whole history", _baseline(exchanges, available, counter, slide=False)),
                    ("sliding window", _baseline(exchanges, available, counter, slide=True)),
                    ("loom", runs["warm"][0]),
                    (DATED, runs["dated"][0]),
                )
            }
            apart[name] = {
                s: _summarize([calls], [found[s]] if s in found else [], pricings)
                for s, calls in own.items()
                if calls
            }
            for s, calls in own.items():
                if calls:
                    pooled[s].append(calls)
            for s, e in found.items():
                evidence[s].append(e)
            fits = where_whole_fits(runs["warm"][0], own["whole history"])
            apart[name]["loom"]["where_whole_fits"] = fits
            for key, n in fits.items():
                fitting[key] += n
    strategies = {
        name: _summarize(calls, evidence.get(name, []), pricings)
        for name, calls in pooled.items()
        if calls
    }
    strategies["loom"]["where_whole_fits"] = fitting
    return {
        "strategies": strategies,
        "conversations": apart,
        "config": {
            "path": str(path),
            "window": window,
            "reserve": reserve,
            "l1_size": l1_size,
            "max_dynamic": max_dynamic,
            "tail_lift": tail_lift,
            "memory_payback": (policy or WindowSettings().cache_policy).memory_payback,
            "embedder": embedder.name if embedder is not None else None,
            "conversations": len(conversations),
            "counter": counter.name,
            "pricings": {
                p.name: {
                    "read": p.read,
                    "write": p.write,
                    "plain": p.plain,
                    "lifetime": p.lifetime,
                    "min_tokens": p.min_tokens,
                    "breakpoints": p.breakpoints,
                }
                for p in pricings
            },
        },
    }

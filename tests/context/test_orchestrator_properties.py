"""The invariants of DESIGN.md section 5, property-tested with the real o200k counter."""

from __future__ import annotations

import asyncio

from hypothesis import event, given
from hypothesis import strategies as st

from loomctx import (
    BudgetExceededError,
    ConfigError,
    ContextOrchestrator,
    ContextWindow,
    Message,
    TiktokenCounter,
)
from loomctx.context.render import CONTEXT_PREAMBLE, section_overhead
from loomctx.context.sources import HistorySource, PromptSource, ToolSource, UserInputSource
from loomctx.messages import split_units
from tests.context.test_orchestrator import SQL, WEATHER, DocsSource
from tests.strategies import histories

COUNTER = TiktokenCounter()
WORDS = st.sampled_from(
    ["order", "shipped", "天气", "很好", "refund", "the", "customer", "。", "\n", "👍🏽", "SQL"]
)
BLANK = st.sampled_from(["", " ", "\n", " \t\n ", "\u3000"])  # no user turn
DOC = st.lists(WORDS, min_size=1, max_size=120).map(" ".join)
SCENARIO = st.fixed_dictionaries(
    {
        "history": histories(system=False, names=False, max_units=12),
        "docs": st.lists(DOC, max_size=6),
        "instructions": st.lists(WORDS, max_size=40).map(" ".join),
        "query": st.one_of(BLANK, st.lists(WORDS, max_size=30).map(" ".join)),
        "tools": st.sampled_from([[], [WEATHER], [WEATHER, SQL]]),
        "window": st.integers(min_value=60, max_value=900),
    }
)


def orchestrator(s: dict[str, object]) -> ContextOrchestrator:
    return ContextOrchestrator(
        token_counter=COUNTER,
        sources=[
            PromptSource(s["instructions"]),  # type: ignore[arg-type]
            ToolSource(s["tools"]),  # type: ignore[arg-type]
            DocsSource(s["docs"]),  # type: ignore[arg-type]
            HistorySource(s["history"]),  # type: ignore[arg-type]
            UserInputSource(),
        ],
        model_context_window=s["window"],  # type: ignore[arg-type]
        output_reserve_ratio=0.125,
    )


def build(s: dict[str, object]) -> tuple[ContextOrchestrator, ContextWindow | None]:
    """The scenario's window (`prefill=True`: the layout's invariants hold for a window
    without a user turn too; whether one may be sent is the test below)."""
    orch = orchestrator(s)
    try:
        window = asyncio.run(orch.build(query=s["query"], prefill=True))  # type: ignore[arg-type]
    except BudgetExceededError as exc:
        offenders = {o.name for o in exc.offenders}
    else:
        for status in sorted({b.status for b in window.report.blocks}):
            event(status)
        return orch, window
    event("pinned content over budget")
    assert offenders <= {"system_prompt", "user_input"}
    return orch, None


def parts(
    window: ContextWindow, s: dict[str, object]
) -> tuple[list[Message], list[Message], list[Message]]:
    """(the system message, history's units, the user turn and the dynamic tail)."""
    msgs, layout = list(window.messages), window.layout
    assert layout is not None
    return (
        msgs[: layout.prefix_end],
        msgs[layout.summary_end : layout.history_end],
        [
            m
            for i, m in enumerate(msgs[layout.history_end :])
            if i + layout.history_end != layout.tail_start
        ],
    )


@given(SCENARIO, st.one_of(BLANK, st.none()))
def test_a_window_ends_on_the_user_turn_or_tool_results_unless_a_prefill_is_asked_for(
    s: dict[str, object], blank: str | None
) -> None:
    """Anthropic reads a final assistant message as a prefill to continue, not a request: a
    build without a user turn whose window would end on one refuses, and says why."""
    query = str(s["query"]) if blank is None else blank
    refused: ConfigError | None = None
    try:
        window = asyncio.run(orchestrator(s).build(query=query))
    except BudgetExceededError:
        return
    except ConfigError as exc:
        refused = exc
    if refused is not None:
        event("refused: it would end on an assistant message")
        assert not query.strip()
        assert "prefill=True" in str(refused)
        prefilled = asyncio.run(orchestrator(s).build(query=query, prefill=True))
        assert prefilled.messages[-1].role == "assistant"
        return
    if window.messages and window.messages[-1].role != "system":
        assert window.messages[-1].role in ("user", "tool"), window.messages[-1]


@given(SCENARIO)
def test_never_over_budget_and_counted_exactly(s: dict[str, object]) -> None:
    orch, window = build(s)
    if window is not None:
        assert window.token_count == COUNTER.count_messages(window.messages, tools=window.tools)
        assert window.token_count <= orch.available


@given(SCENARIO)
def test_user_turn_and_instructions_are_whole_and_in_place(s: dict[str, object]) -> None:
    _, window = build(s)
    if window is None:
        return
    query, instructions = str(s["query"]).strip(), str(s["instructions"]).strip()
    if query:
        assert window.messages[-1] == Message.user(str(s["query"]))
    if instructions:
        assert window.messages[0].role == "system"
        assert window.messages[0].content.startswith(str(s["instructions"]))


@given(SCENARIO)
def test_tool_units_are_atomic_and_history_is_an_unbroken_suffix(s: dict[str, object]) -> None:
    _, window = build(s)
    if window is None:
        return
    _, history, _ = parts(window, s)
    split_units(history)  # every call with its results, every result with its call
    full: list[Message] = s["history"]  # type: ignore[assignment]
    if history:
        assert history == full[len(full) - len(history) :]
        assert history[0].role == "user"


@given(SCENARIO)
def test_layout_order(s: dict[str, object]) -> None:
    _, window = build(s)
    if window is None:
        return
    roles = [m.role for m in window.messages]
    # One system message at most, first; dynamic context never in it, always in the tail.
    assert "system" not in roles[1:]
    assert window.layout is not None
    if any(b.section == "context" for b in window.blocks):
        tail = window.messages[window.layout.tail_start]
        assert tail.role == "user"
        assert tail.content.startswith(CONTEXT_PREAMBLE)
        # right before the newest unit: the user turn, which stays last and whole
        newest = 1 if str(s["query"]).strip() else 0
        assert window.layout.tail_start == len(window.messages) - 1 - newest
    if roles[:1] == ["system"]:
        assert CONTEXT_PREAMBLE not in window.messages[0].content


@given(SCENARIO, st.lists(WORDS, max_size=10).map(" ".join))
def test_prefix_is_stable_while_its_inputs_are(s: dict[str, object], other_query: str) -> None:
    _, first = build(s)
    _, second = build({**s, "query": other_query, "docs": [*s["docs"], "new doc"]})  # type: ignore[list-item]
    if first is None or second is None:
        return
    if str(s["instructions"]).strip():
        assert first.messages[0] == second.messages[0]
    if len(first.tools) == len(s["tools"]) == len(second.tools):  # type: ignore[arg-type]
        assert first.tools == second.tools


@given(SCENARIO)
def test_deterministic(s: dict[str, object]) -> None:
    _, first = build(s)
    _, second = build(s)
    if first is not None and second is not None:
        assert first.messages == second.messages
        assert first.tools == second.tools
        assert first.report.blocks == second.report.blocks


@given(SCENARIO)
def test_no_source_is_starved_while_budget_sits_unused(s: dict[str, object]) -> None:
    orch, window = build(s)
    if window is None:
        return
    left = orch.available - window.token_count
    # Framing reserved for sections that ended up empty, and a fence's tags, are the only slack.
    slack = section_overhead({"instructions", "context", "tools"}, COUNTER) + 24
    for b in window.report.blocks:
        if b.status != "dropped" or b.section == "history":
            continue
        if b.section == "context":  # truncatable: cut rather than dropped while room is left
            assert left < orch.compactor.min_truncated_tokens + slack, (b, left)
        else:
            assert b.offered_tokens > left - slack, (b, left)


@given(SCENARIO)
def test_a_source_within_its_allocation_is_never_cut_for_another(s: dict[str, object]) -> None:
    _, window = build(s)
    if window is None:
        return
    first_user = "history kept"  # history starts at a user message: a rule, not a budget cut
    pinned = [x for x in window.report.sources if x.name in ("system_prompt", "user_input")]
    if any(x.used > x.allocated for x in pinned):
        return  # must-keep content beyond its share comes first, from everyone's budget
    for src in window.report.sources:
        # The summary reserve takes at most an eighth of every share.
        if src.requested <= src.allocated * 7 // 8 - 1:
            cut = [
                b
                for b in window.report.blocks
                if b.source == src.name and b.status != "kept" and first_user not in b.reason
            ]
            assert cut == [], (src, cut)


@given(SCENARIO, st.lists(WORDS, max_size=8))
def test_without_compaction_a_window_minus_its_tail_begins_the_next(
    s: dict[str, object], words: list[str]
) -> None:
    history = HistorySource(s["history"])  # type: ignore[arg-type]
    docs = DocsSource(s["docs"])  # type: ignore[arg-type]
    orch = ContextOrchestrator(
        token_counter=COUNTER,
        sources=[
            PromptSource(s["instructions"]),  # type: ignore[arg-type]
            ToolSource(s["tools"]),  # type: ignore[arg-type]
            docs,
            history,
            UserInputSource(),
        ],
        model_context_window=s["window"],  # type: ignore[arg-type]
        output_reserve_ratio=0.125,
    )
    try:
        # prefill=True: the layout holds for windows without a user turn too
        first = asyncio.run(orch.build(query=s["query"], prefill=True))  # type: ignore[arg-type]
        reply = Message.assistant(" ".join(words) or "ok")
        history.extend([Message.user(str(s["query"]) or "next"), reply])
        docs.docs = [*docs.docs[1:], " ".join(words) or "new"]
        second = asyncio.run(orch.build(query=" ".join(words), prefill=True))
    except BudgetExceededError:
        return
    assert first.layout is not None
    if any(n.action == "compacted" for n in second.report.compactions):
        event("compacted")
        return
    if first.tools != second.tools:  # a tool schema no longer fits: the prefix starts anew
        return
    kept = [b for b in second.report.blocks if b.source == "history" and b.status == "kept"]
    if len(kept) < len(history):  # the history no longer fits whole: it starts anew
        event("history cut")
        return
    tail = first.layout.tail_start
    head = first.messages[:tail] + first.messages[tail + 1 :]
    assert second.messages[: len(head)] == head
    if tail:  # the first request as sent is in the cache up to its tail
        reused = COUNTER.count_messages(first.messages[:tail], tools=second.tools)
        assert second.report.reused_prefix_tokens >= reused

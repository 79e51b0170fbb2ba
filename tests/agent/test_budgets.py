"""The agent's budget (issue 16, items 1 and 3): large instructions get what they need up to
the whole input budget, the static / dynamic split is configurable (seed 001's 12,000 +
4,000), and an `AdaptiveBudgetManager` shifts the split early -> middle -> late in one run,
its phase taken from the run's progress and its turn index counted across runs."""

from __future__ import annotations

import re

import pytest

from loomctx import (
    Agent,
    AgentLoop,
    AgentSources,
    AgentWindow,
    BudgetExceededError,
    ConfigError,
    LoomMemory,
    TiktokenCounter,
    ToolCall,
    tool,
)
from loomctx.agent.events import ContextAssembled
from loomctx.agent.retriever import BaseContextRetriever, Document
from loomctx.context import AdaptiveBudgetManager, BudgetManager, CachePolicy
from loomctx.context.block import BuildContext, ContextBlock, TokenBudget
from loomctx.testing import ScriptedLLM

COUNTER = TiktokenCounter()


def instructions(tokens: int) -> str:
    """Instructions of about `tokens` tokens (within 1%)."""
    rule = "Rule {i}: check the invoice ledger before you answer question {i}. "
    text = ""
    i = 0
    while COUNTER.count(text) < tokens:
        text += rule.format(i=i) * 20
        i += 20
    while COUNTER.count(text) > tokens:
        text = text[: text.rindex("Rule")]
    return text


def memory() -> LoomMemory:
    return LoomMemory("budget-test", embedder=None)


@tool
def lookup(term: str) -> str:
    """Look a term up in the ledger.

    Args:
        term: What to look up.
    """
    return f"ledger entry for {term}: " + "amount 42, posted on 2025-06-01; " * 600


def call(term: str, call_id: str) -> list[ToolCall]:
    return [ToolCall(id=call_id, name="lookup", arguments={"term": term})]


# ---------------------------------------------------------------------------------------------
# Item 1: large instructions


async def test_a_10k_token_system_prompt_works_in_a_16k_window() -> None:
    prompt = instructions(10_000)
    llm = ScriptedLLM([call("rent", "c1"), call("fees", "c2"), "Rent is 42."])
    agent = Agent(llm=llm, system_instructions=prompt, tools=[lookup], memory=memory())
    assert agent.window.model_context_window == 16_000
    events = [e async for e in agent.stream("What is the rent?")]
    llm.assert_complete()
    assert events[-1].output == "Rent is 42."  # type: ignore[attr-defined]
    for sent in llm.calls:
        system = sent.messages[0]
        assert system.role == "system"
        assert prompt in system.content  # whole, on every call
    windows = [e for e in events if isinstance(e, ContextAssembled)]
    assert len(windows) == 3
    assert all(w.report["token_count"] <= 12_800 for w in windows)
    # The large results are shown as excerpts beside it, not refused.
    assert "ledger entry for rent" in llm.calls[1].messages[-1].content
    assert "r-" in llm.calls[1].messages[-1].content  # the handle that reads the rest


def test_a_system_prompt_that_does_not_fit_is_refused_with_the_numbers_and_the_fix() -> None:
    prompt = instructions(13_000)
    size = COUNTER.count(prompt)
    with pytest.raises(BudgetExceededError) as caught:
        Agent(llm=ScriptedLLM([]), system_instructions=prompt, memory=memory())
    message = str(caught.value)
    assert caught.value.budget == 12_800
    found = re.search(r"`instructions` \((\d+) tokens\)", message)
    assert found is not None
    assert size <= int(found.group(1)) <= size + 8  # with its section header
    assert "budget of 12800 tokens" in message
    assert "raise `model_context_window`" in message
    assert "static_tokens" in message


def test_the_static_limit_is_configurable() -> None:
    prompt = instructions(5_000)
    # Seed 001's old one-third cap refused this; the default takes all it needs.
    Agent(llm=ScriptedLLM([]), system_instructions=prompt, memory=memory())
    capped = BudgetManager(static_ratio=0.25)
    with pytest.raises(BudgetExceededError, match="budget of 3200 tokens") as caught:
        Agent(
            llm=ScriptedLLM([]),
            system_instructions=prompt,
            embedder=None,
            window=AgentWindow(budget_manager=capped),
        )
    assert "static_ratio" in str(caught.value)


class Schemas(BaseContextRetriever):
    """Forty table schemas of about 200 tokens each: far more than 4,000 tokens."""

    async def retrieve_for_query(self, query: str, top_k: int = 5) -> list[Document]:
        return [
            Document(id=f"t{i}", content=f"Table t{i}: " + "column amount INTEGER. " * 60)
            for i in range(top_k)
        ]


async def test_seed_001_split_12000_static_and_4000_dynamic_of_16000() -> None:
    split = BudgetManager(static_tokens=12_000, dynamic_tokens=4_000)
    assert split.static_limit(16_000) == 12_000
    assert split.dynamic_limit(16_000) == 4_000
    prompt = instructions(11_500)
    llm = ScriptedLLM(["done"])
    agent = Agent(
        llm=llm,
        system_instructions=prompt,
        memory=memory(),
        window=AgentWindow(
            model_context_window=20_000,  # 16,000 input tokens with the default reserve of 0.2
            budget_manager=split,
            # Seed 001's tail: a quarter of the input, not the window recipe's default cap.
            cache_policy=CachePolicy(max_dynamic=0.25),
        ),
        sources=AgentSources(retriever=Schemas(max_tokens=16_000), top_k=40),
    )
    events = [e async for e in agent.stream("orders by month")]
    (window,) = [e for e in events if isinstance(e, ContextAssembled)]
    assert window.report["available"] == 16_000
    retrieved = next(s for s in window.report["sources"] if s["name"] == "retrieved")
    assert 3_000 < retrieved["used"] <= 4_000  # the dynamic context, capped at its 4,000
    assert prompt in llm.calls[0].messages[0].content
    # 12,100 tokens of instructions exceed the static 12,000, though the input has 16,000.
    with pytest.raises(BudgetExceededError, match="budget of 12000 tokens"):
        Agent(
            llm=ScriptedLLM([]),
            system_instructions=instructions(12_100),
            embedder=None,
            window=AgentWindow(model_context_window=20_000, budget_manager=split),
        )


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"static_ratio": 0}, "`static_ratio` must be above 0"),
        ({"static_ratio": 1.5}, "`static_ratio` must be a finite number within"),
        ({"static_tokens": 0}, "`static_tokens` must be an int >= 1"),
        ({"dynamic_tokens": 2.5}, "`dynamic_tokens` must be an int >= 1"),
        ({"dynamic_ratio": -0.1}, "`dynamic_ratio` must be a finite number within"),
    ],
)
def test_bad_limits_are_named(options: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        BudgetManager(**options)  # type: ignore[arg-type]


def test_limits_default_to_the_whole_budget_and_no_dynamic_cap() -> None:
    manager = BudgetManager()
    assert manager.static_limit(12_800) == 12_800
    assert manager.dynamic_limit(12_800) is None
    shares = BudgetManager(static_ratio=0.75, dynamic_ratio=0.25, dynamic_tokens=1_000)
    assert shares.static_limit(16_000) == 12_000
    assert shares.dynamic_limit(16_000) == 1_000  # the smaller of the two
    assert shares.dynamic_limit(2_000) == 500


def test_agent_refuses_a_budget_manager_of_another_type() -> None:
    with pytest.raises(ConfigError, match=r"`AgentWindow\.budget_manager` must be a BudgetManager"):
        AgentWindow(budget_manager={"L1_recent": 0.5})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"`AgentLoop\.progress` must be a function"):
        AgentLoop(progress=0.5)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Item 3: the adaptive split in the loop


class Seen:
    """A source that offers nothing and records the `BuildContext` of every build."""

    name = "seen"
    priority = 0.1

    def __init__(self) -> None:
        self.contexts: list[BuildContext] = []

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> list[ContextBlock]:
        self.contexts.append(ctx)
        return []


def allocated(event: ContextAssembled) -> dict[str, int]:
    return {s["name"]: s["allocated"] for s in event.report["sources"]}


async def test_the_adaptive_split_shifts_early_middle_late_in_one_run() -> None:
    seen = Seen()
    llm = ScriptedLLM(
        [call("a", "c1"), call("b", "c2"), call("c", "c3"), call("d", "c4"), call("e", "c5"), "ok"]
    )
    manager = AdaptiveBudgetManager()
    agent = Agent(
        llm=llm,
        tools=[lookup],
        memory=memory(),
        window=AgentWindow(budget_manager=manager),
        sources=AgentSources(extra=[seen]),
        loop=AgentLoop(max_turns=6),
    )
    events = [e async for e in agent.stream("Reconcile the ledger")]
    windows = [allocated(e) for e in events if isinstance(e, ContextAssembled)]
    assert len(windows) == 6
    assert [c.progress for c in seen.contexts] == [0, 1 / 6, 2 / 6, 3 / 6, 4 / 6, 5 / 6]
    phases = [manager.phase(c) for c in seen.contexts]
    assert phases == ["early", "early", "middle", "middle", "late", "late"]
    early, middle, late = windows[0], windows[2], windows[4]
    # Early: retrieval gets the most; middle: recent interactions; late: important memory.
    assert early["unified_retrieval"] > middle["unified_retrieval"]
    assert early["unified_retrieval"] > late["unified_retrieval"]
    assert middle["L1_recent"] > early["L1_recent"]
    assert middle["L1_recent"] > late["L1_recent"]
    assert late["L2_important"] > early["L2_important"]
    assert late["L2_important"] > middle["L2_important"]


async def test_the_turn_index_counts_model_calls_across_runs() -> None:
    seen = Seen()
    llm = ScriptedLLM([call("a", "c1"), "one", "two", call("b", "c2"), "three"])
    agent = Agent(llm=llm, tools=[lookup], memory=memory(), sources=AgentSources(extra=[seen]))
    for prompt in ("first", "second", "third"):
        await agent.run(prompt)
    assert [c.turn_index for c in seen.contexts] == [0, 1, 2, 3, 4]
    assert agent.turns_taken == 5
    # The progress is the run's own: it starts again with each run.
    assert [c.progress for c in seen.contexts] == [0, 0.1, 0, 0, 0.1]


async def test_the_task_s_own_progress_signal_sets_the_phase() -> None:
    seen = Seen()
    signal: list[float | None] = [0.9]
    llm = ScriptedLLM([call("a", "c1"), "ok"])
    manager = AdaptiveBudgetManager()
    agent = Agent(
        llm=llm,
        tools=[lookup],
        memory=memory(),
        window=AgentWindow(budget_manager=manager),
        sources=AgentSources(extra=[seen]),
        loop=AgentLoop(progress=lambda: signal.pop(0) if signal else None),
    )
    await agent.run("finish the report")
    assert [c.progress for c in seen.contexts] == [0.9, 0.1]  # then turns, when it gives None
    assert [manager.phase(c) for c in seen.contexts] == ["late", "early"]
    bad = Agent(llm=ScriptedLLM(["x"]), memory=memory(), loop=AgentLoop(progress=lambda: 2.0))
    with pytest.raises(ConfigError, match=r"returned 2\.0; return a number from 0 to 1"):
        await bad.run("go")


def test_progress_and_phase_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="`progress` must be a number from 0 to 1"):
        BuildContext(progress=1.5)
    with pytest.raises(ConfigError, match="early_progress <= late_progress"):
        AdaptiveBudgetManager(early_progress=0.8, late_progress=0.2)
    manager = AdaptiveBudgetManager(early_turns=1, late_turn=3)
    phases = [manager.phase(BuildContext(turn_index=i)) for i in range(4)]
    assert phases == ["early", "middle", "middle", "late"]  # no progress: by model calls
    assert manager.phase(BuildContext(turn_index=0, phase="late")) == "late"
    assert BudgetManager(dynamic_ratio=0.5).dynamic_limit(1_001) == 500


async def test_a_new_agent_on_the_same_memory_counts_on() -> None:
    shared = memory()
    first = Agent(llm=ScriptedLLM([call("a", "c1"), "one"]), tools=[lookup], memory=shared)
    await first.run("first")
    assert first.turns_taken == 2
    seen = Seen()
    again = Agent(
        llm=ScriptedLLM(["two"]), tools=[lookup], memory=shared, sources=AgentSources(extra=[seen])
    )
    assert again.turns_taken == 2  # a restart, or a server's next request
    await again.run("second")
    assert [c.turn_index for c in seen.contexts] == [2]
    other = Agent(llm=ScriptedLLM([]), name="other", memory=shared)
    assert other.turns_taken == 0  # another agent's calls are not its own

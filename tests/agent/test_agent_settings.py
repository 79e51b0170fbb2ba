"""`Agent` takes what it has directly and how it works as three settings values
(`AgentWindow`, `AgentSources`, `AgentLoop`): each checks its fields where it is written,
and an argument that moved into one of them is refused with the field to use."""

from __future__ import annotations

import pytest

from loomctx import Agent, AgentLoop, AgentSources, AgentWindow, ConfigError, LLMOptions, LoomMemory
from loomctx.agent.settings import MOVED
from loomctx.context.sources import HistorySource
from loomctx.testing import ScriptedLLM


@pytest.mark.parametrize("name", sorted(MOVED))
def test_an_argument_that_moved_names_its_settings_value_and_field(name: str) -> None:
    argument, cls, field = MOVED[name]
    with pytest.raises(ConfigError) as err:
        Agent(ScriptedLLM([]), embedder=None, **{name: 1})
    message = str(err.value)
    assert f"`Agent({name}=...)` is now a field of `{cls}`" in message
    assert f"pass `{argument}={cls}({field}=...)`" in message


def test_an_unknown_argument_is_a_type_error_as_python_raises_it() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'temprature'"):
        Agent(ScriptedLLM([]), embedder=None, temprature=0.2)  # type: ignore[arg-type]


def test_sources_given_as_a_list_say_how_to_pass_them() -> None:
    history = HistorySource([], name="notes")
    with pytest.raises(ConfigError, match=r"sources=AgentSources\(extra=\[\.\.\.\]\)"):
        Agent(ScriptedLLM([]), embedder=None, sources=[history])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argument", "value"),
    [("window", AgentLoop()), ("sources", {"top_k": 3}), ("loop", 10)],
)
def test_a_settings_argument_of_another_type_is_refused(argument: str, value: object) -> None:
    with pytest.raises(ConfigError, match=rf"`Agent\({argument}=\.\.\.\)` must be an `Agent"):
        Agent(ScriptedLLM([]), embedder=None, **{argument: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: AgentWindow(model_context_window=0), "`model_context_window` must be >= 1"),
        (lambda: AgentWindow(output_reserve_ratio=1.0), "`output_reserve_ratio` must be below 1"),
        (lambda: AgentWindow(max_result_tokens=10), "`AgentWindow.max_result_tokens`"),
        (lambda: AgentWindow(budget_manager=0.5), "`AgentWindow.budget_manager` must be"),
        (lambda: AgentWindow(cache_policy="cold"), "`AgentWindow.cache_policy` must be"),
        (lambda: AgentSources(top_k=0), "`AgentSources.top_k` must be an int >= 1"),
        (lambda: AgentSources(timeout=0), "`AgentSources.timeout` must be a number"),
        (lambda: AgentSources(extra="notes"), "`AgentSources.extra` must be a sequence"),
        (lambda: AgentSources(shared_pool="pool"), "`AgentSources.shared_pool` must be"),
        (lambda: AgentLoop(max_turns=0), "`AgentLoop.max_turns` must be an int >= 1"),
        (lambda: AgentLoop(max_depth=True), "`AgentLoop.max_depth` must be an int >= 1"),
        (lambda: AgentLoop(progress=0.5), "`AgentLoop.progress` must be a function"),
        (lambda: AgentLoop(llm_options={"temperature": 0}), "`AgentLoop.llm_options` must"),
    ],
)
def test_each_settings_value_checks_its_fields_where_it_is_written(
    make: object, match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        make()  # type: ignore[operator]


def test_a_source_of_your_own_needs_a_name_the_agent_does_not_use() -> None:
    with pytest.raises(ConfigError, match=r"`L1_recent` in `AgentSources\.extra`"):
        AgentSources(extra=[HistorySource([], name="L1_recent")])
    assert AgentSources(extra=[HistorySource([], name="notes")]).extra[0].name == "notes"


def test_the_shared_pool_cannot_be_the_agents_own_memory() -> None:
    memory = LoomMemory("agent", embedder=None)
    with pytest.raises(ConfigError, match="is the agent's own `memory`"):
        Agent(ScriptedLLM([]), memory=memory, sources=AgentSources(shared_pool=memory))


async def test_the_window_settings_size_the_window_and_the_loop_settings_end_the_run() -> None:
    llm = ScriptedLLM(["one"])
    options = LLMOptions(temperature=0.0)
    agent = Agent(
        llm,
        "Be brief.",
        embedder=None,
        window=AgentWindow(model_context_window=8_000, output_reserve_ratio=0.25),
        loop=AgentLoop(max_turns=1, llm_options=options),
    )
    window = await agent.preview("hi")
    assert window.report.available == 6_000
    assert await agent.run("hi") == "one"
    assert llm.calls[0].options.temperature == 0.0
    assert llm.calls[0].options.cache_key == "/".join(agent.memory.namespace)


def test_settings_values_are_frozen() -> None:
    window = AgentWindow()
    with pytest.raises(AttributeError):
        window.model_context_window = 1  # type: ignore[misc]
    assert AgentSources(extra=[]).extra == ()  # a list is kept as a tuple

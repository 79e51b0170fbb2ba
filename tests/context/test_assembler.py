"""ContextAssembler: behaviour where we differ from the seed, errors, summary, and properties."""

from __future__ import annotations

import json

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from loomctx import BudgetExceededError, ConfigError, TiktokenCounter
from loomctx.context import ComponentPriority, ContextAssembler
from loomctx.context.packing import TRUNCATION_MARKER

COUNTER = TiktokenCounter()


def make(max_tokens: int, **kwargs: object) -> ContextAssembler:
    return ContextAssembler(max_tokens=max_tokens, token_counter=COUNTER, **kwargs)  # type: ignore[arg-type]


def test_total_tokens_is_the_output_and_requested_the_input() -> None:
    a = make(60)
    a.add_component("notes", "word " * 200, priority=50)
    out = a.assemble()
    s = a.get_summary()
    assert s["total_tokens"] == COUNTER.count(out) <= 60
    assert s["requested_tokens"] > 200
    assert s["overflow"] == s["requested_tokens"] - 60
    (comp,) = s["components"]
    assert comp["status"] == "truncated"
    assert comp["tokens"] == COUNTER.count("word " * 200)
    assert 0 < comp["included_tokens"] < comp["tokens"]
    assert "cut from" in comp["reason"]


def test_summary_is_json_and_lists_every_component_in_priority_order() -> None:
    a = make(40)
    a.add_component("low", "lots of low priority text " * 30, priority=ComponentPriority.LOW)
    a.add_component("crit", "Keep me.", priority=ComponentPriority.CRITICAL, truncatable=False)
    a.add_component("opt", "optional text " * 30, priority=ComponentPriority.OPTIONAL)
    summary = json.loads(json.dumps(a.get_summary()))
    assert [c["name"] for c in summary["components"]] == ["crit", "low", "opt"]
    statuses = {c["name"]: c["status"] for c in summary["components"]}
    assert statuses == {"crit": "included", "low": "truncated", "opt": "dropped"}
    assert "budget exhausted" in summary["components"][2]["reason"]
    assert summary["budget"] == 40
    assert summary["token_counter"] == "tiktoken:o200k_base"


def test_non_truncatable_that_cannot_fit_raises_naming_it() -> None:
    a = make(20)
    a.add_component("instructions", "Follow these rules carefully. " * 20, priority=100,
                    truncatable=False)  # fmt: skip
    a.add_component("docs", "doc", priority=90)
    with pytest.raises(BudgetExceededError) as info:
        a.assemble()
    err = info.value
    assert err.budget == 20
    assert [o.name for o in err.offenders] == ["instructions"]
    assert "`instructions`" in str(err)
    assert str(err.offenders[0].tokens) in str(err)
    assert "truncatable" in str(err)


def test_truncation_prefers_a_sentence_end_and_counts_the_marker() -> None:
    text = " ".join(f"Sentence number {i} says something useful." for i in range(40))
    a = make(50)
    a.add_component("docs", text, priority=50)
    out = a.assemble()
    body = out.split("\n", 1)[1]
    assert body.endswith(TRUNCATION_MARKER)
    assert body.removesuffix(TRUNCATION_MARKER).endswith("useful.")
    assert COUNTER.count(out) <= 50


def test_truncation_never_splits_a_character() -> None:
    text = "天气很好，我们去公园散步吧。" * 50 + "👨‍👩‍👧‍👦" * 40
    for budget in range(12, 80, 7):
        a = make(budget)
        a.add_component("cjk", text, priority=50)
        out = a.assemble()
        body = out.split("\n", 1)[1].removesuffix(TRUNCATION_MARKER)
        assert text.startswith(body)
        assert "\ufffd" not in out
        assert COUNTER.count(out) <= budget


def test_insertion_order_on_request() -> None:
    a = make(1000, order="insertion")
    a.add_component("first", "one", priority=10)
    a.add_component("second", "two", priority=100)
    out = a.assemble()
    assert out.index("one") < out.index("two")


def test_empty_content_is_ignored() -> None:
    a = make(100)
    a.add_component("empty", "", priority=50)
    assert a.components == []
    assert a.assemble() == ""
    assert a.get_summary()["total_tokens"] == 0


def test_plain_function_counter_is_accepted() -> None:
    a = ContextAssembler(max_tokens=30, token_counter=lambda text: len(text) // 4)
    a.add_component("text", "abcd " * 100, priority=50)
    assert len(a.assemble()) // 4 <= 30


def test_clear_and_reassemble() -> None:
    a = make(100)
    a.add_component("x", "hello", priority=50)
    a.clear()
    assert a.assemble() == ""


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"max_tokens": 0}, "`max_tokens`"),
        ({"max_tokens": True}, "`max_tokens`"),
        ({"order": "alphabetical"}, "`order`"),
        ({"token_counter": 42}, "`token_counter`"),
    ],
)
def test_constructor_errors(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        ContextAssembler(**kwargs)  # type: ignore[arg-type]


def test_add_component_errors() -> None:
    a = make(100)
    with pytest.raises(ConfigError, match="non-empty `name`"):
        a.add_component(" ", "x", priority=50)
    with pytest.raises(ConfigError, match="from 0 to 100"):
        a.add_component("x", "x", priority=101)
    with pytest.raises(ConfigError, match="must be a str"):
        a.add_component("x", 3, priority=50)  # type: ignore[arg-type]


def test_callable_counter_returning_garbage_is_reported() -> None:
    a = ContextAssembler(max_tokens=100, token_counter=lambda text: -1)
    with pytest.raises(ConfigError, match="non-negative int"):
        a.add_component("x", "hello", priority=50)


# --- properties, with the real o200k counter ----------------------------------------------

PIECES = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=12),
    st.sampled_from(["\n", " ", ". ", "。", "你好", "👍🏽", "é", "word ", "The end. "]),
)
TEXT = st.lists(PIECES, max_size=120).map("".join)
COMPONENT = st.tuples(
    st.sampled_from(["alpha", "beta", "gamma", "delta", "docs", "rules"]),
    TEXT,
    st.integers(min_value=0, max_value=100),
    st.sampled_from([True, True, True, False]),  # truncatable: most content may be cut
)
COMPONENTS = st.lists(COMPONENT, max_size=6)
BUDGET = st.integers(min_value=1, max_value=240)


def assemble_or_error(
    budget: int, components: list[tuple[str, str, int, bool]], **kwargs: object
) -> tuple[ContextAssembler, str | None]:
    a = make(budget, **kwargs)
    for name, content, priority, truncatable in components:
        a.add_component(name, content, priority, truncatable)
    try:
        out = a.assemble()
    except BudgetExceededError:
        event("budget exceeded")
        return a, None
    for status in sorted({c["status"] for c in a.get_summary()["components"]}):
        event(f"has {status}")
    return a, out


@given(COMPONENTS, BUDGET)
def test_never_over_budget(components: list[tuple[str, str, int, bool]], budget: int) -> None:
    _, out = assemble_or_error(budget, components)
    if out is not None:
        assert COUNTER.count(out) <= budget


@given(COMPONENTS, BUDGET)
def test_non_truncatable_is_whole_or_an_error(
    components: list[tuple[str, str, int, bool]], budget: int
) -> None:
    _, out = assemble_or_error(budget, components)
    pinned = [(n, c) for n, c, _, t in components if not t and c]
    if out is None:
        assert pinned, "only must-keep content may cause an error"
        return
    for name, content in pinned:
        assert f"# {name.upper()}\n{content}" in out


@given(COMPONENTS, BUDGET, st.integers(min_value=1, max_value=120))
def test_more_budget_never_removes_an_included_component(
    components: list[tuple[str, str, int, bool]], budget: int, extra: int
) -> None:
    small, out_small = assemble_or_error(budget, components)
    large, out_large = assemble_or_error(budget + extra, components)
    if out_small is None:
        return
    assert out_large is not None
    pairs = zip(small.get_summary()["components"], large.get_summary()["components"], strict=True)
    for mine, theirs in pairs:
        if mine["status"] == "included":
            assert theirs["status"] == "included", (mine, theirs)
        elif mine["status"] == "truncated":
            assert theirs["status"] != "dropped", (mine, theirs)


@given(COMPONENTS, BUDGET, st.sampled_from(["priority", "insertion"]))
def test_deterministic(
    components: list[tuple[str, str, int, bool]], budget: int, order: str
) -> None:
    _, first = assemble_or_error(budget, components, order=order)
    _, second = assemble_or_error(budget, components, order=order)
    assert first == second

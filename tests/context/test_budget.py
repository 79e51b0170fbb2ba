"""BudgetManager and AdaptiveBudgetManager: defaults, validation, arithmetic and properties."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from loomctx.context.block import BuildContext, Phase
from loomctx.context.budget import (
    DEFAULT_OUTPUT_RESERVE_RATIO,
    DEFAULT_PHASE_MULTIPLIERS,
    DEFAULT_RATIOS,
    AdaptiveBudgetManager,
    BudgetManager,
)
from loomctx.errors import ConfigError
from loomctx.tokens import HeuristicCounter

# Budgets never count text, so any counter does; this one costs nothing to build.
CTX = BuildContext(counter=HeuristicCounter())
SEED_003 = {
    "system_prompt": 0.12,
    "user_input": 0.12,
    "tools": 0.15,
    "skills": 0.10,
    "L1_recent": 0.18,
    "L2_important": 0.12,
    "L4_semantic": 0.06,
    "RAG_knowledge": 0.10,
    "agent_output": 0.05,
}


def ctx(*, turn_index: int = 0, phase: Phase | None = None) -> BuildContext:
    return BuildContext(counter=CTX.counter, turn_index=turn_index, phase=phase)


# ---------------------------------------------------------------------------------------------
# Ratios


def test_defaults_are_seed_003_plus_later_sources() -> None:
    assert {k: DEFAULT_RATIOS[k] for k in SEED_003} == SEED_003
    assert math.isclose(sum(SEED_003.values()), 1.0)
    assert dict(DEFAULT_RATIOS) == {
        **SEED_003,
        "history": 0.18,
        "inherited": 0.06,
        "shared_pool": 0.06,
        "unified_retrieval": 0.16,  # L4_semantic + RAG_knowledge: it replaces both
        "turn": 0.12,
    }
    assert BudgetManager().ratios == DEFAULT_RATIOS


def test_defaults_are_read_only() -> None:
    with pytest.raises(TypeError):
        DEFAULT_RATIOS["tools"] = 0.5  # type: ignore[index]
    with pytest.raises(TypeError):
        BudgetManager().ratios["tools"] = 0.5  # type: ignore[index]


def test_overrides_merge_over_the_defaults() -> None:
    m = BudgetManager(ratios={"tools": 0.3, "my_source": 0.2, "skills": 0})
    assert m.ratio("tools") == 0.3
    assert m.ratio("my_source") == 0.2
    assert m.ratio("skills") == 0.0
    assert m.ratio("L1_recent") == 0.18  # untouched default
    assert m.ratio("unknown") == 0.05 == m.default_ratio


def test_seed_003_split_over_its_nine_sources() -> None:
    shares = BudgetManager().ratios_for(list(SEED_003), ctx=CTX)
    for name, ratio in SEED_003.items():
        assert math.isclose(shares[name], ratio)


def test_ratios_for_normalises_over_the_names_present() -> None:
    shares = BudgetManager().ratios_for(["tools", "agent_output"], ctx=CTX)
    assert math.isclose(shares["tools"], 0.75)
    assert math.isclose(shares["agent_output"], 0.25)
    assert math.isclose(sum(shares.values()), 1.0)


def test_unknown_names_get_the_default_ratio() -> None:
    m = BudgetManager(default_ratio=0.1)
    shares = m.ratios_for(["RAG_knowledge", "weather", "news"], ctx=CTX)
    assert shares == pytest.approx({"RAG_knowledge": 1 / 3, "weather": 1 / 3, "news": 1 / 3})


def test_all_zero_ratios_split_equally() -> None:
    m = BudgetManager(ratios={"a": 0, "b": 0}, default_ratio=0)
    assert m.ratios_for(["a", "b", "c", "d"], ctx=CTX) == {
        "a": 0.25,
        "b": 0.25,
        "c": 0.25,
        "d": 0.25,
    }
    assert m.ratios_for([], ctx=CTX) == {}


@pytest.mark.parametrize("bad", [-0.1, 1.5, math.nan, math.inf, "0.1", None, True])
def test_a_bad_ratio_is_named_with_its_value(bad: object) -> None:
    with pytest.raises(ConfigError) as info:
        BudgetManager(ratios={"tools": bad})  # type: ignore[dict-item]
    msg = str(info.value)
    assert "`ratios['tools']`" in msg
    assert repr(bad) in msg
    assert "within [0, 1]" in msg


@pytest.mark.parametrize("bad", [-1, 2.0, math.nan, False])
def test_a_bad_default_ratio_is_named_with_its_value(bad: float) -> None:
    with pytest.raises(ConfigError) as info:
        BudgetManager(default_ratio=bad)
    assert "`default_ratio`" in str(info.value)
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize("bad", ["", 3])
def test_a_ratio_key_must_be_a_source_name(bad: object) -> None:
    with pytest.raises(ConfigError, match="`ratios` keys must be source names") as info:
        BudgetManager(ratios={bad: 0.1})  # type: ignore[dict-item]
    assert repr(bad) in str(info.value)


def test_ratios_for_rejects_duplicate_names() -> None:
    with pytest.raises(ConfigError, match=r"`names` names source 'tools' twice"):
        BudgetManager().ratios_for(["tools", "tools"], ctx=CTX)
    with pytest.raises(ConfigError, match=r"`names` names source 'tools' twice"):
        AdaptiveBudgetManager().ratios_for(["tools", "tools"], ctx=CTX)


# ---------------------------------------------------------------------------------------------
# available


def test_available_defaults_to_a_fifth_reserved() -> None:
    assert DEFAULT_OUTPUT_RESERVE_RATIO == 0.2
    assert BudgetManager.available(128_000) == (102_400, 25_600)


def test_available_with_a_ratio_rounds_the_reserve_up() -> None:
    assert BudgetManager.available(8192, output_reserve_ratio=0.1) == (7372, 820)  # 819.2 -> 820
    assert BudgetManager.available(10, output_reserve_ratio=0.25) == (7, 3)  # 2.5 -> 3
    assert BudgetManager.available(10, output_reserve_ratio=0) == (10, 0)
    assert BudgetManager.available(1, output_reserve_ratio=0) == (1, 0)


def test_available_uses_the_ratio_as_written_not_its_binary_float() -> None:
    # 100 * 0.07 is 7.000000000000001 in binary floating point; the reserve is 7, not 8.
    assert 100 * 0.07 > 7
    assert BudgetManager.available(100, output_reserve_ratio=0.07) == (93, 7)
    assert BudgetManager.available(1000, output_reserve_ratio=0.29) == (710, 290)


def test_available_with_max_output_tokens() -> None:
    assert BudgetManager.available(128_000, max_output_tokens=4096) == (123_904, 4096)
    assert BudgetManager.available(10, max_output_tokens=0) == (10, 0)
    assert BudgetManager.available(10, max_output_tokens=9) == (1, 9)


@pytest.mark.parametrize("bad", [0, -5, 1.5, "8k", None, True])
def test_available_rejects_a_bad_window(bad: object) -> None:
    with pytest.raises(ConfigError) as info:
        BudgetManager.available(bad)  # type: ignore[arg-type]
    assert "`model_context_window`" in str(info.value)
    assert repr(bad) in str(info.value)


def test_available_rejects_both_reserves() -> None:
    with pytest.raises(ConfigError) as info:
        BudgetManager.available(1000, output_reserve_ratio=0.1, max_output_tokens=100)
    msg = str(info.value)
    assert "`output_reserve_ratio`" in msg
    assert "`max_output_tokens`" in msg
    assert "not both" in msg


@pytest.mark.parametrize("bad", [-0.1, 1.01, math.nan, "0.2"])
def test_available_rejects_a_bad_reserve_ratio(bad: object) -> None:
    with pytest.raises(ConfigError) as info:
        BudgetManager.available(1000, output_reserve_ratio=bad)  # type: ignore[arg-type]
    assert "`output_reserve_ratio`" in str(info.value)
    assert repr(bad) in str(info.value)


def test_available_rejects_a_reserve_ratio_of_one() -> None:
    with pytest.raises(ConfigError, match=r"`output_reserve_ratio` must be below 1"):
        BudgetManager.available(1000, output_reserve_ratio=1)


@pytest.mark.parametrize("bad", [-1, 1000, 5000])
def test_available_rejects_max_output_tokens_outside_the_window(bad: int) -> None:
    with pytest.raises(ConfigError) as info:
        BudgetManager.available(1000, max_output_tokens=bad)
    msg = str(info.value)
    assert "`max_output_tokens` must be within [0, 1000)" in msg
    assert repr(bad) in msg


def test_available_rejects_max_output_tokens_that_is_not_an_int() -> None:
    with pytest.raises(ConfigError, match=r"`max_output_tokens` must be an int, got 10\.5"):
        BudgetManager.available(1000, max_output_tokens=10.5)  # type: ignore[arg-type]


def test_available_rejects_a_reserve_that_rounds_up_to_the_whole_window() -> None:
    with pytest.raises(ConfigError) as info:
        BudgetManager.available(1, output_reserve_ratio=0.5)
    msg = str(info.value)
    assert "leaves no input budget in a window of 1 tokens" in msg
    assert "lower `output_reserve_ratio`" in msg


@given(
    window=st.integers(1, 2_000_000),
    ratio=st.floats(0, 1, exclude_max=True, allow_nan=False),
)
def test_available_plus_reserve_is_the_window(window: int, ratio: float) -> None:
    try:
        available, reserve = BudgetManager.available(window, output_reserve_ratio=ratio)
    except ConfigError:
        assert math.ceil(window * ratio) >= window - 1  # only when nothing would be left
        return
    assert available + reserve == window
    assert available >= 1
    # reserve == ceil(window * ratio), up to the float's last bit.
    assert reserve - 1 < window * ratio <= reserve * (1 + 1e-12)


# ---------------------------------------------------------------------------------------------
# allocate


def test_allocate_splits_available_exactly_and_proportionally() -> None:
    m = BudgetManager()
    sources = [(name, 0.5) for name in SEED_003]
    grants = m.allocate(sources, 10_007, ctx=CTX)
    assert list(grants) == list(SEED_003)
    assert sum(b.tokens for b in grants.values()) == 10_007
    for name, ratio in SEED_003.items():
        assert abs(grants[name].tokens - ratio * 10_007) < 1
        assert grants[name].ceiling == 10_007


def test_allocate_hands_the_remainder_to_the_largest_fractions() -> None:
    m = BudgetManager(ratios={"a": 0.5, "b": 0.3, "c": 0.2})
    # exact: a 5.5, b 3.3, c 2.2 -> floors 5, 3, 2; the one leftover token goes to a (.5).
    grants = m.allocate([("a", 0.1), ("b", 0.9), ("c", 0.5)], 11, ctx=CTX)
    assert {n: b.tokens for n, b in grants.items()} == {"a": 6, "b": 3, "c": 2}


def test_allocate_breaks_remainder_ties_by_priority_then_order() -> None:
    m = BudgetManager(default_ratio=0.1)
    grants = m.allocate([("a", 0.2), ("b", 0.9), ("c", 0.2), ("d", 0.2)], 6, ctx=CTX)
    # 1.5 each: two leftover tokens, to b (higher priority) and then a (given first).
    assert {n: b.tokens for n, b in grants.items()} == {"a": 2, "b": 2, "c": 1, "d": 1}


def test_allocate_edge_cases() -> None:
    m = BudgetManager()
    assert m.allocate([], 100, ctx=CTX) == {}
    (only,) = m.allocate([("tools", 1.0)], 100, ctx=CTX).values()
    assert (only.tokens, only.ceiling) == (100, 100)
    zero = m.allocate([("tools", 1.0), ("skills", 0.0)], 0, ctx=CTX)
    assert all(b.tokens == b.ceiling == 0 for b in zero.values())


def test_allocate_gives_a_zero_ratio_source_no_tokens_but_the_full_ceiling() -> None:
    m = BudgetManager(ratios={"skills": 0})
    grants = m.allocate([("tools", 0.5), ("skills", 0.5)], 1000, ctx=CTX)
    assert grants["skills"].tokens == 0
    assert grants["skills"].ceiling == 1000
    assert grants["tools"].tokens == 1000


def test_allocate_splits_equally_when_a_subclass_gives_no_weight() -> None:
    class Nothing(BudgetManager):
        def ratios_for(self, names: Sequence[str], *, ctx: BuildContext) -> dict[str, float]:
            return dict.fromkeys(names, 0.0)

    grants = Nothing().allocate([("a", 0.5), ("b", 0.5), ("c", 0.5)], 10, ctx=CTX)
    assert [b.tokens for b in grants.values()] == [4, 3, 3]


def test_allocate_rejects_duplicate_names() -> None:
    with pytest.raises(ConfigError) as info:
        BudgetManager().allocate([("tools", 0.5), ("tools", 0.9)], 100, ctx=CTX)
    msg = str(info.value)
    assert "`sources` names source 'tools' twice" in msg
    assert "unique `name`" in msg


@pytest.mark.parametrize("bad", [-0.5, 1.5, math.nan])
def test_allocate_rejects_a_bad_priority(bad: float) -> None:
    with pytest.raises(ConfigError) as info:
        BudgetManager().allocate([("tools", bad)], 100, ctx=CTX)
    assert "the priority of source 'tools'" in str(info.value)
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize("bad", [-1, 2.5, None])
def test_allocate_rejects_a_bad_available(bad: object) -> None:
    with pytest.raises(ConfigError) as info:
        BudgetManager().allocate([("tools", 0.5)], bad, ctx=CTX)  # type: ignore[arg-type]
    assert "`available`" in str(info.value)
    assert repr(bad) in str(info.value)


_NAMES = st.sampled_from([*DEFAULT_RATIOS, "custom_a", "custom_b", "custom_c"])
_PRIORITY = st.floats(0, 1, allow_nan=False)


@given(
    sources=st.lists(st.tuples(_NAMES, _PRIORITY), max_size=14, unique_by=lambda s: s[0]),
    overrides=st.dictionaries(_NAMES, st.floats(0, 1, allow_nan=False), max_size=5),
    default_ratio=st.floats(0, 1, allow_nan=False),
    available=st.integers(0, 10**9),
    turn_index=st.integers(0, 12),
    adaptive=st.booleans(),
)
def test_allocate_property(
    sources: list[tuple[str, float]],
    overrides: dict[str, float],
    default_ratio: float,
    available: int,
    turn_index: int,
    adaptive: bool,
) -> None:
    cls = AdaptiveBudgetManager if adaptive else BudgetManager
    m = cls(ratios=overrides, default_ratio=default_ratio)
    c = ctx(turn_index=turn_index)
    grants = m.allocate(sources, available, ctx=c)
    assert list(grants) == [name for name, _ in sources]
    if sources:
        assert sum(b.tokens for b in grants.values()) == available
    for b in grants.values():
        assert b.tokens >= 0
        assert b.ceiling == available
    # Proportional: within one token of the exact share.
    shares = m.ratios_for([n for n, _ in sources], ctx=c)
    for name, b in grants.items():
        assert abs(b.tokens - shares[name] * available) <= 1 + available * 1e-9


# ---------------------------------------------------------------------------------------------
# redistribute


def test_redistribute_moves_unused_budget_to_the_highest_priority_first() -> None:
    grants = {"tools": 100, "rag": 100, "l1": 100, "l2": 100}
    demands = {"tools": 20, "rag": 300, "l1": 150, "l2": 100}
    priorities = {"tools": 0.9, "rag": 0.3, "l1": 0.8, "l2": 0.5}
    out = BudgetManager.redistribute(grants, demands, priorities)
    # 80 freed by tools: l1 (0.8) takes the 50 it lacks, rag (0.3) the other 30.
    assert out == {"tools": 20, "rag": 130, "l1": 150, "l2": 100}
    assert sum(out.values()) == sum(grants.values())


def test_redistribute_when_everyone_is_satisfied_returns_the_demands() -> None:
    out = BudgetManager.redistribute({"a": 50, "b": 50}, {"a": 10, "b": 0}, {"a": 0.5, "b": 0.5})
    assert out == {"a": 10, "b": 0}


def test_redistribute_ties_go_to_the_larger_unmet_demand_then_the_name() -> None:
    grants = {"free": 10, "x": 0, "y": 0, "z": 0}
    demands = {"free": 0, "x": 4, "y": 8, "z": 4}
    priorities = {"free": 0.1, "x": 0.5, "y": 0.5, "z": 0.5}
    out = BudgetManager.redistribute(grants, demands, priorities)
    assert (out["y"], out["x"], out["z"]) == (8, 2, 0)


def test_redistribute_names_missing_from_one_side_count_as_zero() -> None:
    out = BudgetManager.redistribute({"a": 10}, {"b": 7}, {"a": 0.5, "b": 0.5})
    assert out == {"a": 0, "b": 7}


def test_redistribute_needs_a_priority_for_every_source() -> None:
    with pytest.raises(ConfigError) as info:
        BudgetManager.redistribute({"a": 10}, {"a": 5, "b": 3}, {"a": 0.5})
    assert "`priorities` has no entry for source 'b'" in str(info.value)


@pytest.mark.parametrize(
    ("grants", "demands", "what"),
    [
        ({"a": -1}, {"a": 1}, "`grants['a']`"),
        ({"a": 1}, {"a": -3}, "`demands['a']`"),
        ({"a": 1.5}, {"a": 1}, "`grants['a']`"),
        ({"a": True}, {"a": 1}, "`grants['a']`"),
    ],
)
def test_redistribute_rejects_bad_token_counts(
    grants: dict[str, int], demands: dict[str, int], what: str
) -> None:
    with pytest.raises(ConfigError) as info:
        BudgetManager.redistribute(grants, demands, {"a": 0.5})
    msg = str(info.value)
    assert what in msg
    assert "must be an int >= 0" in msg


def test_redistribute_rejects_a_bad_priority() -> None:
    with pytest.raises(ConfigError) as info:
        BudgetManager.redistribute({"a": 1}, {"a": 1}, {"a": 2.0})
    assert "`priorities['a']`" in str(info.value)
    assert "2.0" in str(info.value)


_SOURCE_NAMES = st.sampled_from(["a", "b", "c", "d", "e", "f"])


@given(
    grants=st.dictionaries(_SOURCE_NAMES, st.integers(0, 1000)),
    demands=st.dictionaries(_SOURCE_NAMES, st.integers(0, 1000)),
    priorities=st.fixed_dictionaries(
        {}, optional=dict.fromkeys(["a", "b", "c", "d", "e", "f"], _PRIORITY)
    ),
)
def test_redistribute_property(
    grants: dict[str, int], demands: dict[str, int], priorities: dict[str, float]
) -> None:
    assume(set(grants) | set(demands) <= set(priorities))
    out = BudgetManager.redistribute(grants, demands, priorities)
    assert set(out) == set(grants) | set(demands)
    total_granted = sum(grants.values())
    for name, n in out.items():
        grant, demand = grants.get(name, 0), demands.get(name, 0)
        assert n <= demand
        assert n >= min(grant, demand)
    assert sum(out.values()) <= total_granted
    every_demand_met = all(out[name] == demands.get(name, 0) for name in out)
    assert every_demand_met or sum(out.values()) == total_granted
    # Priority order: a source that received freed budget comes after every source of higher
    # priority that wanted more, so those are all full.
    for name, n in out.items():
        if n > min(grants.get(name, 0), demands.get(name, 0)):
            for other in out:
                if priorities[other] > priorities[name]:
                    assert out[other] == demands.get(other, 0)


# ---------------------------------------------------------------------------------------------
# AdaptiveBudgetManager


@pytest.mark.parametrize(
    ("turn_index", "phase"),
    [(0, "early"), (1, "early"), (2, "middle"), (7, "middle"), (8, "late"), (100, "late")],
)
def test_phase_is_inferred_from_the_turn_at_the_boundaries(turn_index: int, phase: Phase) -> None:
    assert AdaptiveBudgetManager().phase(ctx(turn_index=turn_index)) == phase


def test_a_phase_set_by_the_caller_wins() -> None:
    m = AdaptiveBudgetManager()
    assert m.phase(ctx(turn_index=0, phase="late")) == "late"
    assert m.phase(ctx(turn_index=50, phase="early")) == "early"


def test_custom_phase_boundaries() -> None:
    m = AdaptiveBudgetManager(early_turns=0, late_turn=0)
    assert m.phase(ctx(turn_index=0)) == "late"
    m = AdaptiveBudgetManager(early_turns=3, late_turn=3)
    assert [m.phase(ctx(turn_index=t)) for t in (2, 3)] == ["early", "late"]


@given(early=st.integers(0, 20), span=st.integers(0, 20), turn=st.integers(0, 50))
def test_phase_inference_property(early: int, span: int, turn: int) -> None:
    m = AdaptiveBudgetManager(early_turns=early, late_turn=early + span)
    expected = "early" if turn < early else "late" if turn >= early + span else "middle"
    assert m.phase(ctx(turn_index=turn)) == expected


def test_default_multipliers() -> None:
    assert {p: dict(t) for p, t in DEFAULT_PHASE_MULTIPLIERS.items()} == {
        "early": {"L4_semantic": 1.6, "RAG_knowledge": 1.6, "unified_retrieval": 1.6},
        "middle": {"L1_recent": 1.5, "history": 1.5},
        "late": {"L2_important": 1.6, "L4_semantic": 1.2},
    }
    assert AdaptiveBudgetManager().multipliers == DEFAULT_PHASE_MULTIPLIERS


def test_the_phases_shift_the_budget_as_seed_002_says() -> None:
    names = list(SEED_003)
    base = BudgetManager().ratios_for(names, ctx=CTX)
    m = AdaptiveBudgetManager()
    early = m.ratios_for(names, ctx=ctx(turn_index=0))
    middle = m.ratios_for(names, ctx=ctx(turn_index=4))
    late = m.ratios_for(names, ctx=ctx(turn_index=9))
    assert early["RAG_knowledge"] > base["RAG_knowledge"]
    assert early["L4_semantic"] > base["L4_semantic"]
    assert middle["L1_recent"] > base["L1_recent"]
    assert late["L2_important"] > base["L2_important"]
    for shares in (early, middle, late):
        assert math.isclose(sum(shares.values()), 1.0)
    assert early["tools"] < base["tools"]  # what the boost takes comes from everyone else


def test_multiplier_overrides_merge_by_phase_and_source() -> None:
    m = AdaptiveBudgetManager(multipliers={"early": {"RAG_knowledge": 3.0, "tools": 0}})
    assert dict(m.multipliers["early"]) == {
        "L4_semantic": 1.6,
        "RAG_knowledge": 3.0,
        "unified_retrieval": 1.6,
        "tools": 0.0,
    }
    assert m.multipliers["late"] == DEFAULT_PHASE_MULTIPLIERS["late"]
    shares = m.ratios_for(["RAG_knowledge", "tools", "skills"], ctx=ctx(phase="early"))
    assert shares["tools"] == 0
    assert shares["RAG_knowledge"] == pytest.approx(0.3 / 0.4)


def test_adaptive_uses_the_overridden_ratios() -> None:
    m = AdaptiveBudgetManager(ratios={"RAG_knowledge": 0}, default_ratio=0.2)
    shares = m.ratios_for(["RAG_knowledge", "weather"], ctx=ctx(phase="early"))
    assert shares == {"RAG_knowledge": 0.0, "weather": 1.0}
    assert m.ratios_for([], ctx=CTX) == {}


def test_adaptive_rejects_an_unknown_phase() -> None:
    with pytest.raises(ConfigError) as info:
        AdaptiveBudgetManager(multipliers={"endgame": {"tools": 2.0}})  # type: ignore[dict-item]
    msg = str(info.value)
    assert "`multipliers` has an unknown phase 'endgame'" in msg
    assert "'early', 'middle', 'late'" in msg


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan, "2", None, True])
def test_adaptive_rejects_a_bad_multiplier(bad: object) -> None:
    with pytest.raises(ConfigError) as info:
        AdaptiveBudgetManager(multipliers={"late": {"L2_important": bad}})  # type: ignore[dict-item]
    msg = str(info.value)
    assert "`multipliers['late']['L2_important']`" in msg
    assert repr(bad) in msg
    assert "use 1 to leave" in msg


@pytest.mark.parametrize(
    ("early", "late"),
    [(-1, 5), (6, 5), (0, -1)],
)
def test_adaptive_rejects_inconsistent_turn_boundaries(early: int, late: int) -> None:
    with pytest.raises(ConfigError) as info:
        AdaptiveBudgetManager(early_turns=early, late_turn=late)
    msg = str(info.value)
    assert "0 <= early_turns <= late_turn" in msg
    assert f"{early!r} and {late!r}" in msg


@pytest.mark.parametrize("param", ["early_turns", "late_turn"])
def test_adaptive_rejects_turn_boundaries_that_are_not_ints(param: str) -> None:
    with pytest.raises(ConfigError, match=rf"`{param}` must be an int, got 2\.5"):
        AdaptiveBudgetManager(**{param: 2.5})  # type: ignore[arg-type]


def test_adaptive_validates_the_base_ratios_too() -> None:
    with pytest.raises(ConfigError, match=r"`ratios\['tools'\]`"):
        AdaptiveBudgetManager(ratios={"tools": 2})


_PHASES: tuple[Phase, ...] = ("early", "middle", "late")


@given(
    names=st.lists(_NAMES, min_size=1, max_size=14, unique=True),
    overrides=st.dictionaries(_NAMES, st.integers(0, 100).map(lambda n: n / 100), max_size=6),
    phase=st.sampled_from(_PHASES),
)
def test_adaptive_boosts_the_phases_most_boosted_sources(
    names: list[str], overrides: dict[str, float], phase: Phase
) -> None:
    """With the default multipliers, the sources with the phase's largest factor present get a
    strictly larger share than the base manager gives them, whenever some other present source
    with a positive ratio is boosted less. (A source boosted less than another may lose share:
    late, L4_semantic x1.2 can lose to L2_important x1.6.)"""
    base = BudgetManager(ratios=overrides)
    adaptive = AdaptiveBudgetManager(ratios=overrides)
    c = ctx(phase=phase)
    before = base.ratios_for(names, ctx=c)
    after = adaptive.ratios_for(names, ctx=c)
    assert math.isclose(sum(after.values()), 1.0)
    factors = DEFAULT_PHASE_MULTIPLIERS[phase]
    present = {n: factors.get(n, 1.0) for n in names}
    top = max(present.values())
    boosted = [n for n in names if present[n] == top and top > 1]
    boosted_less = [n for n in names if present[n] < top and base.ratio(n) > 0]
    for name in boosted:
        if base.ratio(name) > 0 and boosted_less:
            assert after[name] > before[name]
        else:
            assert after[name] >= before[name] or math.isclose(after[name], before[name])
    # Sources not boosted never gain.
    for name in names:
        if present[name] == 1.0 and top > 1:
            assert after[name] <= before[name] or math.isclose(after[name], before[name])


def _allocate_with_fractions(
    sources: Sequence[tuple[str, float]], shares: dict[str, float], available: int
) -> dict[str, int]:
    """The reference for `BudgetManager.allocate`'s integer arithmetic: the same rule with
    `Fraction`s (largest remainders, ties by priority then order)."""
    from fractions import Fraction

    weights = [Fraction(shares[name]) for name, _ in sources]
    total = sum(weights, Fraction(0))
    exact = [w * available / total for w in weights]
    tokens = [math.floor(x) for x in exact]
    order = sorted(range(len(sources)), key=lambda i: (-(exact[i] - tokens[i]), -sources[i][1], i))
    for i in order[: available - sum(tokens)]:
        tokens[i] += 1
    return {name: n for (name, _), n in zip(sources, tokens, strict=True)}


@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0.0, max_value=1.0),
            st.sampled_from([0.0, 0.3, 0.5, 0.9, 1.0]),
        ),
        min_size=1,
        max_size=8,
    ),
    st.integers(min_value=0, max_value=200_000),
)
def test_allocate_matches_exact_fraction_arithmetic(
    spec: list[tuple[float, float]], available: int
) -> None:
    ratios = {f"s{i}": ratio for i, (ratio, _) in enumerate(spec)}
    assume(sum(ratios.values()) > 0)
    sources = [(f"s{i}", priority) for i, (_, priority) in enumerate(spec)]
    manager = BudgetManager(ratios=ratios)
    shares = manager.ratios_for([name for name, _ in sources], ctx=BuildContext())
    got = manager.allocate(sources, available, ctx=BuildContext())
    assert {name: b.tokens for name, b in got.items()} == _allocate_with_fractions(
        sources, shares, available
    )

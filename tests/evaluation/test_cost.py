"""`evaluate_cost`: every strategy replayed on a real-format conversation, billed as providers
bill a prefix cache."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from loomctx.context.billing import ANTHROPIC, OPENAI, PROVIDERS
from loomctx.context.recipe import WindowSettings
from loomctx.errors import ConfigError
from loomctx.evaluation.cost import (
    DATED,
    CallCost,
    bill_calls,
    evaluate_cost,
    load_exchanges,
    where_whole_fits,
)
from loomctx.evaluation.retrieval import load_longmemeval
from tests.evaluation.test_evaluate import lme_data, locomo_data, write

# The test conversation's prompts are a few hundred tokens, under the providers' shortest
# cached prefix: these pricings cache any prefix, so that the bill shows the cache at work.
SMALL = [replace(p, min_tokens=0) for p in PROVIDERS.values()]


@pytest.fixture
def locomo(tmp_path: Path) -> Path:
    return write(tmp_path / "locomo.json", locomo_data())


def test_exchanges_pair_each_user_stretch_with_the_replies_after_it(locomo: Path) -> None:
    (exchanges,) = load_exchanges(locomo)
    assert exchanges
    assert all(asked and said for asked, said in exchanges)


# The fixture's turns are all alike: nothing stands out of what is retrieved, so a tail that
# holds only what does (`CachePolicy.tail_lift`, the recipe's) is empty. The tests that
# measure the tail itself use the cap alone.
CAPPED = replace(WindowSettings().cache_policy, tail_lift=None)


def test_every_strategy_is_measured_and_loom_stays_within_budget(locomo: Path) -> None:
    result = evaluate_cost(locomo, window=600, reserve=100, pricings=SMALL, cache_policy=CAPPED)
    json.dumps(result)
    whole, sliding, loom = (result["strategies"][s] for s in STRATEGY_NAMES)
    calls = len(load_exchanges(locomo)[0])
    assert whole["calls"] == sliding["calls"] == loom["calls"] == calls
    # 60 turns do not fit 500 tokens: the whole history goes over, the others never do.
    assert whole["over_budget"] > 0
    assert sliding["over_budget"] == loom["over_budget"] == 0
    # Sending everything is all prefix; dropping the oldest turn moves the prefix each call.
    assert whole["cached_share"] > 0.9
    assert loom["cached_share"] > sliding["cached_share"]
    # A client marks the end of its prompt: the whole history reads the previous prompt and
    # writes what is new at 1.25x; nothing is billed at the plain price.
    cached = whole["cached_share"] * whole["mean_prompt_tokens"]
    billed = 0.1 * cached + 1.25 * (whole["mean_prompt_tokens"] - cached)
    assert whole["billed_anthropic"] == pytest.approx(billed, rel=0.01)
    assert whole["providers"]["anthropic"]["plain"] == 0
    # Loom's dynamic tail follows its last breakpoint: billed plain, not written.
    anthropic = loom["providers"]["anthropic"]
    assert anthropic["plain"] > 0
    assert anthropic["cached"] + anthropic["written"] + anthropic["plain"] == pytest.approx(
        loom["mean_prompt_tokens"], abs=0.2
    )
    cached = loom["cached_share"] * loom["mean_prompt_tokens"]
    assert loom["billed_anthropic"] < 0.1 * cached + 1.25 * (loom["mean_prompt_tokens"] - cached)
    assert loom["billed_anthropic"] < sliding["billed_anthropic"]
    # OpenAI writes at no premium; its newest family reads at a tenth.
    assert all(s["providers"]["openai"]["written"] == 0 for s in (whole, sliding, loom))
    assert loom["providers"]["openai-gpt-5"]["billed"] < loom["billed_openai"]


def test_the_real_providers_cache_no_prefix_shorter_than_their_minimum(locomo: Path) -> None:
    result = evaluate_cost(locomo, window=600, reserve=100, only=["conv-x"])
    for s in result["strategies"].values():  # every prompt is under 1,024 tokens
        assert s["providers"]["anthropic"]["cached"] == 0
        assert s["billed_anthropic"] == s["billed_openai"] == s["mean_prompt_tokens"]


def test_calls_are_billed_where_they_are_marked() -> None:
    calls = [
        CallCost(prompt_tokens=3000, cached_tokens=0, over_budget=False, marks=(1200, 2500)),
        CallCost(prompt_tokens=3600, cached_tokens=2500, over_budget=False, marks=(1200, 3100)),
        CallCost(prompt_tokens=3700, cached_tokens=3100, over_budget=False, cold=True),
    ]
    first, second, third = bill_calls(calls, ANTHROPIC)
    assert (first.cached, first.written, first.plain) == (0, 2500, 500)
    assert (second.cached, second.written, second.plain) == (2500, 600, 500)
    # No marks: one breakpoint at the end, as a client marks it.
    assert (third.cached, third.written, third.plain) == (3100, 600, 0)
    assert bill_calls(calls, ANTHROPIC, cold=True)[2].cached == 0
    assert [p.written for p in bill_calls(calls, OPENAI)] == [0, 0, 0]


STRATEGY_NAMES = ("whole history", "sliding window", "loom")


def test_a_reserve_that_leaves_no_input_is_refused(locomo: Path) -> None:
    with pytest.raises(ConfigError, match="`reserve`"):
        evaluate_cost(locomo, window=500, reserve=500)


def test_loom_s_evidence_is_measured_right_after_it_and_at_the_end(locomo: Path) -> None:
    result = evaluate_cost(locomo, window=600, reserve=100)
    loom = result["strategies"]["loom"]
    # Right after their turns, the three gold turns are in the window's history.
    assert loom["evidence_after"] == 1.0
    # 60 turns later, what the window's history no longer holds is found again by retrieval.
    assert 0 < loom["evidence_at_end"] <= 1
    assert "evidence_after" not in result["strategies"]["whole history"]
    assert result["conversations"]["conv-x"]["loom"] == loom


def test_one_conversation_is_replayed_by_name_and_an_unknown_name_is_refused(
    locomo: Path,
) -> None:
    assert (
        evaluate_cost(locomo, window=600, reserve=100, only=["conv-x"])["config"]["conversations"]
        == 1
    )
    with pytest.raises(ConfigError, match=r"no conversation 'conv-9'.*it has 'conv-x'"):
        evaluate_cost(locomo, window=600, reserve=100, only=["conv-9"])


def test_a_smaller_tail_cap_is_measured_as_asked(locomo: Path) -> None:
    default = evaluate_cost(locomo, window=600, reserve=100, cache_policy=CAPPED)
    small = evaluate_cost(locomo, window=600, reserve=100, max_dynamic=0.05, cache_policy=CAPPED)
    assert small["config"]["max_dynamic"] == 0.05
    # Less of each prompt is retrieved anew: more of it is what the cache read.
    assert (
        small["strategies"]["loom"]["cached_share"] > default["strategies"]["loom"]["cached_share"]
    )


def test_a_lifted_tail_is_measured_as_asked(locomo: Path) -> None:
    default = evaluate_cost(locomo, window=600, reserve=100, pricings=SMALL, cache_policy=CAPPED)
    lifted = evaluate_cost(
        locomo, window=600, reserve=100, tail_lift=1.0, pricings=SMALL, cache_policy=CAPPED
    )
    assert lifted["config"]["tail_lift"] == 1.0
    # No block stands that far above the rest: no tail, so the cache reads more of each call.
    assert (
        lifted["strategies"]["loom"]["cached_share"] > default["strategies"]["loom"]["cached_share"]
    )


def test_a_cold_cache_at_each_session_s_start_reads_less(locomo: Path) -> None:
    result = evaluate_cost(locomo, window=600, reserve=100, pricings=SMALL)
    for s in result["strategies"].values():
        assert s["cached_share_cold"] <= s["cached_share"]
        assert s["billed_anthropic_cold"] >= s["billed_anthropic"]
    # The whole history's second session opens on 30 turns its cache no longer holds.
    whole = result["strategies"]["whole history"]
    assert whole["cached_share_cold"] < whole["cached_share"]


def test_each_longmemeval_haystack_session_opens_on_a_cold_cache(tmp_path: Path) -> None:
    path = write(tmp_path / "longmemeval_s.json", lme_data())
    (question,) = load_longmemeval(path)[:1]
    result = evaluate_cost(path, window=600, reserve=100, pricings=SMALL)
    whole = result["strategies"]["whole history"]
    # Sessions days apart: each opens with nothing read, so cold reads less than warm.
    assert len(question.sessions) > 1
    assert whole["cached_share_cold"] < whole["cached_share"]
    assert whole["billed_anthropic_cold"] > whole["billed_anthropic"]


def test_loom_is_replayed_as_the_conversation_happened_too(locomo: Path) -> None:
    """Its sessions days apart: the second replay's cold figures are the cold ones, and it
    measures evidence as the first does."""
    result = evaluate_cost(locomo, window=600, reserve=100, pricings=SMALL)
    dated, loom = result["strategies"][DATED], result["strategies"]["loom"]
    assert dated["calls"] == loom["calls"]
    assert dated["over_budget"] == 0
    assert 0 < dated["evidence_after"] <= 1
    assert dated["cached_share_cold"] < dated["cached_share"]
    assert all(DATED in v for v in result["conversations"].values())


def test_calls_where_the_whole_history_fits_are_compared_one_by_one() -> None:
    whole = [
        CallCost(prompt_tokens=1000, cached_tokens=900, over_budget=False),
        CallCost(prompt_tokens=1100, cached_tokens=1000, over_budget=False),
        CallCost(prompt_tokens=9000, cached_tokens=8900, over_budget=True),
    ]
    same = where_whole_fits(whole, whole, replace(ANTHROPIC, min_tokens=0))
    assert same == {"calls": 2, "above": 0}
    # Nothing cached on the second call: billed far above the whole history's there.
    broken = [whole[0], replace(whole[1], cached_tokens=0), whole[2]]
    assert where_whole_fits(broken, whole, replace(ANTHROPIC, min_tokens=0)) == {
        "calls": 2,
        "above": 1,
    }


def test_the_bench_counts_the_calls_where_the_whole_history_fits(locomo: Path) -> None:
    result = evaluate_cost(locomo, window=600, reserve=100, pricings=SMALL)
    fits = result["strategies"]["loom"]["where_whole_fits"]
    whole = result["strategies"]["whole history"]
    assert fits["calls"] == whole["calls"] - whole["over_budget"]
    assert 0 <= fits["above"] <= fits["calls"]

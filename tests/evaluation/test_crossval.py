"""Leave-one-fold-out selection (`cross_validate`) on hand-made metric tables, and the
cross-validated figures of `evaluate_locomo` / `evaluate_longmemeval` on tiny datasets."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from loomctx.context.compactor import CachePolicy
from loomctx.context.recipe import WindowSettings
from loomctx.errors import ConfigError
from loomctx.evaluation.crossval import (
    LME_GRID,
    LOCOMO_GRID,
    cross_validate,
    folds_of,
    label_of,
)
from loomctx.evaluation.retrieval import evaluate_locomo, evaluate_longmemeval
from loomctx.retrieval.settings import RetrievalSettings
from tests.evaluation.test_evaluate import lme_data, locomo_data, write


def mean_hit(rows: Sequence[Mapping[str, Any]]) -> float:
    return sum(r["hit"] for r in rows) / len(rows)


def rows(*hits: float, fold: str = "") -> list[dict[str, Any]]:
    return [{"hit": h, "fold": fold} for h in hits]


def test_each_fold_is_chosen_on_the_others_only() -> None:
    # "a" is far better on conversation c1, "b" on c2 and c3. Holding out c1, the choice made
    # on c2 + c3 must be "b"; if c1's own rows leaked into its selection, "a" would win.
    table = {
        "a": {"c1": rows(1.0, 1.0, 1.0), "c2": rows(0.3), "c3": rows(0.3)},
        "b": {"c1": rows(0.0, 0.0, 0.0), "c2": rows(0.5), "c3": rows(0.5)},
    }
    # With c1 pooled in, "a" averages (3 + 0.3 + 0.3) / 5 = 0.72, b 0.2: a leak picks "a".
    assert mean_hit([r for f in ("c1", "c2", "c3") for r in table["a"][f]]) > mean_hit(
        [r for f in ("c1", "c2", "c3") for r in table["b"][f]]
    )
    cv = cross_validate(table, mean_hit)
    assert cv.chosen["c1"] == "b"  # chosen on c2 + c3, where b is better
    # Holding out c2: a on c1 + c3 = (3 + 0.3) / 4 beats b's 0.5 / 4.
    assert cv.chosen["c2"] == "a"
    assert cv.chosen["c3"] == "a"
    # Held-out rows: c1 under b, c2 and c3 under a, in fold order.
    assert [r["hit"] for r in cv.rows] == [0.0, 0.0, 0.0, 0.3, 0.3]


def test_the_scorer_never_sees_the_held_out_fold() -> None:
    seen: list[set[str]] = []

    def spy(part: Sequence[Mapping[str, Any]]) -> float:
        seen.append({r["fold"] for r in part})
        return 0.0

    table = {
        label: {f: rows(0.5, fold=f) for f in ("f1", "f2", "f3", "f4")} for label in ("x", "y")
    }
    cross_validate(table, spy)
    # 4 held-out folds x 2 settings, each scored on exactly the 3 other folds
    assert len(seen) == 8
    for i, folds in enumerate(seen):
        held = f"f{i // 2 + 1}"
        assert folds == {"f1", "f2", "f3", "f4"} - {held}


def test_ties_go_to_the_first_setting() -> None:
    table = {
        "defaults": {"c1": rows(0.5), "c2": rows(0.5)},
        "other": {"c1": rows(0.5), "c2": rows(0.5)},
    }
    assert cross_validate(table, mean_hit).chosen == {"c1": "defaults", "c2": "defaults"}


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({}, "no settings"),
        ({"a": {"c1": rows(1.0)}}, "at least 2 folds"),
        ({"a": {"c1": [], "c2": []}, "b": {"c1": []}}, "every setting needs the same folds"),
    ],
)
def test_cross_validate_rejects_bad_tables(table: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        cross_validate(table, mean_hit)


def test_folds_of_deals_round_robin() -> None:
    assert folds_of(5, 2) == ["fold-1", "fold-2", "fold-1", "fold-2", "fold-1"]
    with pytest.raises(ConfigError, match="int >= 2 folds"):
        folds_of(5, 1)
    with pytest.raises(ConfigError, match="3 questions cannot fill 5 folds"):
        folds_of(3, 5)


def test_grids_start_with_the_defaults_and_hold_no_duplicates() -> None:
    for grid in (LOCOMO_GRID, LME_GRID):
        assert grid[0] == RetrievalSettings()
        assert len({label_of(g) for g in grid}) == len(grid)
    # a policy is named by what differs from the window recipe's (an `Agent`'s default)
    agents = WindowSettings().cache_policy
    assert label_of(replace(agents, min_dynamic=0)) == "policy: min_dynamic=0"
    assert label_of(agents) == "policy: defaults"
    assert label_of(CachePolicy()) != "policy: defaults"


def two_conversations() -> list[dict[str, Any]]:
    first = locomo_data()[0]
    second = json.loads(json.dumps(first))
    second["sample_id"] = "conv-y"
    return [first, second]


def test_evaluate_locomo_cross_validated(tmp_path: Path) -> None:
    path = write(tmp_path / "l.json", two_conversations())
    grid = [RetrievalSettings(), RetrievalSettings(neighbour_weight=0.0)]
    r = evaluate_locomo(path, dense=False, cv=True, grid=grid, cv_target="r@10")
    held = r["cross_validated"]
    assert held["chosen"].keys() == {"conv-x", "conv-y"}
    assert set(held["chosen"].values()) <= {"defaults", "neighbour_weight=0.0"}
    assert held["questions"] == r["questions"] == 4
    assert held["target"] == "r@10"
    assert held["grid"] == ["defaults", "neighbour_weight=0.0"]
    assert held["per_setting"]["defaults"] == r["r@10"]
    assert held["conversations"].keys() == {"conv-x", "conv-y"}  # each held out, apart
    assert held["by_category"].keys() == r["by_category"].keys()
    json.dumps(r)


def test_evaluate_locomo_cross_validates_a_cache_policy(tmp_path: Path) -> None:
    path = write(tmp_path / "l.json", two_conversations())
    floorless = replace(WindowSettings().cache_policy, min_dynamic=0)
    grid = [RetrievalSettings(), floorless]
    r = evaluate_locomo(
        path, dense=False, cv=True, grid=grid, budgets=(300,), cv_target="window@300"
    )
    held = r["cross_validated"]
    assert held["grid"] == ["defaults", "policy: min_dynamic=0"]
    assert set(held["chosen"].values()) <= set(held["grid"])
    assert r["config"]["policy"] == "policy: defaults"
    plain = evaluate_locomo(path, dense=False, budgets=(300,), policy=floorless)
    assert held["per_setting"]["policy: min_dynamic=0"] == plain["window@300"]
    assert plain["config"]["policy"] == "policy: min_dynamic=0"
    with pytest.raises(ConfigError, match="RetrievalSettings or CachePolicy"):
        evaluate_locomo(path, dense=False, cv=True, grid=["min_dynamic=0"])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match=r"sequence of RetrievalSettings$"):
        evaluate_longmemeval(
            write(tmp_path / "m.json", lme_data()), dense=False, cv=True, folds=2,
            grid=[CachePolicy()],  # type: ignore[list-item]
        )  # fmt: skip


def test_window_figures_cross_validate_only_what_an_agents_window_runs_with(
    tmp_path: Path,
) -> None:
    path = write(tmp_path / "l.json", two_conversations())
    sourced = RetrievalSettings(overlap_weight=0.25)  # read by the retrieval source
    with pytest.raises(ConfigError, match=r"overlap_weight=0\.25.*ranking figures alone"):
        evaluate_locomo(path, dense=False, cv=True, grid=[RetrievalSettings(), sourced])
    grid = [RetrievalSettings(), sourced, RetrievalSettings(neighbour_weight=0.0)]
    r = evaluate_locomo(path, dense=False, cv=True, grid=grid, budgets=(), cv_target="r@10")
    assert r["cross_validated"]["grid"] == [label_of(g) for g in grid]  # no windows: all
    assert r["cross_validated"]["left_out"] == []
    assert "overlap_weight=0.25" in [label_of(g) for g in LOCOMO_GRID]


def test_evaluate_locomo_cv_needs_two_conversations_and_a_known_target(tmp_path: Path) -> None:
    path = write(tmp_path / "l.json", locomo_data())
    with pytest.raises(ConfigError, match="at least 2 folds"):
        evaluate_locomo(path, dense=False, cv=True, grid=[RetrievalSettings()])
    with pytest.raises(ConfigError, match="`cv_target` must be one of"):
        evaluate_locomo(path, dense=False, cv=True, cv_target="window@123")


def test_evaluate_longmemeval_cross_validated(tmp_path: Path) -> None:
    path = write(tmp_path / "m.json", lme_data())
    grid = [RetrievalSettings(), RetrievalSettings(overlap_weight=0.0)]
    r = evaluate_longmemeval(path, dense=False, cv=True, folds=2, grid=grid)
    held = r["cross_validated"]
    assert held["chosen"].keys() == {"fold-1", "fold-2"}
    assert held["questions"] == 2
    assert held["folds"] == 2
    assert {"recall_any@5", "recall_all@5"} <= held.keys()
    with pytest.raises(ConfigError, match="cannot fill 5 folds"):
        evaluate_longmemeval(path, dense=False, cv=True)

"""Cross-validated choice of `RetrievalSettings`: tune on the other folds, report on this one.

Constants tuned on the very conversations their figures are reported on overstate them.
``loomctx bench locomo --cv`` and ``loomctx bench longmemeval --cv`` evaluate every setting of
a small grid once per fold (a LoCoMo conversation; a LongMemEval fold of questions), keep each
question's metrics, and then, for each fold, pick the setting whose metrics on *the other
folds* are best and report that setting's metrics on the held-out fold. The held-out figure
is what a user whose conversations nobody tuned on can expect; beside the plain figure it
shows how much of the plain one is fitted.

`cross_validate` works on a table of metric rows and knows nothing of retrieval, so the
selection is tested on hand-made tables (`tests/evaluation/test_crossval.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Final

from loomctx.context.compactor import CachePolicy
from loomctx.context.recipe import WindowSettings
from loomctx.errors import ConfigError
from loomctx.retrieval.settings import RetrievalSettings

__all__ = [
    "LME_GRID",
    "LOCOMO_GRID",
    "CrossValidation",
    "check_grid",
    "cross_validate",
    "cv_report",
    "folds_of",
    "label_of",
    "target_score",
]

Row = Mapping[str, Any]
Score = Callable[[Sequence[Row]], float]

_BASE: Final = RetrievalSettings()
_POLICY: Final = WindowSettings().cache_policy  # the window recipe's, an `Agent`'s

LOCOMO_GRID: Final = (
    _BASE,
    RetrievalSettings(neighbour_weight=0.15),
    RetrievalSettings(neighbour_weight=0.45),
    RetrievalSettings(fusion_weights=(0.4, 0.6)),
    RetrievalSettings(fusion_weights=(0.6, 0.4)),
    RetrievalSettings(overlap_weight=0.25),
    RetrievalSettings(overlap_weight=0.45),
    RetrievalSettings(whole_below=0),
    RetrievalSettings(hop_weight=0.3),
    RetrievalSettings(answer_weight=0.0),
    RetrievalSettings(answer_weight=0.7),
    RetrievalSettings(speaker_weight=0.0),
    RetrievalSettings(speaker_weight=0.2),
    RetrievalSettings(session_weight=0.0),
    RetrievalSettings(session_weight=0.2),
    RetrievalSettings(pool_depth=5),
    RetrievalSettings(pool_depth=12),
    replace(_POLICY, min_dynamic=0),
    replace(_POLICY, min_dynamic=1000),
)
"""One step either way from today's values, one constant at a time (LoCoMo names no dates
in its questions' "now", so `time_decay` plays no part there), every retrieved turn
truncatable (`whole_below=0`), the second hop, off by default (`hop_weight`), what an
answer gains from its question (`answer_weight`), the speaker signal (`speaker_weight`) and
the session signal (`session_weight`) off, as before, or doubled, memory's search pool
before fusion (`pool_depth`) shallower or deeper, and the windows' dynamic floor
(`CachePolicy.min_dynamic`) off or at half its default: a held-out
conversation is reported with one only if the other four chose it. (A floor above the
default is left out: it would only take history's room in larger windows, and what history
is worth to a conversation, beyond the gold evidence, is what this benchmark cannot see.)
The policies are the window recipe's (an `Agent`'s) with that one field changed. With window
figures, `evaluate_locomo` measures only the entries an agent's window runs with: the
policies and the memory's search fields; the retrieval source's (overlap, speaker, cutting,
hop, pool) are then left out, as an `Agent` builds its source with their defaults."""

LME_GRID: Final = (
    _BASE,
    RetrievalSettings(neighbour_weight=0.15),
    RetrievalSettings(neighbour_weight=0.45),
    RetrievalSettings(time_decay=0.3),
    RetrievalSettings(time_decay=0.7),
    RetrievalSettings(overlap_weight=0.25),
    RetrievalSettings(overlap_weight=0.45),
    RetrievalSettings(hop_weight=0.3),
    RetrievalSettings(answer_weight=0.0),
    RetrievalSettings(answer_weight=0.7),
    RetrievalSettings(time_weight=0.0),
    RetrievalSettings(time_weight=0.2),
    RetrievalSettings(role_weight=0.0),
    RetrievalSettings(role_weight=0.1),
    RetrievalSettings(session_weight=0.0),
    RetrievalSettings(session_weight=0.2),
)
"""As `LOCOMO_GRID`, with `time_decay` instead of the fusion weights (LongMemEval questions
say when they are asked, and some name a time) and without `whole_below` (LongMemEval is
measured on the ranking, not in a window); and the reranker's time, role and session
signals off or doubled (LoCoMo's questions name no time its bench resolves and none is in
the first person, so there the first two change nothing)."""


def label_of(setting: RetrievalSettings | CachePolicy) -> str:
    """A grid entry's name in a table: ``"defaults"`` or ``"neighbour_weight=0.2"`` for
    `RetrievalSettings` (`RetrievalSettings.label`), ``"policy: min_dynamic=0"`` for a
    `CachePolicy` (its fields that differ from the window recipe's policy, an `Agent`'s
    default; ``"policy: defaults"``)."""
    if isinstance(setting, RetrievalSettings):
        return setting.label()
    changed = [
        f"{f.name}={getattr(setting, f.name)}"
        for f in fields(setting)
        if getattr(setting, f.name) != getattr(_POLICY, f.name)
    ]
    return "policy: " + (", ".join(changed) or "defaults")


@dataclass(frozen=True, slots=True)
class CrossValidation:
    """What `cross_validate` chose and measured.

    `chosen`: per held-out fold, the label of the setting chosen on the other folds.
    `rows`: the held-out folds' rows under their chosen setting, fold after fold.
    """

    chosen: dict[str, str]
    rows: list[Row]


def cross_validate(
    table: Mapping[str, Mapping[str, Sequence[Row]]], score: Score
) -> CrossValidation:
    """Leave-one-fold-out selection over ``table[setting][fold] = rows``.

    For each fold, every setting is scored by `score` on the rows of all *other* folds; the
    best (the first in `table`'s order on a tie, so list the defaults first) is that fold's
    choice, and its rows on the fold are the held-out result. Every setting must have rows for
    the same folds, and there must be at least two folds."""
    if not table:
        raise ConfigError("cross_validate: no settings in the table")
    labels = list(table)
    folds = list(table[labels[0]])
    for label in labels[1:]:
        if list(table[label]) != folds:
            raise ConfigError(
                f"cross_validate: setting {label!r} has folds {list(table[label])!r}, "
                f"{labels[0]!r} has {folds!r}: every setting needs the same folds"
            )
    if len(folds) < 2:
        raise ConfigError(
            f"cross_validate: need at least 2 folds to hold one out, got {len(folds)}"
        )
    chosen: dict[str, str] = {}
    rows: list[Row] = []
    for held in folds:
        best_label, best_score = labels[0], float("-inf")
        for label in labels:
            train = [r for f in folds if f != held for r in table[label][f]]
            value = score(train)
            if value > best_score:
                best_label, best_score = label, value
        chosen[held] = best_label
        rows.extend(table[best_label][held])
    return CrossValidation(chosen=chosen, rows=rows)


def folds_of(count: int, k: int) -> list[str]:
    """Fold names for `count` items dealt round-robin into `k` folds: ``["fold-1", ...]``
    (item i goes to fold ``i % k``), so every question type spreads over the folds."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        raise ConfigError(f"cross-validation needs an int >= 2 folds, got {k!r}")
    if count < k:
        raise ConfigError(f"cross-validation: {count} questions cannot fill {k} folds")
    return [f"fold-{i % k + 1}" for i in range(count)]


def target_score(target: str) -> Score:
    """The `target` metric over a set of rows, as the reports compute it: micro over the gold
    turns for ``window@B`` (each row has ``gold`` and how many of them the window held),
    the mean over the rows for the others."""

    def score(rows: Sequence[Row]) -> float:
        if target.startswith("window@"):
            gold = sum(r["gold"] for r in rows)
            return sum(r[target] for r in rows) / gold if gold else 0.0
        return sum(r[target] for r in rows) / len(rows) if rows else 0.0

    return score


def check_grid(
    grid: Sequence[Any], target: str, keys: Sequence[str], *, policies: bool = False
) -> None:
    """Refuse a `grid` that is empty or holds anything but `RetrievalSettings` (and, with
    `policies`, `CachePolicy`s), and a `target` that is not one of the metric `keys`."""
    kinds = (RetrievalSettings, CachePolicy) if policies else (RetrievalSettings,)
    if not grid or not all(isinstance(g, kinds) for g in grid):
        what = "RetrievalSettings or CachePolicy" if policies else "RetrievalSettings"
        raise ConfigError(f"`grid` must be a non-empty sequence of {what}")
    if target not in keys:
        raise ConfigError(f"`cv_target` must be one of {list(keys)}, got {target!r}")


def cv_report(
    table: Mapping[str, Mapping[str, Sequence[Row]]],
    target: str,
    grid_size: int,
    report: Callable[[Sequence[Row]], dict[str, Any]],
) -> dict[str, Any]:
    """The ``cross_validated`` part of a bench's result: the held-out rows (`cross_validate`
    by `target`) summed up by `report`, with what each fold chose and each setting's
    `target` over all folds (``per_setting``)."""
    folds = list(next(iter(table.values())))
    if len(folds) < 2:
        raise ConfigError(
            f"cross-validation needs at least 2 folds; this run has {len(folds)} (raise "
            "`--limit`, or leave it out)"
        )
    score = target_score(target)
    result = cross_validate(table, score)
    out = report(result.rows)
    out["target"] = target
    out["chosen"] = result.chosen
    out["grid"] = list(table)
    out["grid_size"] = grid_size
    out["per_setting"] = {
        label: score([r for f in folds for r in by_fold[f]]) for label, by_fold in table.items()
    }
    return out

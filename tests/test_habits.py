"""House habits as tests (docs/STYLE habits; DESIGN.md section 4): small modules, and public
values that are frozen and keyword-only. (No import cycles inside a package:
`tests/test_cycles.py`; the complexity cap: ruff's C901 in ``pyproject.toml``.)"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from pathlib import Path

import loomctx

ROOT = Path(loomctx.__file__).parent
MAX_LINES = 600

# Modules over `MAX_LINES`, to be split by responsibility (none today). The list may only shrink: a
# module split below the limit must leave it (the test says so), and no module joins it.
OVER_THE_LIMIT: set[str] = set()


def _lines() -> dict[str, int]:
    return {
        path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(ROOT.rglob("*.py"))
    }


def test_no_module_is_over_the_limit_unless_listed() -> None:
    over = {name: n for name, n in _lines().items() if n > MAX_LINES}
    new = {name: n for name, n in over.items() if name not in OVER_THE_LIMIT}
    assert new == {}, (
        f"modules over {MAX_LINES} lines: split each by responsibility (a package of small "
        "modules, as `loomctx.stores` is) rather than adding it to OVER_THE_LIMIT"
    )


def test_the_list_of_modules_over_the_limit_only_shrinks() -> None:
    lines = _lines()
    gone = sorted(name for name in OVER_THE_LIMIT if name not in lines)
    under = sorted(name for name in OVER_THE_LIMIT if lines.get(name, 0) <= MAX_LINES)
    assert (gone, under) == ([], []), (
        f"remove from OVER_THE_LIMIT in {__file__} the modules that no longer exist or are "
        f"now within {MAX_LINES} lines, so that they stay there"
    )


def _public_dataclasses() -> dict[str, type]:
    """Every dataclass the package root or one of its public subpackages exports."""
    modules = ["loomctx"] + [
        f"loomctx.{info.name}"
        for info in pkgutil.iter_modules(loomctx.__path__)
        if not info.name.startswith("_")
    ]
    found: dict[str, type] = {}
    for name in modules:
        module = importlib.import_module(name)
        for exported in getattr(module, "__all__", ()):
            obj = getattr(module, exported)
            if isinstance(obj, type) and dataclasses.is_dataclass(obj):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


def _not_values(classes: dict[str, type]) -> dict[str, list[str]]:
    """Of `classes`, those not frozen or with positional fields, and what is wrong."""
    wrong = {}
    for name, cls in sorted(classes.items()):
        problems = [] if cls.__dataclass_params__.frozen else ["not frozen"]
        problems += [
            f"`{f.name}` positional" for f in dataclasses.fields(cls) if f.init and not f.kw_only
        ]
        if problems:
            wrong[name] = problems
    return wrong


def test_public_dataclasses_are_frozen_and_keyword_only() -> None:
    found = _public_dataclasses()
    assert len(found) > 40  # the walk reached the public API
    assert _not_values(found) == {}, (
        "public values are `@dataclass(frozen=True, slots=True, kw_only=True)` (DESIGN.md "
        "section 4); make these so"
    )


def test_the_value_check_catches_a_mutable_or_positional_dataclass() -> None:
    @dataclasses.dataclass
    class Loose:
        a: int

    @dataclasses.dataclass(frozen=True)
    class Positional:
        a: int
        b: int = dataclasses.field(default=0, kw_only=True)

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Value:
        a: int

    classes = {"Loose": Loose, "Positional": Positional, "Value": Value}
    assert _not_values(classes) == {
        "Loose": ["not frozen", "`a` positional"],
        "Positional": ["`a` positional"],
    }

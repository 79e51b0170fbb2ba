"""Imports point downward only (DESIGN.md section 3).

Each module of `loomctx` belongs to a layer; a module may import from its own layer or from a
lower one. A new top-level module or package must be given a layer here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import loomctx

LAYERS = [  # bottom first
    "errors",
    "_memo",  # a function of frozen values, kept by object
    "_media_tokens",  # what images, audio and PDFs cost (below `parts`, which re-exports it)
    "parts",
    "messages",
    "tokens",
    "text",
    "embeddings",
    "stores",
    "search",
    "memory",
    "knowledge",
    "retrieval",
    "context",
    "session",
    "agent",
    "evaluation",
    "testing",
    "server",
    "integrations",
    "cli",
    "__main__",  # `python -m loomctx`: the command
]
RANK = {name: i for i, name in enumerate(LAYERS)}
ROOT = Path(loomctx.__file__).parent


def _layer_of(module: str) -> str:
    return module.split(".")[1]


def _imports(path: Path, module: str) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.startswith("loomctx.")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.startswith("loomctx."):
                found.append(target)
            elif target == "loomctx":
                found += [f"loomctx.{alias.name}" for alias in node.names]
    return found


def _modules() -> list[tuple[Path, str]]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.append((path, ".".join(parts)))
    return out


def test_every_module_has_a_layer() -> None:
    for _, module in _modules():
        if module != "loomctx":
            layer = _layer_of(module)
            assert layer in RANK or layer.removeprefix("_") in RANK or layer == "_data", (
                f"`{module}` belongs to no layer; add it to LAYERS in {__file__}"
            )


def test_imports_point_downward() -> None:
    violations = []
    for path, module in _modules():
        if module == "loomctx":
            continue  # the package root re-exports the public API from every layer
        mine = RANK[_layer_of(module)]
        for target in _imports(path, module):
            theirs = RANK.get(_layer_of(target))
            if theirs is not None and theirs > mine:
                violations.append(f"{module} imports {target}")
    assert violations == []


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from loomctx.context.assembler import ContextAssembler\nimport loomctx.cli\n")
    assert _imports(bad, "loomctx.tokens") == ["loomctx.context.assembler", "loomctx.cli"]
    rel = tmp_path / "__init__.py"
    rel.write_text("from ..memory import x\nfrom . import y\n")
    assert _imports(rel, "loomctx.context.sources") == [
        "loomctx.context.memory",
        "loomctx.context.sources",
    ]

"""No import cycles between the modules of one package.

Every import counts: at the top of a module, inside a function, and under
``if TYPE_CHECKING:``. A cycle hidden behind one of the last two still ties the two modules
together (neither can be understood, moved or tested without the other); the value that ties
them belongs a floor lower, in a small module both import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import loomctx

ROOT = Path(loomctx.__file__).parent


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(path: Path, module: str, known: dict[str, Path]) -> set[str]:
    """Every `loomctx` module that `module` imports, wherever the import statement is."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.add(target)
            # `from loomctx.agent import tools` imports the module `loomctx.agent.tools`.
            found |= {f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known}
    return {name for name in found if name in known and name != module}


def _package(module: str) -> str:
    return module.rpartition(".")[0]


def _graph() -> dict[str, set[str]]:
    """Imports between siblings: modules of the same package (a package's `__init__` is a
    module of the package above it)."""
    known = _modules()
    return {
        module: {t for t in _imports(path, module, known) if _package(t) == _package(module)}
        for module, path in known.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_a_cycle(graph, set(c)) for c in components]


def _a_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, for the message."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    return [*paths[node], start]
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"{sorted(component)} is not strongly connected")


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle() -> None:
    graph = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.a"}, "p.e": set()}
    assert _cycles(graph) == [["p.a", "p.b", "p.c", "p.a"]]
    assert _cycles({"p.a": {"p.b"}, "p.b": set()}) == []


def test_the_graph_counts_type_checking_and_function_level_imports(tmp_path: Path) -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from loomctx.agent.tools import Tool\n"
        "def f():\n    from loomctx.agent import subagent\n"
    )
    path = tmp_path / "x.py"
    path.write_text(source, encoding="utf-8")
    found = _imports(path, "loomctx.agent.x", _modules())
    assert found == {"loomctx.agent", "loomctx.agent.tools", "loomctx.agent.subagent"}


def test_no_import_cycle_inside_a_package() -> None:
    cycles = _cycles(_graph())
    shown = "\n".join(" -> ".join(c) for c in cycles)
    assert cycles == [], (
        "import cycles between modules of one package (TYPE_CHECKING and function-level "
        f"imports count); move the value that ties each cycle a floor lower:\n{shown}"
    )

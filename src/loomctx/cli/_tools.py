"""Loading the tools `loomctx chat --tools` gives the agent, from a Python file or module.

The module's `TOOLS` (a list of `Tool`s or typed functions) if it defines one, else every
module-level `Tool` (functions decorated with `@loomctx.tool`). Plain functions are not picked up
on their own: a helper imported into the module must not become something the model can call.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from loomctx.agent.tools import Tool, tool
from loomctx.errors import ConfigError

__all__ = ["load_tools"]


def _module(spec: str) -> object:
    path = Path(spec)
    if spec.endswith(".py"):
        if not path.is_file():
            raise ConfigError(f"tools file {spec!r} does not exist")
        name = f"loom_cli_tools_{path.stem}"
        loader = importlib.util.spec_from_file_location(name, path)
        assert loader is not None  # a `.py` path always has a source loader
        assert loader.loader is not None
        module = importlib.util.module_from_spec(loader)
        sys.modules[name] = module  # dataclasses and typing resolve names through it
        try:
            loader.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[name]
            raise ConfigError(f"tools file {spec!r} failed to load: {exc!r}") from exc
        return module
    try:
        return importlib.import_module(spec)
    except ImportError as exc:
        raise ConfigError(
            f"cannot import tools module {spec!r} ({exc}); give a `.py` file path or an "
            "importable module name"
        ) from exc


def load_tools(spec: str) -> list[Tool]:
    """The tools of the file or module `spec` (see the module docstring)."""
    module = _module(spec)
    listed = getattr(module, "TOOLS", None)
    if listed is not None:
        if not isinstance(listed, list | tuple):
            raise ConfigError(f"`TOOLS` in {spec!r} must be a list of tools or functions")
        return [t if isinstance(t, Tool) else tool(t) for t in listed]
    found = [v for v in vars(module).values() if isinstance(v, Tool)]
    if not found:
        raise ConfigError(
            f"{spec!r} defines no tools: decorate functions with `@loomctx.tool`, or list them "
            "in `TOOLS = [...]`"
        )
    return found

"""Every example runs to completion (a smoke test: examples are documentation that must work).

An example is a script `examples/*.py` or a package folder with a `__main__.py`; both run as
``python <path>``, offline: `LOOM_MODEL` is removed, so examples that can use a real model
take their labelled offline path.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1] / "examples"
EXAMPLES = sorted([*ROOT.glob("*.py"), *(p.parent for p in ROOT.glob("*/__main__.py"))])


# Examples of the integrations need their framework (an optional extra).
NEEDS = {
    "openai_agents_memory": "agents",
    "pydantic_ai_memory": "pydantic_ai",
    "langgraph_memory": "langgraph",
}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(path: Path) -> None:
    needed = NEEDS.get(path.stem)
    if needed is not None and importlib.util.find_spec(needed) is None:
        pytest.skip(f"needs `{needed}` (an optional extra)")
    env = {k: v for k, v in os.environ.items() if k != "LOOM_MODEL"}
    done = subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def test_there_are_examples() -> None:
    assert {p.stem for p in EXAMPLES} >= {
        "assembler_demo",
        "context_window",
        "rag_agent",
        "text_to_sql",
    }

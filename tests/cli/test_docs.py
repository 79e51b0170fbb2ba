"""The documentation stays true: every public name documented, its quickstart exactly the two
commands that work from a clean clone. (Every snippet runs: `tests/test_docs_snippets.py`.)"""

from __future__ import annotations

import re
from pathlib import Path

import loomctx

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def test_every_public_name_is_in_the_api_reference() -> None:
    documented = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", (ROOT / "docs/api.md").read_text()))
    assert sorted(set(loomctx.__all__) - documented) == []


def test_the_quickstart_is_make_demo_and_make_test() -> None:
    quickstart = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    (block,) = _blocks(quickstart, "sh")
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo: \$\(STAMP\)\n\t\$\(BIN\)/loomctx demo$", makefile, re.M)


def test_the_readme_library_example_is_about_ten_lines() -> None:
    example = _blocks(README.split("## In your code", 1)[1], "python")[0]
    assert len([line for line in example.splitlines() if line.strip()]) <= 12


def test_linked_documents_exist() -> None:
    """Every relative link resolves from the file that holds it, as GitHub resolves it."""
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([\w/.-]+?)(?:#[\w-]+)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"

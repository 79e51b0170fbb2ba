"""docs/security.md says what Loom guarantees, with examples (which `tests/test_docs_snippets.py`
runs, as it runs every snippet of the documentation)."""

from __future__ import annotations

import re
from pathlib import Path

PAGE = Path(__file__).parents[2] / "docs" / "security.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


def test_the_page_has_an_isolation_section_with_examples() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert text.startswith("# Security\n")
    assert "\n## Isolation\n" in text
    assert len(BLOCKS) >= 3


def test_the_page_says_what_becomes_of_untrusted_text_with_examples() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert "\n## Untrusted text\n" in text
    section = text.split("\n## Untrusted text\n", 1)[1].split("\n## ", 1)[0]
    assert "\n### What Loom guarantees\n" in section
    assert "\n### What Loom leaves to the application\n" in section
    assert section.count("```python\n") >= 3

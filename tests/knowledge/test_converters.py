"""Loaders beyond Markdown: PDF, Word and HTML through markitdown, reStructuredText and code
built in. Each test writes a real file of its type (fpdf2, python-docx: the dev extra) and
ingests it; every chunk stays within the token limit, counted exactly."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import docx
import pytest
from fpdf import FPDF

from loomctx.errors import ConfigError, MissingExtraError
from loomctx.knowledge import KnowledgeBase, chunk_text
from loomctx.knowledge._converters import code_to_markdown, rst_to_markdown
from loomctx.tokens import TiktokenCounter

POLICY = "Damaged books are refunded in full within five days of the report."


def write_pdf(path: Path, paragraphs: int = 60) -> None:
    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("helvetica", size=11)
    pdf.multi_cell(0, 6, "Refund policy", new_x="LMARGIN", new_y="NEXT")
    for i in range(paragraphs):
        text = f"Clause {i}. {POLICY} Parcels ship from warehouse {i}."
        pdf.multi_cell(0, 6, text, new_x="LMARGIN", new_y="NEXT")
    pdf.output(str(path))


def write_docx(path: Path) -> None:
    document = docx.Document()
    document.add_heading("Refund policy", level=1)
    document.add_paragraph(POLICY)
    document.add_heading("Shipping", level=2)
    for i in range(40):
        document.add_paragraph(
            f"Parcel rule {i}: parcels leave the warehouse at 16:00 on weekdays."
        )
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Carrier", "Days"
    table.cell(1, 0).text, table.cell(1, 1).text = "Parcelforce", "3"
    document.save(str(path))


HTML = (
    "<html><head><title>Help</title><script>stealCookies()</script>"
    "<style>p {color: red}</style></head><body><h1>Refunds</h1><p>" + POLICY + "</p>"
    "<h2>Carriers</h2><table><tr><th>Carrier</th><th>Days</th></tr>"
    "<tr><td>Parcelforce</td><td>3</td></tr></table></body></html>"
)

RST = """\
=========
Handbook
=========

Refunds
=======

Damaged books are refunded in full.

Shipping
--------

Parcels leave at 16:00.

Returns
=======

Send it back within 30 days.
"""

PYTHON = '''\
"""Refund rules."""

import math

# A refund is paid in full for damaged books.
@dataclass
class Refund:
    amount: float

    def total(self) -> float:
        return self.amount


def refund_days(order: str) -> int:
    """How long a refund takes."""
    # five days, always
    return 5
'''


def _counted(kb: KnowledgeBase, limit: int) -> None:
    """Every stored chunk's search text is within `limit` tokens, counted whole."""
    counter = TiktokenCounter()
    records = kb.store.scan(kb.namespace, kind="kb_chunk")
    assert records
    assert max(counter.count(r.text) for r in records) <= limit


def test_a_pdf_is_ingested_as_text(tmp_path: Path) -> None:
    write_pdf(tmp_path / "policy.pdf")
    kb = KnowledgeBase("docs", chunk_tokens=64, overlap_tokens=8)
    kb.add_file(tmp_path / "policy.pdf", document_id="policy")
    hit = kb.search_sync("clause 37 refunded", limit=1)[0]
    assert "Clause 37. Damaged books are refunded" in hit.text
    assert kb.documents()[0].chunks > 10
    _counted(kb, 64)


def test_a_word_file_keeps_its_headings_and_tables(tmp_path: Path) -> None:
    write_docx(tmp_path / "policy.docx")
    kb = KnowledgeBase("docs", chunk_tokens=80, overlap_tokens=10)
    kb.add_file(tmp_path / "policy.docx", document_id="policy")
    hit = kb.search_sync("Parcelforce carrier days", limit=1)[0]
    assert hit.metadata["headings"] == "Refund policy > Shipping"
    assert "| Parcelforce | 3 |" in hit.text
    assert kb.search_sync("refunded in full")[0].metadata["headings"] == "Refund policy"
    _counted(kb, 80)


def test_html_loses_its_scripts_and_keeps_its_structure(tmp_path: Path) -> None:
    (tmp_path / "help.html").write_text(HTML, encoding="utf-8")
    kb = KnowledgeBase("docs")
    kb.add_file(tmp_path / "help.html", document_id="help")
    texts = [h.text for h in kb.search_sync("refunded carriers parcelforce", limit=5)]
    joined = "\n".join(texts)
    assert POLICY in joined
    assert "| Parcelforce | 3 |" in joined
    assert "stealCookies" not in joined
    assert "color: red" not in joined


def test_rst_section_titles_become_headings() -> None:
    assert rst_to_markdown(RST).split("\n\n")[:4] == [
        "# Handbook",
        "## Refunds",
        "Damaged books are refunded in full.",
        "### Shipping",
    ]
    assert "## Returns" in rst_to_markdown(RST)
    # Too short an underline, or an indented line, is text; so is a lone rule.
    text = "Title\n===\n\n  Indented\n  --------\n\n----------\n"
    assert rst_to_markdown(text) == text


def test_an_rst_file_is_ingested_with_section_paths(tmp_path: Path) -> None:
    (tmp_path / "handbook.rst").write_text(RST, encoding="utf-8")
    kb = KnowledgeBase("docs")
    kb.add_file(tmp_path / "handbook.rst", document_id="handbook")
    (hit,) = kb.search_sync("parcels leave 16:00", limit=1)
    assert hit.metadata["headings"] == "Handbook > Refunds > Shipping"
    assert hit.metadata["title"] == "Handbook"


def test_code_is_cut_at_top_level_blocks_and_comments_stay_code() -> None:
    text = code_to_markdown(PYTHON, ".py")
    titles = [line for line in text.splitlines() if line.startswith("## ")]
    assert titles == [
        '## """Refund rules."""',
        "## import math",
        "## # A refund is paid in full for damaged books.",
        "## def refund_days(order: str) -> int:",
    ]
    chunks = chunk_text(text, counter=TiktokenCounter(), chunk_tokens=200)
    bodies = "\n".join(c.body for c in chunks)
    # Every line of the code is in the chunks, and `#` comments were not read as headings.
    assert all(line.strip() in bodies for line in PYTHON.splitlines())
    assert {c.headings for c in chunks} == {(t[3:],) for t in titles}
    assert code_to_markdown("x = '```'\n", ".py").startswith("## x = '```'\n\n````python\n")


def test_a_code_file_is_found_by_its_definitions(tmp_path: Path) -> None:
    (tmp_path / "refunds.py").write_text(PYTHON, encoding="utf-8")
    (tmp_path / "app.ts").write_text("export function ship(): number {\n  return 3;\n}\n")
    kb = KnowledgeBase("code")
    summary = kb.add_folder(tmp_path)
    assert summary.added == ("app.ts", "refunds.py")
    hit = kb.search_sync("refund_days", limit=1)[0]
    assert hit.document_id == "refunds.py"
    assert hit.metadata["headings"] == "def refund_days(order: str) -> int:"
    shipped = kb.search_sync("ship", limit=1)[0]
    assert shipped.metadata["headings"] == "export function ship(): number {"
    assert "```typescript\nexport function ship(): number {\n  return 3;\n}\n```" in shipped.text


def test_a_broken_file_is_skipped_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "scan.pdf").write_bytes(b"%PDF-1.7 not really")
    (tmp_path / "memo.docx").write_bytes(b"PK not a zip")
    (tmp_path / "ok.md").write_text("Fine.")
    summary = KnowledgeBase("docs").add_folder(tmp_path)
    assert summary.added == ("ok.md",)
    reasons = {s.path: (s.kind, s.reason) for s in summary.skipped}
    assert reasons["scan.pdf"][0] == reasons["memo.docx"][0] == "unreadable"
    assert "could not convert" in reasons["scan.pdf"][1]
    assert "valid .docx file" in reasons["memo.docx"][1]
    with pytest.raises(ConfigError, match=r"could not convert .*scan\.pdf"):
        KnowledgeBase("one").add_file(tmp_path / "scan.pdf")


def test_without_the_extra_the_error_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loomctx.knowledge import _converters

    write_pdf(tmp_path / "policy.pdf", paragraphs=2)
    (tmp_path / "ok.md").write_text("Fine.")
    monkeypatch.setitem(sys.modules, "markitdown.converters", None)  # as if not installed
    monkeypatch.setattr(_converters, "_made", {})
    with pytest.raises(MissingExtraError, match=r"pip install 'loomctx\[loaders\]'"):
        KnowledgeBase("one").add_file(tmp_path / "policy.pdf")
    summary = KnowledgeBase("docs").add_folder(tmp_path)
    assert summary.added == ("ok.md",)
    (skipped,) = summary.skipped
    assert (skipped.path, skipped.kind) == ("policy.pdf", "no_loader")
    assert "pip install 'loomctx[loaders]'" in skipped.reason


def test_the_extra_is_importable() -> None:
    assert importlib.import_module("markitdown.converters").PdfConverter is not None

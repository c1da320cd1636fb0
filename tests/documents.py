"""Real PDF and DOCX files for tests, written by real writers (fpdf2, python-docx), so no binary fixture
is checked in and no byte is hand-written."""

from __future__ import annotations

import io


def pdf_bytes(pages: list[list[str]]) -> bytes:
    """A PDF written by fpdf2, one A4 page per entry, each line drawn as text in Helvetica (so pypdf
    extracts it); an empty entry is a page without text, as a blank or scanned page is."""
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.set_font("Helvetica", size=11)
    for lines in pages:
        pdf.add_page()
        for line in lines:
            pdf.cell(text=line, new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())


def docx_bytes(paragraphs: list[str], table: list[list[str]] | None = None) -> bytes:
    """A real Word document (python-docx) with these paragraphs and an optional table."""
    import docx

    document = docx.Document()
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                grid.cell(r, c).text = value
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def written_pdf_bytes(pages: list[list[str]]) -> bytes:
    """A PDF written by a real PDF writer (fpdf2), one page per entry, each line a paragraph of text."""
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.set_font("Helvetica", size=12)
    for lines in pages:
        pdf.add_page()
        for line in lines:
            pdf.multi_cell(0, 8, line, new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())


def table_pdf_bytes(before: str, rows: list[list[str]], after: str, *, boxed: str = "") -> bytes:
    """A PDF written by fpdf2: a paragraph, a table with ruled cells (fpdf2's table API; the first row
    its header), a paragraph, and, when `boxed` is given, that text framed by one rectangle after it."""
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.set_font("Helvetica", size=10)
    pdf.add_page()
    pdf.multi_cell(0, 5, text=before, new_x="LMARGIN", new_y="NEXT")
    pdf.ln(4)
    with pdf.table() as table:
        for cells in rows:
            row = table.row()
            for cell in cells:
                row.cell(cell)
    pdf.ln(4)
    pdf.multi_cell(0, 5, text=after, new_x="LMARGIN", new_y="NEXT")
    if boxed:
        pdf.add_page()
        pdf.multi_cell(0, 5, text=boxed, border=1, new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())

"""Real office files for tests, written by the formats' own libraries (openpyxl, python-pptx, odfpy,
ebooklib, msoffcrypto-tool), so no binary fixture is checked in and no byte is hand-written."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

Rows = Sequence[Sequence[Any]]


def xlsx_file(path: Path, sheets: dict[str, Iterable[Sequence[Any]]]) -> Path:
    """A workbook (openpyxl, write-only: streams, so 100,000 rows stay cheap) with these sheets."""
    import openpyxl

    workbook = openpyxl.Workbook(write_only=True)
    for name, rows in sheets.items():
        sheet = workbook.create_sheet(name)
        for row in rows:
            sheet.append(list(row))
    workbook.save(path)
    return path


def pptx_file(path: Path, slides: Sequence[dict]) -> Path:
    """A presentation (python-pptx): each slide's "title", "body" lines, "table" rows, "notes"."""
    from pptx import Presentation
    from pptx.util import Inches

    presentation = Presentation()
    for spec in slides:
        slide = presentation.slides.add_slide(presentation.slide_layouts[5])  # title only
        slide.shapes.title.text = spec.get("title", "")
        if spec.get("body"):
            box = slide.shapes.add_textbox(Inches(1), Inches(2), Inches(8), Inches(1))
            box.text_frame.text = "\n".join(spec["body"])
        if spec.get("table"):
            rows = spec["table"]
            table = slide.shapes.add_table(len(rows), len(rows[0]), Inches(1), Inches(3.5), Inches(8),
                                           Inches(2)).table
            for r, row in enumerate(rows):
                for c, value in enumerate(row):
                    table.cell(r, c).text = str(value)
        if spec.get("notes"):
            slide.notes_slide.notes_text_frame.text = spec["notes"]
    presentation.save(str(path))
    return path


def ods_file(path: Path, sheets: dict[str, Rows]) -> Path:
    """A spreadsheet (odfpy) with these sheets; numbers are stored as float cells."""
    from odf.opendocument import OpenDocumentSpreadsheet
    from odf.table import Table, TableCell, TableRow
    from odf.text import P

    document = OpenDocumentSpreadsheet()
    for name, rows in sheets.items():
        table = Table(name=name)
        for row in rows:
            table_row = TableRow()
            for value in row:
                if isinstance(value, (int, float)):
                    cell = TableCell(valuetype="float", value=value)
                else:
                    cell = TableCell(valuetype="string")
                cell.addElement(P(text=str(value)))
                table_row.addElement(cell)
            table.addElement(table_row)
        document.spreadsheet.addElement(table)
    document.save(str(path))
    return path


def _odf_table(rows: Rows, name: str) -> Any:
    from odf.table import Table, TableCell, TableColumn, TableRow
    from odf.text import P

    table = Table(name=name)
    table.addElement(TableColumn(numbercolumnsrepeated=len(rows[0])))
    for row in rows:
        table_row = TableRow()
        for value in row:
            cell = TableCell(valuetype="string")
            cell.addElement(P(text=str(value)))
            table_row.addElement(cell)
        table.addElement(table_row)
    return table


def odp_file(path: Path, slides: Sequence[dict]) -> Path:
    """A presentation (odfpy): each slide's "title", "body" lines, "table" rows and "notes"."""
    from odf.draw import Frame, Page, TextBox
    from odf.opendocument import OpenDocumentPresentation
    from odf.presentation import Notes
    from odf.style import MasterPage, PageLayout, PageLayoutProperties
    from odf.text import P

    document = OpenDocumentPresentation()
    layout = PageLayout(name="Layout")
    layout.addElement(PageLayoutProperties(pagewidth="28cm", pageheight="21cm", printorientation="landscape"))
    document.automaticstyles.addElement(layout)
    master = MasterPage(name="Master", pagelayoutname=layout)
    document.masterstyles.addElement(master)

    def text_frame(lines: Sequence[str], y: str) -> Any:
        frame = Frame(width="24cm", height="3cm", x="2cm", y=y)
        box = TextBox()
        for line in lines:
            box.addElement(P(text=line))
        frame.addElement(box)
        return frame

    for number, spec in enumerate(slides, start=1):
        page = Page(masterpagename=master, name=f"page{number}")
        page.addElement(text_frame([spec.get("title", "")], "1cm"))
        if spec.get("body"):
            page.addElement(text_frame(spec["body"], "5cm"))
        if spec.get("table"):
            frame = Frame(width="24cm", height="6cm", x="2cm", y="9cm")
            frame.addElement(_odf_table(spec["table"], f"Table{number}"))
            page.addElement(frame)
        if spec.get("notes"):
            notes = Notes()
            notes.addElement(text_frame([spec["notes"]], "15cm"))
            page.addElement(notes)
        document.presentation.addElement(page)
    document.save(str(path))
    return path


def odt_file(path: Path, blocks: Sequence[tuple[int | None, str] | Rows]) -> Path:
    """A text document (odfpy): (level, heading) tuples are headings, (None, text) paragraphs, and a
    list of rows a table."""
    from odf.opendocument import OpenDocumentText
    from odf.text import H, P

    document = OpenDocumentText()
    for number, block in enumerate(blocks, start=1):
        if isinstance(block, tuple):
            level, text = block
            document.text.addElement(H(outlinelevel=level, text=text) if level else P(text=text))
        else:
            document.text.addElement(_odf_table(block, f"Table{number}"))
    document.save(str(path))
    return path


def epub_file(path: Path, chapters: Sequence[tuple[str, str]]) -> Path:
    """A book (ebooklib) of (title, HTML body) chapters, in reading order."""
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("hdrag-test-book")
    book.set_title("Field notes")
    book.set_language("en")
    items = []
    for number, (title, body) in enumerate(chapters, start=1):
        chapter = epub.EpubHtml(title=title, file_name=f"chapter{number}.xhtml", lang="en")
        chapter.content = f"<html><body><h1>{title}</h1>{body}</body></html>"
        book.add_item(chapter)
        items.append(chapter)
    book.toc = items
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = items
    epub.write_epub(str(path), book)
    return path


def docx_with_headings(path: Path, blocks: Sequence[tuple[int | None, str] | Rows]) -> Path:
    """A Word document (python-docx): (level, text) headings or (None, text) paragraphs, and tables."""
    import docx

    document = docx.Document()
    for block in blocks:
        if isinstance(block, tuple):
            level, text = block
            document.add_heading(text, level) if level else document.add_paragraph(text)
        else:
            table = document.add_table(rows=len(block), cols=len(block[0]))
            for r, row in enumerate(block):
                for c, value in enumerate(row):
                    table.cell(r, c).text = str(value)
    document.save(str(path))
    return path


def encrypted(path: Path, target: Path, password: str = "s3cret") -> Path:
    """`path` (an OOXML file) encrypted with a password by msoffcrypto-tool, as Office does it."""
    from msoffcrypto.format.ooxml import OOXMLFile

    with open(path, "rb") as plain, open(target, "wb") as out:
        OOXMLFile(plain).encrypt(password, out)
    return target

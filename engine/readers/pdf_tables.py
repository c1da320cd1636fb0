"""Tables in PDFs: a page's ruled tables as rows with their headers ("Country: France; Capital: Paris").

pdfplumber (MIT, over pdfminer.six) finds a table from its ruling lines and gives its cells; each table
is a `Part` placed at its page with its `region` (the table's box as fractions of the page, as OCR text's
is, so the document view can mark it), its first row the header of every other row (`tables.table_lines`,
as the DOCX and slide readers write theirs). The page's other text is read by pdfplumber too, in parts
before, between and after the tables (their own cells left out), in reading order.

Finding tables costs a page's full layout parse by pdfminer, several times pypdf's text extraction: only
a page whose vector paths draw a grid (`PdfTables.ruled`: at least `GRID_EDGES` distinct vertical and
horizontal rule positions among its path objects, read by PDFium in about a millisecond) is parsed, and a
page where no table is found keeps pypdf's text (the numbers: docs/benchmarks.md, bench.pdf_tables).
Tables are extra: a page PDFium or pdfminer cannot parse (pypdf could) keeps pypdf's text, logged.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.readers import Part
from engine.readers.tables import table_lines

# A grid: this many distinct x positions of vertical rules (or box sides) and y positions of horizontal
# ones. A framed code listing or a note box has two of each; a table of two columns and a header has three.
GRID_EDGES = 3
# A rule is at most THIN points across and at least RULE points long (shorter: an underline's piece).
THIN = 2.0
RULE = 8.0

logger = logging.getLogger(__name__)


def _parser_failures() -> tuple[type[Exception], ...]:
    """What PDFium, pdfminer and pdfplumber raise on a file they cannot parse (beyond their own errors,
    pdfminer has been seen to raise these builtins on malformed streams)."""
    from pdfminer.psexceptions import PSException
    from pdfplumber.utils.exceptions import PdfminerException
    from pypdfium2 import PdfiumError

    return PdfiumError, PSException, PdfminerException, ValueError, KeyError, TypeError, IndexError


class PdfTables:
    """The tables of one PDF's pages, read page by page (see the module); `close` when done."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pdfium: Any = None
        self.plumber: Any = None

    def ruled(self, number: int) -> bool:
        """Whether the 1-based page `number` draws a grid of rules (a table may be there)."""
        try:
            return self._ruled(number)
        except _parser_failures() as error:
            logger.warning("%s: page %d: no table search, PDFium cannot read it (%s)", self.path, number,
                           error)
            return False

    def _ruled(self, number: int) -> bool:
        import pypdfium2 as pdfium
        import pypdfium2.raw as pdfium_c

        if self.pdfium is None:
            self.pdfium = pdfium.PdfDocument(self.path)
        page = self.pdfium[number - 1]
        columns: set[int] = set()
        rows: set[int] = set()
        try:
            for path in page.get_objects(filter=(pdfium_c.FPDF_PAGEOBJ_PATH,)):
                left, bottom, right, top = path.get_bounds()
                width, height = right - left, top - bottom
                if width <= THIN and height >= RULE:
                    columns.add(round(left))
                elif height <= THIN and width >= RULE:
                    rows.add(round(bottom))
                elif width > THIN and height > THIN:
                    columns.update((round(left), round(right)))
                    rows.update((round(bottom), round(top)))
        finally:
            page.close()
        return len(columns) >= GRID_EDGES and len(rows) >= GRID_EDGES

    def parts(self, number: int, share: float) -> list[Part]:
        """The page's parts, text and tables in reading order; [] when no table is found on it (or
        pdfminer cannot parse the page: logged)."""
        try:
            return self._parts(number, share)
        except _parser_failures() as error:
            logger.warning("%s: page %d: tables not read, pdfminer cannot parse it (%s)", self.path, number,
                           error)
            return []

    def _parts(self, number: int, share: float) -> list[Part]:
        import pdfplumber

        if self.plumber is None:
            self.plumber = pdfplumber.open(self.path)
        page = self.plumber.pages[number - 1]
        try:
            found = sorted(page.find_tables(), key=lambda table: (table.bbox[1], table.bbox[0]))
            if not found:
                return []
            boxes = [table.bbox for table in found]
            parts = []
            for index, table in enumerate([*found, None]):
                above = table.bbox[1] if table is not None else float("inf")
                after = boxes[index - 1][1] if index else float("-inf")
                text = _text_between(page, boxes, after, above)
                if text:
                    parts.append(Part(text, {"page": number}, share))
                if table is not None and (lines := table_lines(_cells(table.extract()))):
                    parts.append(Part("\n".join(lines), {"page": number, "region": _region(page, table.bbox)},
                                      share))
            return parts
        finally:
            page.close()

    def close(self) -> None:
        for document in (self.pdfium, self.plumber):
            if document is not None:
                document.close()


def _inside(obj: dict[str, Any], box: Sequence[float]) -> bool:
    """Whether the middle of a pdfplumber object lies in `box` (x0, top, x1, bottom)."""
    middle_x, middle_y = (obj["x0"] + obj["x1"]) / 2, (obj["top"] + obj["bottom"]) / 2
    return box[0] <= middle_x <= box[2] and box[1] <= middle_y <= box[3]


def _text_between(page: Any, boxes: list[Sequence[float]], after: float, before: float) -> str:
    """The page's text outside every table whose top lies from `after` to before `before`."""
    def wanted(obj: dict[str, Any]) -> bool:
        return after <= obj["top"] < before and not any(_inside(obj, box) for box in boxes)

    return (page.filter(wanted).extract_text() or "").strip()


def _cells(rows: list[list[str | None]]) -> list[list[str]]:
    """pdfplumber's cells as one line each ("" for a merged cell's None)."""
    return [[" ".join((cell or "").split()) for cell in row] for row in rows]


def _region(page: Any, box: Sequence[float]) -> list[float]:
    """A table's box as [left, top, right, bottom] fractions of the page (`engine.places` "region")."""
    x0, top, x1, bottom = page.bbox
    width, height = max(1e-6, x1 - x0), max(1e-6, bottom - top)
    values = ((box[0] - x0) / width, (box[1] - top) / height, (box[2] - x0) / width, (box[3] - top) / height)
    return [round(min(max(value, 0.0), 1.0), 4) for value in values]

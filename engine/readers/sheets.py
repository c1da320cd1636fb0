"""Spreadsheets: XLSX (openpyxl, read-only streaming), ODS (python-calamine) and CSV/TSV (stdlib csv).

Each sheet's first non-empty row is its header; every later row becomes "Header: value; ..." and
rows are grouped into parts of at most `PART_ROWS` rows and about `PART_CHARS` characters, each with
place {"sheet": name, "rows": [first, last], "columns": [first, last]} (a CSV's sheet is its file
stem). Rows stream: an XLSX sheet through openpyxl's read-only mode, a CSV line by line, so a sheet
of 100,000 rows is never held whole (an ODS sheet is read whole by calamine; the package's archive
caps bound it). A sheet of more than `ReadOptions.max_rows` rows is refused with that reason.
"""

from __future__ import annotations

import codecs
import csv
import io
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from engine.readers import Clock, DocumentError, Part, Reader, ReadOptions
from engine.readers.packages import check_package, damaged, package_sniffer
from engine.readers.tables import cell_text, header_names, row_text

PART_ROWS = 50
PART_CHARS = 2_000
_SNIFF_CHARS = 64 * 1024


class _Budget:
    """The caps of one document's read: rows per sheet and seconds in all."""

    def __init__(self, options: ReadOptions, label: str) -> None:
        self.options, self.label, self.clock = options, label, Clock(options, label)

    def check(self, sheet: str, rows: int) -> None:
        if rows > self.options.max_rows:
            raise DocumentError(f"the sheet {sheet!r} of the {self.label} file has more than "
                                f"{self.options.max_rows:,} rows (the limit); split it into smaller files")
        if rows % 1000 == 0:
            self.clock.check()


def _left(cells: Sequence[Any]) -> int:
    """The 1-based number of the row's first non-empty cell (its length + 1 for an empty row)."""
    return next((number for number, cell in enumerate(cells, start=1) if cell_text(cell)), len(cells) + 1)


def _width(cells: Sequence[Any]) -> int:
    """The 1-based number of the row's last non-empty cell (0 for an empty row)."""
    for number in range(len(cells), 0, -1):
        if cell_text(cells[number - 1]):
            return number
    return 0


def sheet_parts(sheet: str, rows: Iterable[tuple[int, Sequence[Any]]], budget: _Budget,
                share: Callable[[], float], first_column: int = 1) -> Iterator[Part]:
    """One sheet's parts from its (row number, cells) in order (see the module)."""
    headers: list[str] | None = None
    lines: list[str] = []
    first = last = width = chars = left = 0
    for count, (number, cells) in enumerate(rows, start=1):
        budget.check(sheet, count)
        if headers is None:
            headers = header_names(cells[:_width(cells)]) or None
            header_left = _left(cells)
            continue
        text = row_text(headers, cells)
        if not text:
            continue
        if lines and (len(lines) >= PART_ROWS or chars + len(text) > PART_CHARS):
            yield _part(sheet, lines, first, last, first_column, (left, width), share())
            lines, chars, width = [], 0, 0
        if not lines:
            first, left = number, header_left
        lines.append(text)
        last, chars, width = number, chars + len(text) + 1, max(width, _width(cells), len(headers))
        left = min(left, _left(cells))
    if lines:
        yield _part(sheet, lines, first, last, first_column, (left, width), share())


def _part(sheet: str, lines: list[str], first: int, last: int, first_column: int, span: tuple[int, int],
          share: float) -> Part:
    """A part of rows `first`..`last` whose non-empty cells lie in the sheet's columns `span` (1-based,
    counted from `first_column`, where the reader's rows start)."""
    columns = [first_column + span[0] - 1, first_column + span[1] - 1]
    place = {"sheet": sheet, "rows": [first, last], "columns": columns}
    return Part("\n".join(lines), place, min(1.0, share))


# ----------------------------------------------------------------------------- XLSX

def read_xlsx(path: Path, options: ReadOptions) -> Iterator[Part]:
    import openpyxl

    label = "Excel (XLSX)"
    check_package(path, options, label, "xl/workbook.xml")
    try:
        workbook = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except (KeyError, ValueError, OSError, EOFError) as error:
        raise damaged(label, error) from None
    budget = _Budget(options, label)
    try:
        sheets = workbook.worksheets
        for index, sheet in enumerate(sheets):
            declared = sheet.max_row or 0
            if declared > options.max_rows:  # the sheet's stored dimension refuses it before a row is read
                budget.check(sheet.title, declared)
            position = [0]

            def rows(sheet=sheet, position=position) -> Iterator[tuple[int, Sequence[Any]]]:
                for number, cells in enumerate(sheet.iter_rows(values_only=True), start=1):
                    position[0] = number
                    yield number, cells

            def share(index=index, declared=declared, position=position) -> float:
                return (index + min(1.0, position[0] / max(1, declared))) / len(sheets)

            yield from sheet_parts(sheet.title, rows(), budget, share)
    except (KeyError, ValueError, OSError, EOFError) as error:
        raise damaged(label, error) from None
    finally:
        workbook.close()


# ----------------------------------------------------------------------------- ODS

def read_ods(path: Path, options: ReadOptions) -> Iterator[Part]:
    from python_calamine import CalamineError, CalamineWorkbook

    label = "OpenDocument spreadsheet (ODS)"
    check_package(path, options, label, "content.xml")
    budget = _Budget(options, label)
    try:
        workbook = CalamineWorkbook.from_path(str(path))
        names = workbook.sheet_names
        for index, name in enumerate(names):
            sheet = workbook.get_sheet_by_name(name)
            budget.check(name, sheet.height)
            top, left = sheet.start or (0, 0)
            rows = ((top + number, cells) for number, cells in enumerate(sheet.iter_rows(), start=1))
            yield from sheet_parts(name, rows, budget, lambda index=index: (index + 1) / len(names), left + 1)
    except (CalamineError, ValueError, OSError) as error:
        raise damaged(label, error) from None


# ----------------------------------------------------------------------------- CSV / TSV

class _Counted(io.RawIOBase):
    """A binary file that counts the bytes read through it (a CSV's share read)."""

    def __init__(self, handle: io.BufferedReader) -> None:
        self.handle, self.count = handle, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # memoryview
        size = self.handle.readinto(buffer)
        self.count += size or 0
        return size or 0


def _dialect(sample: str, suffix: str) -> type[csv.Dialect] | csv.Dialect:
    if suffix == ".tsv":
        return csv.excel_tab
    try:
        return csv.Sniffer().sniff(sample, delimiters=",;\t|")
    except csv.Error:  # one column, or too irregular to tell: the comma of RFC 4180
        return csv.excel


def read_csv(path: Path, options: ReadOptions) -> Iterator[Part]:
    label = "CSV" if path.suffix.lower() != ".tsv" else "TSV"
    size = max(1, path.stat().st_size)
    with open(path, "rb") as raw:
        head = raw.read(_SNIFF_CHARS)
        raw.seek(0)
        sample = codecs.getincrementaldecoder("utf-8-sig")(errors="replace").decode(head)
        counted = _Counted(raw)
        text = io.TextIOWrapper(io.BufferedReader(counted), encoding="utf-8-sig", newline="")
        rows = enumerate(csv.reader(text, _dialect(sample, path.suffix.lower())), start=1)
        try:
            yield from sheet_parts(path.stem, rows, _Budget(options, label), lambda: counted.count / size)
        except UnicodeDecodeError as error:
            raise DocumentError(f"the {label} file is not UTF-8 text ({error.reason}); save it as "
                                f"\"CSV UTF-8\" and upload it again") from None
        except csv.Error as error:
            raise DocumentError(f"damaged {label} file: {error}") from None


def sniff_csv(head: bytes, suffix: str) -> bool:
    if suffix not in (".csv", ".tsv"):
        return False
    if b"\x00" in head:
        raise DocumentError(f"not a {suffix[1:].upper()} text file (binary data)")
    return True


READERS = (
    Reader("xlsx", (".xlsx", ".xlsm"),
           package_sniffer((".xlsx", ".xlsm"), "Excel (XLSX)"), read_xlsx, "Excel"),
    Reader("ods", (".ods",),
           package_sniffer((".ods",), "OpenDocument spreadsheet (ODS)",
                           b"application/vnd.oasis.opendocument.spreadsheet"), read_ods, "ODS"),
    Reader("csv", (".csv", ".tsv"), sniff_csv, read_csv, "CSV"),
)

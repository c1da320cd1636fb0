"""Where in its document a memory came from: the place keys a reader writes into a memory's metadata,
and the words a person reads for them ("page 12", "slide 4", "Budget!A40:F52").

One vocabulary for every reader (`engine.readers`), the document view, search hits and chat citations.
A reader sets only the keys that apply; all are optional, and a memory without any has no place
beyond its document. Keys (JSON values):

- ``page``: 1-based page of a PDF, or frame of a multi-page image (TIFF);
- ``slide``: 1-based slide of a presentation;
- ``sheet``: a spreadsheet's sheet name; ``rows``: [first, last] 1-based row numbers as the sheet
  numbers them; ``columns``: [first, last] 1-based column numbers;
- ``headings``: the heading path above the passage (Markdown, HTML, DOCX, ODT, EPUB), outermost first;
- ``lines``: [first, last] 1-based line numbers (source code, plain text);
- ``message``: the subject (or, without one, the 1-based number) of a mail message in an EML, MBOX or
  MSG file; ``attachment``: the file name of the attachment the passage was read from;
- ``region``: [left, top, right, bottom] of OCR text on its page image, or of a PDF table on its page,
  as fractions of its width and height (0..1), so the view can mark it at any scale.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PLACE_KEYS = ("page", "slide", "sheet", "rows", "columns", "headings", "lines", "message", "attachment",
              "region")


def column_letters(number: int) -> str:
    """1 → "A", 26 → "Z", 27 → "AA": a spreadsheet's name for a 1-based column number."""
    if number < 1:
        raise ValueError(f"a column number is 1-based, got {number}")
    letters = ""
    while number:
        number, remainder = divmod(number - 1, 26)
        letters = chr(ord("A") + remainder) + letters
    return letters


def _span(pair: Any) -> tuple[int, int] | None:
    if isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(n, int) for n in pair):
        return pair[0], pair[1]
    return None


def _cells(metadata: Mapping[str, Any]) -> str:
    """ "Budget!A40:F52" (or "Budget!40:52" without columns, "Budget" without rows)."""
    sheet, rows, columns = str(metadata["sheet"]), _span(metadata.get("rows")), _span(metadata.get("columns"))
    if rows is None:
        return sheet
    if columns is None:
        return f"{sheet}!{rows[0]}:{rows[1]}"
    first, last = column_letters(columns[0]), column_letters(columns[1])
    return f"{sheet}!{first}{rows[0]}:{last}{rows[1]}"


def place_parts(metadata: Mapping[str, Any]) -> list[str]:
    """The place of a memory as short phrases, outermost first (message before its attachment,
    attachment before its page): ["message “Budget”", "attachment plan.pdf", "page 3"]."""
    parts: list[str] = []
    if metadata.get("message"):
        parts.append(f"message “{metadata['message']}”")
    if metadata.get("attachment"):
        parts.append(f"attachment {metadata['attachment']}")
    if isinstance(metadata.get("page"), int):
        parts.append(f"page {metadata['page']}")
    if isinstance(metadata.get("slide"), int):
        parts.append(f"slide {metadata['slide']}")
    if metadata.get("sheet") is not None:
        parts.append(_cells(metadata))
    headings = metadata.get("headings")
    if isinstance(headings, list) and headings:
        parts.append(" › ".join(str(heading) for heading in headings))
    lines = _span(metadata.get("lines"))
    if lines is not None:
        parts.append(f"line {lines[0]}" if lines[0] == lines[1] else f"lines {lines[0]}–{lines[1]}")
    return parts


def place_label(metadata: Mapping[str, Any] | None) -> str:
    """The place in words ("page 12", "slide 4", "Budget!A40:F52", "lines 10–30"), "" when none."""
    return ", ".join(place_parts(metadata or {}))


def place_of(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """Only the place keys of a memory's metadata (what an API or a link carries)."""
    return {key: value for key, value in (metadata or {}).items() if key in PLACE_KEYS}

"""A table's row as text a search finds and a model reads: each cell with its column's header
("Region: North; Sales: 120"), shared by the spreadsheet, DOCX and slide readers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.places import column_letters


def cell_text(value: Any) -> str:
    """A cell's value as text: "" for empty, integers without ".0", everything else as str."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def header_names(cells: Sequence[Any]) -> list[str]:
    """The header row's names; an empty header cell is named by its column ("Column C")."""
    return [cell_text(cell) or f"Column {column_letters(number)}"
            for number, cell in enumerate(cells, start=1)]


def row_text(headers: Sequence[str], cells: Sequence[Any]) -> str:
    """"Header: value; ..." for the row's non-empty cells ("" for an empty row); cells past the header
    row are named by their column."""
    pairs = []
    for number, cell in enumerate(cells, start=1):
        value = cell_text(cell)
        if value:
            name = headers[number - 1] if number <= len(headers) else f"Column {column_letters(number)}"
            pairs.append(f"{name}: {value}")
    return "; ".join(pairs)


def table_lines(rows: Sequence[Sequence[Any]]) -> list[str]:
    """A small table (DOCX, slides) as lines: its first row is the header of every other row; a table of
    one row is that row's cells joined by " | "."""
    if not rows:
        return []
    if len(rows) == 1:
        return [" | ".join(text for text in map(cell_text, rows[0]) if text)]
    headers = header_names(rows[0])
    return [line for line in (row_text(headers, row) for row in rows[1:]) if line]

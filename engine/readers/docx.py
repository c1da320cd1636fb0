"""Word documents (python-docx): one part per section, place {"headings": [...]}, tables as rows.

A DOCX has no stored pagination (pages exist only once a word processor lays it out), so its place
is the heading path above a passage: the body is walked in order (paragraphs and tables as they
stand), a "Heading N" (or "Title") paragraph starts a new section, and each table row is read with
its header row's names ("Region: North; Sales: 120").
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path

from engine.readers import DocumentError, Part, Reader, ReadOptions
from engine.readers.packages import check_package, damaged, package_sniffer
from engine.readers.sections import heading_sections
from engine.readers.tables import table_lines

LABEL = "Word (DOCX)"


def heading_level(style_name: str) -> int | None:
    """1 for "Title" and "Heading 1", n for "Heading n", None for a body paragraph."""
    if style_name == "Title":
        return 1
    if style_name.startswith("Heading "):
        level = style_name.removeprefix("Heading ").strip()
        return int(level) if level.isdigit() else None
    return None


def _blocks(document) -> Iterator[tuple[int | None, str]]:  # a python-docx Document
    """(heading level or None, text) for each paragraph and table row block, in body order."""
    from docx.table import Table

    for block in document.iter_inner_content():
        if isinstance(block, Table):
            rows = [[cell.text for cell in row.cells] for row in block.rows]
            yield None, "\n".join(table_lines(rows))
        else:
            style = block.style.name if block.style is not None else ""
            yield heading_level(style or ""), block.text.strip()


def read(path: Path, options: ReadOptions) -> Iterator[Part]:
    """The document's sections in order, each with the heading path above it."""
    import docx
    from docx.opc.exceptions import PackageNotFoundError

    check_package(path, options, LABEL, "word/document.xml")
    try:
        blocks = list(_blocks(docx.Document(str(path))))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as error:
        raise DocumentError(f"not a readable Word document: {error}") from None
    except (OSError, EOFError, zipfile.LargeZipFile) as error:
        raise damaged(LABEL, error) from None
    yield from heading_sections(blocks)


READERS = (Reader("docx", (".docx",), package_sniffer((".docx",), LABEL), read, "Word"),)

"""Presentations: PPTX (python-pptx) and ODP (odfpy): one part per slide, place {"slide": n}.

A slide's part holds its title, the text of its other shapes in order (grouped shapes included),
its tables as rows with their header row ("Region: North; Sales: 120") and its speaker notes, after
"Notes:". A slide without any text yields no part.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.readers import Clock, DocumentError, Part, Reader, ReadOptions
from engine.readers.packages import check_package, damaged, package_sniffer
from engine.readers.tables import table_lines

PPTX_LABEL = "PowerPoint (PPTX)"
ODP_LABEL = "OpenDocument presentation (ODP)"


def slide_text(lines: list[str], notes: list[str]) -> str:
    body = "\n".join(line for line in (line.strip() for line in lines) if line)
    spoken = "\n".join(line for line in (line.strip() for line in notes) if line)
    return "\n\n".join(piece for piece in (body, f"Notes: {spoken}" if spoken else "") if piece)


# ----------------------------------------------------------------------------- PPTX

def _shape_lines(shapes: Any, skip: Any = None) -> Iterator[str]:
    """The text of `shapes` (a python-pptx shape collection) in order, tables as rows."""
    for shape in shapes:
        if skip is not None and shape.shape_id == skip.shape_id:
            continue
        if getattr(shape, "shapes", None) is not None:  # a group
            yield from _shape_lines(shape.shapes)
        elif getattr(shape, "has_table", False) and shape.has_table:
            yield from table_lines([[cell.text for cell in row.cells] for row in shape.table.rows])
        elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            yield shape.text_frame.text


def read_pptx(path: Path, options: ReadOptions) -> Iterator[Part]:
    from pptx import Presentation
    from pptx.exc import PackageNotFoundError

    check_package(path, options, PPTX_LABEL, "ppt/presentation.xml")
    try:
        slides = list(Presentation(str(path)).slides)
    except (PackageNotFoundError, KeyError, ValueError, OSError, EOFError) as error:
        raise damaged(PPTX_LABEL, error) from None
    if len(slides) > options.max_pages:
        raise DocumentError(f"the presentation has {len(slides):,} slides, more than the limit of "
                            f"{options.max_pages:,}")
    clock = Clock(options, PPTX_LABEL)
    for number, slide in enumerate(slides, start=1):
        clock.check()
        title = slide.shapes.title
        lines = [title.text_frame.text] if title is not None and title.has_text_frame else []
        lines.extend(_shape_lines(slide.shapes, skip=title))
        notes = [slide.notes_slide.notes_text_frame.text] if slide.has_notes_slide and \
            slide.notes_slide.notes_text_frame is not None else []
        text = slide_text(lines, notes)
        if text:
            yield Part(text, {"slide": number}, number / len(slides))


# ----------------------------------------------------------------------------- ODP

def odf_name(node: Any) -> str:
    """The local name of an odfpy node ("p", "table", ...), "" for text."""
    qname = getattr(node, "qname", None)
    return qname[1] if qname else ""


def _odf_lines(node: Any, lines: list[str], notes: list[str]) -> None:
    """The paragraphs and tables under an odfpy `node`, in order; a slide's notes go to `notes`."""
    from odf import teletype

    for child in node.childNodes:
        name = odf_name(child)
        if name == "notes":
            _odf_lines(child, notes, notes)
        elif name == "table":
            rows = [[teletype.extractText(cell) for cell in _children(row, "table-cell")]
                    for row in _descendants(child, "table-row")]
            lines.extend(table_lines(rows))
        elif name in ("p", "h"):
            lines.append(teletype.extractText(child))
        elif name:
            _odf_lines(child, lines, notes)


def _children(node: Any, name: str) -> list[Any]:
    return [child for child in node.childNodes if odf_name(child) == name]


def _descendants(node: Any, name: str) -> Iterator[Any]:
    for child in node.childNodes:
        if odf_name(child) == name:
            yield child
        elif odf_name(child) in ("table-rows", "table-header-rows", "table-row-group"):
            yield from _descendants(child, name)


def read_odp(path: Path, options: ReadOptions) -> Iterator[Part]:
    from odf.opendocument import load

    check_package(path, options, ODP_LABEL, "content.xml")
    try:
        document = load(str(path))
    except (KeyError, ValueError, OSError, EOFError, SyntaxError) as error:  # xml.sax errors are SyntaxErrors
        raise damaged(ODP_LABEL, error) from None
    pages = _children(document.presentation, "page")
    if len(pages) > options.max_pages:
        raise DocumentError(f"the presentation has {len(pages):,} slides, more than the limit of "
                            f"{options.max_pages:,}")
    clock = Clock(options, ODP_LABEL)
    for number, page in enumerate(pages, start=1):
        clock.check()
        lines: list[str] = []
        notes: list[str] = []
        _odf_lines(page, lines, notes)
        text = slide_text(lines, notes)
        if text:
            yield Part(text, {"slide": number}, number / len(pages))


READERS = (
    Reader("pptx", (".pptx",), package_sniffer((".pptx",), PPTX_LABEL), read_pptx, "PowerPoint"),
    Reader("odp", (".odp",),
           package_sniffer((".odp",), ODP_LABEL, b"application/vnd.oasis.opendocument.presentation"),
           read_odp, "ODP"),
)

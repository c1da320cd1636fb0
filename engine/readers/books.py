"""Text documents: ODT (odfpy), sections under their heading path, and EPUB (stdlib zipfile and the
portal's HTML text extractor, `engine.markup`), one part per chapter with place {"headings": [title]}.

An EPUB's chapters are its spine's documents in reading order (the OPF package file named by
``META-INF/container.xml``); a chapter's title is its first heading (h1-h6), else its <title>.
"""

from __future__ import annotations

import posixpath
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote
from xml.etree import ElementTree

from engine.markup import MarkupError, html_text
from engine.readers import Clock, DocumentError, Part, Reader, ReadOptions
from engine.readers.packages import check_package, damaged, package, package_sniffer
from engine.readers.sections import heading_sections
from engine.readers.slides import odf_name
from engine.readers.tables import table_lines

ODT_LABEL = "OpenDocument text (ODT)"
EPUB_LABEL = "EPUB"


# ----------------------------------------------------------------------------- ODT

def _odt_blocks(node: Any) -> Iterator[tuple[int | None, str]]:
    from odf import teletype

    for child in node.childNodes:
        name = odf_name(child)
        if name == "h":
            level = child.getAttribute("outlinelevel")
            yield int(level) if level and str(level).isdigit() else 1, teletype.extractText(child)
        elif name == "p":
            yield None, teletype.extractText(child)
        elif name == "table":
            rows = [[teletype.extractText(cell) for cell in row.childNodes if odf_name(cell) == "table-cell"]
                    for row in _rows(child)]
            yield None, "\n".join(table_lines(rows))
        elif name and name not in ("tracked-changes", "sequence-decls", "variable-decls"):
            yield from _odt_blocks(child)


def _rows(table: Any) -> Iterator[Any]:
    for child in table.childNodes:
        if odf_name(child) == "table-row":
            yield child
        elif odf_name(child) in ("table-rows", "table-header-rows", "table-row-group"):
            yield from _rows(child)


def read_odt(path: Path, options: ReadOptions) -> Iterator[Part]:
    from odf.opendocument import load

    check_package(path, options, ODT_LABEL, "content.xml")
    try:
        blocks = list(_odt_blocks(load(str(path)).text))
    except (KeyError, ValueError, OSError, EOFError, SyntaxError) as error:  # xml.sax errors are SyntaxErrors
        raise damaged(ODT_LABEL, error) from None
    yield from heading_sections(blocks)


# ----------------------------------------------------------------------------- EPUB

_CONTAINER = "META-INF/container.xml"
_HEADING = re.compile(r"<h[1-6][^>]*>(.*?)</h[1-6]\s*>", re.IGNORECASE | re.DOTALL)
_TITLE = re.compile(r"<title[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)
_HEAD = re.compile(r"<head[\s>].*?</head\s*>", re.IGNORECASE | re.DOTALL)


def _xml(archive: zipfile.ZipFile, name: str) -> ElementTree.Element:
    try:
        return ElementTree.fromstring(archive.read(name))
    except KeyError:
        raise DocumentError(f"damaged {EPUB_LABEL} file: {name} is missing") from None
    except ElementTree.ParseError as error:
        raise DocumentError(f"damaged {EPUB_LABEL} file: {name} is not XML ({error})") from None


def spine(archive: zipfile.ZipFile) -> list[str]:
    """The package's chapter documents (member names) in reading order."""
    rootfile = next((e for e in _xml(archive, _CONTAINER).iter() if e.tag.endswith("rootfile")), None)
    opf = rootfile.get("full-path") if rootfile is not None else None
    if not opf:
        raise DocumentError(f"damaged {EPUB_LABEL} file: {_CONTAINER} names no package file")
    package_xml = _xml(archive, opf)
    hrefs = {item.get("id"): item.get("href") for item in package_xml.iter() if item.tag.endswith("}item")}
    base = posixpath.dirname(opf)
    order = [hrefs.get(ref.get("idref")) for ref in package_xml.iter() if ref.tag.endswith("}itemref")]
    return [posixpath.normpath(posixpath.join(base, unquote(href))) for href in order if href]


def _line(fragment: str) -> str:
    return " ".join("".join(html_text([fragment])).split())


def chapter_part(markup: str, share: float) -> Part | None:
    text = "".join(html_text([_HEAD.sub("", markup, count=1)])).strip()  # the <title> is not the text
    if not text:
        return None
    found = _HEADING.search(markup) or _TITLE.search(markup)
    title = _line(found.group(1)) if found else ""
    return Part(text, {"headings": [title]} if title else {}, share)


def read_epub(path: Path, options: ReadOptions) -> Iterator[Part]:
    with package(path, options, EPUB_LABEL, _CONTAINER) as archive:
        chapters = spine(archive)
        clock = Clock(options, EPUB_LABEL)
        for number, name in enumerate(chapters, start=1):
            clock.check()
            try:
                markup = archive.read(name).decode("utf-8-sig", errors="replace")
            except KeyError:
                raise DocumentError(f"damaged {EPUB_LABEL} file: the chapter {name} is missing") from None
            except (zipfile.BadZipFile, OSError, EOFError) as error:
                raise damaged(EPUB_LABEL, error) from None
            try:
                part = chapter_part(markup, number / len(chapters))
            except MarkupError as error:
                raise DocumentError(f"damaged {EPUB_LABEL} file: the chapter {name}: {error}") from None
            if part is not None:
                yield part


READERS = (
    Reader("odt", (".odt",),
           package_sniffer((".odt",), ODT_LABEL, b"application/vnd.oasis.opendocument.text"),
           read_odt, "ODT"),
    Reader("epub", (".epub",),
           package_sniffer((".epub",), EPUB_LABEL, b"application/epub+zip"), read_epub, "EPUB"),
)
